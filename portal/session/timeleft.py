"""The session's time left, for JupyterLab's status bar and its warning.

    GET {base_url}portal/api/session[?fresh=1]
    -> {"job_id": "123", "end": "2026-11-23T18:23:05+00:00", "seconds_left": 3540,
        "warn_minutes": 15, "extend_url": "/hub/home"}

``end`` is the job's end as Slurm has it (``portal.session.jobend``), read at
most every 20 s for all tabs together; ``?fresh=1`` (a tab opened or focused
again, after an extension perhaps) takes one at most 2 s old. When Slurm
cannot say, ``end`` and ``seconds_left`` are null and ``reason`` says why.
Behind the server's own login, like the TensorBoard API: only its owner.
"""

import json
import os

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from .jobend import FRESH_AGE, JOB_ENV, JobEnd, extend_url, session_model, warn_minutes


def session_settings(log=None, environ=os.environ):
    """The handler's arguments, from the session's environment."""
    return {
        "job_end": JobEnd(environ.get(JOB_ENV, ""), log=log),
        "warn_minutes": warn_minutes(environ),
        "extend_url": extend_url(environ),
    }


class SessionAPIHandler(APIHandler):
    auth_resource = "server"
    # JupyterLab asks every minute by itself: that is not the user's activity,
    # which the hub's idle check counts
    _track_activity = False

    def initialize(self, job_end, warn_minutes, extend_url):
        self.job_end = job_end
        self.warn_minutes = warn_minutes
        self.extend_url = extend_url

    @web.authenticated
    @authorized
    async def get(self):
        fresh = self.get_argument("fresh", "") not in ("", "0")
        end, reason = await self.job_end.get(max_age=FRESH_AGE if fresh else None)
        self.set_header("Cache-Control", "no-store")
        model = session_model(self.job_end.job_id, end, reason, self.warn_minutes, self.extend_url)
        self.finish(json.dumps(model))
