"""The hub's spawn requests, with a stop during the spawn answered as a stop.

JupyterHub's stop (``DELETE /hub/api/users/NAME/server``) cancels a pending
spawn. The request that started it, the REST API's ``POST`` or the spawn
form's, waits up to ``slow_spawn_timeout`` for that spawn and gets its
CancelledError: Tornado answers 500 and logs it as an uncaught exception. A
spawn cancelled by a stop is no error: here the POST answers 202, as it does
when the stop comes after it answered, and the form goes on to the spawn
page, which shows the server stopped. The stop itself (scancel of the job)
is the spawner's ``stop``, run by the DELETE as usual.

A stop asked by the idle culler (the hub service ``idle-culler``, see
``spawners.hub_config.configure_culling``) marks the spawner first
(``stop_reason = "idle"``), so the home page says the session was stopped
after so long idle.

``install()`` replaces JupyterHub's handler classes in its route lists; the
hub's configuration calls it (``spawners.hub_config.configure_spawner``), so
importing this module changes nothing.
"""

import asyncio

from jupyterhub import apihandlers, handlers
from jupyterhub.apihandlers.users import UserServerAPIHandler
from jupyterhub.handlers.pages import SpawnHandler

from portal.core.idle import CULLER_SERVICE


class StoppableSpawnMixin:
    """``spawn_single_user`` that returns, rather than raises, when a stop
    cancelled the spawn it waits for."""

    spawn_stopped = False

    async def spawn_single_user(self, user, server_name="", *args, **kwargs):
        try:
            return await super().spawn_single_user(user, server_name, *args, **kwargs)
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():
                raise  # this request itself is cancelled (the hub is shutting down)
            self.spawn_stopped = True
            name = f"{user.name}/{server_name}" if server_name else user.name
            self.log.info("The spawn of %s was stopped before it finished", name)


class PortalUserServerAPIHandler(StoppableSpawnMixin, UserServerAPIHandler):
    async def post(self, user_name, server_name=""):
        await super().post(user_name, server_name)
        if self.spawn_stopped:
            self.set_status(202)  # accepted, then stopped: the user model shows no server

    async def delete(self, user_name, server_name=""):
        spawner = None
        caller = self.current_user
        if getattr(caller, "kind", "") == "service" and caller.name == CULLER_SERVICE:
            user = self.find_user(user_name)
            if user is not None and server_name in user.orm_spawners:
                spawner = user.spawners[server_name]
                spawner.stop_reason = "idle"  # read (and cleared) by PortalSpawner.stop
        try:
            await super().delete(user_name, server_name)
        finally:
            # PortalSpawner.stop takes the mark as it starts; a DELETE that
            # started no stop (refused, the server already stopped or
            # stopping) leaves it for nobody: a later stop is not the culler's
            if spawner is not None and not spawner._stop_pending:
                spawner.stop_reason = ""


class PortalSpawnHandler(StoppableSpawnMixin, SpawnHandler):
    pass


REPLACEMENTS = {
    UserServerAPIHandler: PortalUserServerAPIHandler,
    SpawnHandler: PortalSpawnHandler,
}


def install():
    """Put the handlers above in place of JupyterHub's (idempotent). Fails,
    and with it the hub's start, if a JupyterHub upgrade moved them."""
    for routes in (handlers.default_handlers, apihandlers.default_handlers):
        routes[:] = [(route, REPLACEMENTS.get(cls, cls), *rest) for route, cls, *rest in routes]
    installed = {cls for routes in (handlers.default_handlers, apihandlers.default_handlers)
                 for _, cls, *_ in routes}  # fmt: skip
    missing = [cls.__name__ for cls in REPLACEMENTS.values() if cls not in installed]
    if missing:
        raise RuntimeError(f"JupyterHub has no route for {', '.join(missing)} to replace")
