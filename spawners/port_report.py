"""The port report of batchspawner-singleuser, made safe.

batchspawner's handler at ``/hub/api/batchspawner`` sets every spawner
attribute named in the JSON it gets, checked only by the server's own token: a
user could set, say, the command the hub runs next. This one accepts
``{"port": N}`` and nothing else, with N a valid unprivileged port, once per
spawn, for the spawner that owns the token, while that spawner is starting (a
repeat of the same port is answered 200 and changes nothing).
``install()`` replaces batchspawner's entry in the hub's API handlers; the
hub's configuration calls it (``spawners.hub_config.configure_spawner``), so
importing this module changes nothing.
"""

import json

import batchspawner.api  # noqa: F401 (registers the handler replaced below)
from jupyterhub import apihandlers
from jupyterhub.apihandlers import APIHandler
from tornado import web

ROUTE = r"/api/batchspawner"


class PortReportHandler(APIHandler):
    @web.authenticated
    def post(self):
        token = self.get_auth_token()
        user = self.current_user
        spawner = next(
            (s for s in getattr(user, "spawners", {}).values() if s.api_token == token), None
        )
        if spawner is None or not hasattr(spawner, "report_port"):
            raise web.HTTPError(403, "This token belongs to no starting portal server")
        try:
            port = reported_port(self.request.body)
        except web.HTTPError as e:
            self.log.warning("Refused port report for %s: %s", user.name, e.log_message)
            raise
        if spawner.port_reported and spawner.port == port:
            # a report repeated because its answer was lost: taken, and nothing changes
            self.finish(json.dumps({"message": "port already recorded"}))
            return
        if spawner.pending != "spawn" or spawner.port_reported:
            raise web.HTTPError(409, "The port of this server was already reported")
        spawner.report_port(port)
        self.log.info("Server of %s reported port %s", user.name, port)
        self.set_status(201)
        self.finish(json.dumps({"message": "port recorded"}))


def reported_port(body):
    """The port of a report's body (bytes): ``{"port": N}`` and nothing else,
    N an unprivileged port; HTTPError 400 with the reason otherwise."""
    try:
        data = json.loads(body or b"")
    except ValueError:
        raise web.HTTPError(400, "The body must be JSON") from None
    if not isinstance(data, dict) or set(data) != {"port"}:
        raise web.HTTPError(400, 'Only {"port": N} is accepted')
    port = data["port"]
    if isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65535:
        raise web.HTTPError(400, "port must be a whole number from 1024 to 65535")
    return port


def install():
    """Replace batchspawner's handler in the hub's API handlers (idempotent)."""
    handlers = apihandlers.default_handlers
    handlers[:] = [h for h in handlers if h[0] != ROUTE]
    handlers.append((ROUTE, PortReportHandler))
