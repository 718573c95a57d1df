"""The TensorBoard API and proxy, behind the Jupyter server's own login.

    GET    {base_url}portal/api/tensorboards          the running ones
    POST   {base_url}portal/api/tensorboards          {"logdir": "logs"}: start or find
    DELETE {base_url}portal/api/tensorboards/{id}     stop
    *      {base_url}portal/tensorboard/{id}/...      TensorBoard itself

Under JupyterHub the server's login is the hub's OAuth: only the owner (and
who the hub grants ``access:servers`` on this server) gets past it.
"""

import json

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from tornado import web
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.httputil import HTTPHeaders

from .logdir import LogdirError, resolve_logdir
from .manager import TensorBoardStartError
from .proxy import merge_csp, request_headers, response_headers

AUTH_RESOURCE = "tensorboard"


class _ManagerMixin:
    auth_resource = AUTH_RESOURCE

    def initialize(self, manager):
        self.manager = manager


class TensorBoardsAPIHandler(_ManagerMixin, APIHandler):
    """List the running TensorBoards; start one for a log folder."""

    def refuse(self, status, message):
        self.log.info("TensorBoard request refused (%s): %s", status, message)
        self.set_status(status)
        self.finish(json.dumps({"message": message}))

    @web.authenticated
    @authorized
    def get(self):
        self.finish(json.dumps([tb.model() for tb in self.manager.list()]))

    @web.authenticated
    @authorized
    async def post(self):
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            return self.refuse(400, 'The body must be JSON: {"logdir": "FOLDER"}')
        if not isinstance(body, dict) or "logdir" not in body:
            return self.refuse(400, 'Name the log folder: {"logdir": "FOLDER"}')
        try:
            path = resolve_logdir(self.manager.root_dir, body["logdir"])
        except LogdirError as e:
            return self.refuse(400, str(e))
        try:
            tb, created = await self.manager.start(path)
        except TensorBoardStartError as e:
            return self.refuse(e.status, str(e))
        if created:
            self.set_status(201)
            self.set_header("Location", tb.url)
        self.finish(json.dumps(tb.model()))


class TensorBoardAPIHandler(_ManagerMixin, APIHandler):
    """Stop one TensorBoard."""

    @web.authenticated
    @authorized
    async def delete(self, tb_id):
        if not await self.manager.stop(tb_id):
            self.set_status(404)
            return self.finish(json.dumps({"message": f"No TensorBoard {tb_id}"}))
        self.set_status(204)
        self.finish()


class TensorBoardProxyHandler(_ManagerMixin, JupyterHandler):
    """TensorBoard's pages and data, from its Unix socket."""

    def check_xsrf_cookie(self):
        # TensorBoard's pages POST their (read-only) data queries without the
        # Jupyter server's XSRF token, as they would to TensorBoard itself; a
        # POST from another site is refused by its Origin instead.
        if not hasattr(self, "_jupyter_current_user"):
            return  # called by tornado before prepare(); prepare() calls it again
        if not self.check_origin():
            raise web.HTTPError(403, "Cross-origin request refused")

    def compute_etag(self):
        return None  # TensorBoard's own ETag, if any, passes through

    @web.authenticated
    @authorized
    async def get(self, tb_id, path):
        await self.proxy(tb_id, path)

    @web.authenticated
    @authorized
    async def head(self, tb_id, path):
        await self.proxy(tb_id, path)

    @web.authenticated
    @authorized
    async def post(self, tb_id, path):
        await self.proxy(tb_id, path)

    async def proxy(self, tb_id, path):
        tb = self.manager.get(tb_id)
        if tb is None or tb.client is None:
            raise web.HTTPError(
                404, "No TensorBoard %s here: it was stopped or never started", tb_id
            )
        if not path:
            # TensorBoard's own page is at the prefix with a slash
            query = f"?{self.request.query}" if self.request.query else ""
            return self.redirect(tb.url + query)
        tb.touch()
        method = self.request.method
        headers = HTTPHeaders()
        for name, value in request_headers(self.request.headers):
            headers.add(name, value)
        request = HTTPRequest(
            "http://tensorboard" + self.request.uri,
            method=method,
            headers=headers,
            body=self.request.body if method == "POST" else None,
            follow_redirects=False,
            decompress_response=False,  # gzip passes through
            connect_timeout=10,
            request_timeout=self.manager.request_timeout,
        )
        try:
            response = await tb.client.fetch(request, raise_error=False)
        except HTTPClientError as e:  # 599: the request timed out
            self.log.warning("TensorBoard %s for %s: %s", tb.id, tb.path, e)
            raise web.HTTPError(
                504, "TensorBoard for %s did not answer in time", tb.logdir or "~"
            ) from None
        except OSError as e:  # StreamClosedError included: the process is gone
            self.log.warning("TensorBoard %s for %s did not answer: %s", tb.id, tb.path, e)
            raise web.HTTPError(
                502, "TensorBoard for %s did not answer", tb.logdir or "~"
            ) from None

        self.set_status(response.code, response.reason)
        seen = set()
        for name, value in response_headers(response.headers, method):
            if name.lower() == "content-security-policy":
                value = merge_csp(value, self.content_security_policy)
            if name.lower() in seen:
                self.add_header(name, value)
            else:
                self.set_header(name, value)
                seen.add(name.lower())
        if response.body and method != "HEAD" and response.code not in (204, 304):
            self.write(response.body)
        await self.finish()
