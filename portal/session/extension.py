"""The Jupyter server extension app: handlers, settings, start and stop hooks."""

import os

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import url_path_join

from portal.contract import TENSORBOARD_API
from portal.session.activity import ActivityReporter
from portal.session.gpus import GPUsAPIHandler
from portal.session.nvml import NVMLReader
from portal.session.timeleft import SessionAPIHandler, session_settings

from .joblog import JOB_ID_PATTERN, JobLogHandler
from .tensorboard.handlers import (
    TensorBoardAPIHandler,
    TensorBoardProxyHandler,
    TensorBoardsAPIHandler,
)
from .tensorboard.logdir import ID_PATTERN
from .tensorboard.manager import TensorBoardManager

API_ENV = TENSORBOARD_API


def api_url(serverapp):
    """The API's URL for processes of the same node (kernels), or None."""
    if serverapp.sock or not serverapp.port:
        return None
    host = serverapp.ip
    if host in ("", "0.0.0.0", "*"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    scheme = "https" if serverapp.certfile else "http"
    return f"{scheme}://{host}:{serverapp.port}" + url_path_join(
        serverapp.base_url, "portal/api/tensorboards"
    )


class SessionExtension(ExtensionApp):
    name = "portal_session"
    description = "The session's own APIs: TensorBoard per user, the job log, time left, GPUs"
    load_other_extensions = True
    classes = [TensorBoardManager]

    def initialize_settings(self):
        self.manager = TensorBoardManager(
            parent=self,
            log=self.log,
            root_dir=os.path.expanduser(self.serverapp.root_dir),
            base_url=self.serverapp.base_url,
        )
        self.gpu_reader = NVMLReader()  # the job's own GPUs, for the API and the activity rule
        self.activity = None

    def initialize_handlers(self):
        kwargs = {"manager": self.manager}
        self.handlers.extend(
            [
                ("portal/api/tensorboards", TensorBoardsAPIHandler, kwargs),
                ("portal/api/tensorboards/([^/]+)", TensorBoardAPIHandler, kwargs),
                (f"portal/tensorboard/({ID_PATTERN})(/.*)?", TensorBoardProxyHandler, kwargs),
                (f"portal/joblog/({JOB_ID_PATTERN})", JobLogHandler),
                ("portal/api/session", SessionAPIHandler, session_settings(self.log)),
                ("portal/api/gpus", GPUsAPIHandler, {"reader": self.gpu_reader}),
            ]
        )

    async def _start_jupyter_server_extension(self, serverapp):
        # The server listens now: tell the kernels started from here where the API is.
        url = api_url(serverapp)
        if url:
            os.environ[API_ENV] = url
        # busy kernels and GPUs count as activity for the hub's idle culler
        self.activity = ActivityReporter.from_environ(serverapp, self.gpu_reader.read, log=self.log)
        if self.activity:
            self.activity.start()

    async def stop_extension(self):
        if self.activity:
            self.activity.stop()
        self.gpu_reader.close()
        await self.manager.stop_all()
