"""The session's own Slurm job log, served read-only to its owner.

    GET {base_url}portal/joblog/{job_id}    ~/.portal/logs/jupyter-{job_id}.log

The logs live in a hidden folder (``$PORTAL_LOG_DIR``, relative to the home);
the contents API keeps refusing hidden files (``allow_hidden`` stays off, so
``~/.ssh`` and other dotfiles are not served), and this one handler serves
only the files the batch script writes, by job id.
"""

import os

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from tornado import web

from portal.contract import SessionEnv

JOB_ID_PATTERN = r"[0-9]{1,12}"
MAX_BYTES = 4 * 1024 * 1024  # the last 4 MiB of a long log


def job_log_path(job_id, home=None, log_dir=None):
    """The log of ``job_id`` (ASCII digits), as the batch script names it."""
    if not (job_id.isascii() and job_id.isdigit()):
        raise ValueError(f"not a job id: {job_id!r}")
    home = home or os.path.expanduser("~")
    log_dir = log_dir or SessionEnv.from_environ().log_dir
    return os.path.join(home, log_dir, f"jupyter-{job_id}.log")


class JobLogHandler(JupyterHandler):
    auth_resource = "contents"

    @web.authenticated
    @authorized
    def get(self, job_id):
        path = job_log_path(job_id)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            raise web.HTTPError(
                404, f"No log of job {job_id} in ~/{os.path.dirname(path)}"
            ) from None
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - MAX_BYTES))
            data = f.read(MAX_BYTES)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.finish(data)
