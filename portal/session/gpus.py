"""The slice's own GPU use, for JupyterLab's status bar and the session card.

    GET {base_url}portal/api/gpus
    -> {"gpus": [{"index": 1, "uuid": "GPU-...", "name": "NVIDIA A100-SXM4-80GB",
                  "utilization": 87, "memory_used_mb": 30112, "memory_total_mb": 81920}],
        "reason": ""}

Only the GPUs of the session's Slurm job (``CUDA_VISIBLE_DEVICES``), read
through NVML (``portal.session.nvml``); never another job's. Without GPUs,
``gpus`` is empty and ``reason`` says why (no NVIDIA driver on the node, or
a job without GPUs). Behind the server's own login, like the TensorBoard
API: only its owner.
"""

import json

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web
from tornado.ioloop import IOLoop


class GPUsAPIHandler(APIHandler):
    auth_resource = "server"
    # JupyterLab's status bar asks by itself: that is not the user's activity,
    # which the hub's idle check counts
    _track_activity = False

    def initialize(self, reader):
        self.reader = reader

    @web.authenticated
    @authorized
    async def get(self):
        model = await IOLoop.current().run_in_executor(None, self.reader.read)
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(model))
