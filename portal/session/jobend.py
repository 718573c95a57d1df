"""The session's end as Slurm has it, for the time left that JupyterLab shows.

Read on the node with ``squeue -j $SLURM_JOB_ID -o %e``, at most once per
``max_age`` seconds however many browser tabs ask, so the end follows an
extension (``scontrol update JobId=J TimeLimit=...``) and never the hub's or
the browser's clock. Pure but for that squeue; no jupyter_server here
(``portal.session.timeleft`` serves it).
"""

import asyncio
import logging
import os
import time
from datetime import UTC, datetime

from portal.contract import SessionEnv
from portal.slurm import commands
from portal.slurm.parse import SlurmError, parse_end

JOB_ENV = "SLURM_JOB_ID"
WARN_ENV = SessionEnv.variable("warn_minutes")  # exported by the hub (portal.contract)
DEFAULT_WARN_MINUTES = SessionEnv.site_defaults().warn_minutes
MAX_AGE = 20.0  # seconds an end read from Slurm is served again
FRESH_AGE = 2.0  # seconds a request for a fresh end (a tab opened or focused) takes an old one
TIMEOUT = 10.0  # seconds squeue may take


async def squeue_end(job_id, timeout=TIMEOUT):
    """``(end, reason)`` of ``job_id``, from squeue; a failure is a reason, never raised."""
    try:
        output = await commands.job_end(
            job_id, os.environ.get("SLURM_CONF", ""), timeout, slurm_bin_dir()
        )
    except SlurmError as e:
        return None, str(e)
    except OSError as e:  # no squeue on this node
        return None, f"squeue could not run: {e.strerror or e}"
    return parse_end(output, job_id)


def slurm_bin_dir(environ=None):
    """The folder of Slurm's commands the hub told the session (``portal.contract``)."""
    return SessionEnv.from_environ(environ).slurm_bin_dir


class JobEnd:
    """The end of one job, read from Slurm at most once per ``max_age`` seconds.

    Requests that come while a read is under way wait for that one: many
    tabs cost one squeue. A failed read is kept as long as a good one, so a
    Slurm that does not answer is not asked by every tab either.
    """

    def __init__(
        self, job_id, *, max_age=MAX_AGE, timeout=TIMEOUT, read=squeue_end, clock=None, log=None
    ):
        self.job_id = job_id
        self.max_age = max_age
        self.timeout = timeout
        self._read = read
        self._clock = clock or time.monotonic
        self.log = log or logging.getLogger(__name__)
        self._value = None
        self._read_at = None
        self._reading = None

    async def get(self, max_age=None):
        """``(end, reason)``, read again when the last read is ``max_age``
        (default: the instance's) seconds old or more."""
        if not self.job_id:
            return None, "This server does not run in a Slurm job"
        max_age = self.max_age if max_age is None else max_age
        if self._read_at is not None and self._clock() - self._read_at < max_age:
            return self._value
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._refresh())
        # shielded: a request that goes away does not cancel the others' read
        return await asyncio.shield(self._reading)

    async def _refresh(self):
        try:
            end, reason = await self._read(self.job_id, self.timeout)
            if reason and (self._value is None or reason != self._value[1]):
                self.log.warning("No end time of job %s from Slurm: %s", self.job_id, reason)
            self._value, self._read_at = (end, reason), self._clock()
            return self._value
        finally:
            self._reading = None


def seconds_left(end, now):
    """Whole seconds from ``now`` to ``end`` (aware datetimes), never below 0."""
    return max(0, int((end - now).total_seconds()))


def warn_minutes(environ=os.environ):
    """``$PORTAL_WARN_MINUTES``: minutes before the end that JupyterLab warns
    (0: never); DEFAULT_WARN_MINUTES when unset or not a whole number."""
    return SessionEnv.from_environ(environ).warn_minutes


def extend_url(environ=os.environ):
    """The hub's home page, where a session is extended: ``/hub/home`` under
    the hub's base URL, on the hub's host when it has one of its own."""
    base = environ.get("JUPYTERHUB_BASE_URL") or "/"
    return environ.get("JUPYTERHUB_HOST", "") + base.rstrip("/") + "/hub/home"


def session_model(job_id, end, reason, warn, extend, now=None):
    """What ``GET portal/api/session`` answers."""
    now = now or datetime.now(UTC)
    model = {
        "job_id": job_id or None,
        "end": end.isoformat() if end else None,
        "seconds_left": seconds_left(end, now) if end else None,
        "warn_minutes": warn,
        "extend_url": extend,
    }
    if reason:
        model["reason"] = reason
    return model
