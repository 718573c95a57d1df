"""The proxy's routes against the running sessions, checked by the hub (issue 28).

Only the hub holds both: its running sessions and the proxy's token. Every
``interval`` seconds (``[metrics] route_check_seconds``, and once as the hub
starts) it reads the proxy's routing table (``app.proxy.get_all_routes``)
and compares the users' routes with its sessions that are ready:

- **missing**: a running session with no route (its owner gets the hub's
  "not running" page or a 503, though Slurm runs it);
- **stale**: a user's route to no running session (requests go to an
  address where nothing of theirs listens, or something else does).

A mismatch counts once it is seen in two checks in a row: a session that
starts or stops between reading the routes and the sessions is not one.
JupyterHub repairs routes itself every ``last_activity_interval``; this
says when they disagree meanwhile, or keep disagreeing.

The result goes to ``[hub] state_dir/proxy-routes.json`` (counts and times,
no user's name: ``portal.health`` serves it without a login), read by
``make health`` and the admin service's health check, and to the
``portal_proxy_routes{state}`` series (``spawners.metrics``).
"""

import asyncio
import json
import os
from datetime import UTC, datetime
from pathlib import Path

from traitlets.log import get_logger  # the hub's own log (JupyterHub's format)

FILE_NAME = "proxy-routes.json"


def compare(routes, running):
    """``(missing, stale)``: the running sessions ``{(user, server name)}``
    without a route among ``routes`` (the proxy's table, ``{spec: {"data":
    ...}}``), and the users' routes to no running session.

    >>> routes = {"/user/a/": {"data": {"user": "a", "server_name": ""}},
    ...           "/user/b/x/": {"data": {"user": "b", "server_name": "x"}},
    ...           "/": {"data": {"hub": True}}}
    >>> compare(routes, {("a", ""), ("c", "")})
    ({('c', '')}, {('b', 'x')})
    """
    routed = set()
    for route in routes.values():
        data = route.get("data") or {}
        if data.get("user"):
            routed.add((data["user"], data.get("server_name") or ""))
    return running - routed, routed - running


class RouteCheck:
    def __init__(self, app_of, path, interval):
        self.app_of = app_of  # () -> the running JupyterHub app, or None
        self.path = Path(path)
        self.interval = interval
        self.previous = (set(), set())  # the last check's (missing, stale)
        self.last = None  # the last result written
        self._task = None

    def start(self):
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self.run())

    async def run(self):
        while self.app_of() is None:  # the hub loads its users and proxy first
            await asyncio.sleep(1)
        while True:
            try:
                await self.check()
            except Exception:
                get_logger().exception("Checking the proxy's routes failed; it goes on")
            if self.interval <= 0:
                return
            await asyncio.sleep(self.interval)

    async def check(self):
        app = self.app_of()
        if app is None:
            return None
        running = {
            (user.name, name)
            for user in list(app.users.values())
            for name, spawner in list(user.spawners.items())
            if spawner.ready
        }
        try:
            routes = await app.proxy.get_all_routes()
        except Exception as e:  # noqa: BLE001 (the proxy's trouble is the answer)
            return self.write({"error": f"the proxy's routes could not be read: {e}"[:300],
                               "sessions": len(running)})  # fmt: skip
        missing, stale = compare(routes, running)
        # seen twice in a row: not a session starting or stopping meanwhile
        lasting = (missing & self.previous[0], stale & self.previous[1])
        self.previous = (missing, stale)
        for what, found in zip(("without a route", "a route to no session"), lasting, strict=True):
            if found:
                names = ", ".join(f"{u}/{s}" if s else u for u, s in sorted(found))
                get_logger().warning("Proxy routes: %d session(s) %s: %s", len(found), what, names)
        return self.write({"sessions": len(running), "routes": len(routes),
                           "missing": len(lasting[0]), "stale": len(lasting[1])})  # fmt: skip

    def write(self, result):
        result = {**result, "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
                  "interval": self.interval}  # fmt: skip
        self.last = result
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        os.chmod(tmp, 0o644)  # in the hub's own folder: the service and root read it
        os.replace(tmp, self.path)
        return result


_instance = None


def install(settings):
    """The hub's check, started with its event loop (``hub_config``)."""
    from jupyterhub.app import JupyterHub

    def app_of():
        app = JupyterHub.instance() if JupyterHub.initialized() else None
        return app if app is not None and app.tornado_settings else None

    global _instance
    path = Path(settings["hub"]["state_dir"]) / FILE_NAME
    interval = float(settings["metrics"]["route_check_seconds"])
    if _instance is None:
        _instance = RouteCheck(app_of, path, interval)
    else:  # configured again in one process: the same loop, its new settings
        _instance.app_of, _instance.path, _instance.interval = app_of, path, interval
    return _instance
