"""The session's activity, as the hub's idle culler is to see it.

**The rule** (``last_activity``): a session is active now while any of its
kernels is busy (executing, even a silent ``time.sleep`` loop that sends
nothing) or while any of its own GPUs (``portal.session.nvml``) has a
utilisation above ``gpu_busy_percent``. Otherwise its last activity is the
latest of: what its Jupyter server saw last (its owner's requests from
JupyterLab, terminal input and output, a kernel's messages) and the last
time the rule found it busy. The culler stops a session whose last activity
is older than its idle timeout.

JupyterHub's own singleuser server reports only the server's view, every
300 s; a kernel that computes silently, or a training loop on the GPU with
no output, looks idle to it. So the session's server runs an
``ActivityReporter`` that samples the rule every ``PORTAL_ACTIVITY_SECONDS``
and posts the result to the hub (``POST $JUPYTERHUB_API_URL/users/NAME/activity``
with the server's own token), whenever it is later than its last report.
A profile's longer idle time is the culler's to apply
(``portal.core.idle.cull_arbiter``): the session reports its real activity.
"""

import asyncio
import json
import logging
import os
from datetime import UTC, datetime
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from portal import tlscontext
from portal.contract import SessionEnv

SITE = SessionEnv.site_defaults()
DEFAULT_INTERVAL = SITE.activity_seconds
DEFAULT_GPU_BUSY_PERCENT = SITE.gpu_busy_percent

log = logging.getLogger("portal.session.activity")


def busy_reasons(kernel_states, gpu_utilizations, gpu_busy_percent):
    """What makes the session active now, beyond its server's own view: []
    when nothing does.

    >>> busy_reasons(["idle", "busy"], [3, None], 10)
    ['1 kernel busy']
    >>> busy_reasons([], [55, 10], 10)
    ['GPU utilisation 55% (above 10%)']
    >>> busy_reasons(["idle"], [10], 10)
    []
    """
    reasons = []
    busy = sum(1 for state in kernel_states if state == "busy")
    if busy:
        reasons.append(f"{busy} kernel{'s' if busy > 1 else ''} busy")
    high = [u for u in gpu_utilizations if u is not None and u > gpu_busy_percent]
    if high:
        shown = ", ".join(f"{u}%" for u in high)
        reasons.append(f"GPU utilisation {shown} (above {gpu_busy_percent:g}%)")
    return reasons


def last_activity(
    now, server_activity, kernel_states, gpu_utilizations, gpu_busy_percent, previous=None
):
    """The session's last activity at ``now`` (the rule above).

    ``server_activity``: the Jupyter server's own last activity;
    ``kernel_states``: each kernel's execution state (``"busy"``, ``"idle"``...);
    ``gpu_utilizations``: each of the job's GPUs' utilisation in percent
    (None: unknown); ``previous``: what this returned last time.
    """
    if busy_reasons(kernel_states, gpu_utilizations, gpu_busy_percent):
        return now
    return max(t for t in (server_activity, previous) if t is not None)


def isoformat(when):
    """An aware datetime as the hub's API takes it (UTC, ``Z``)."""
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


class ActivityReporter:
    """Samples the rule every ``interval`` seconds and reports it to the hub.

    ``server_activity()`` and ``kernel_states()`` come from the Jupyter server,
    ``read_gpus()`` is ``portal.session.nvml.NVMLReader.read`` (run in a worker
    thread). A report that fails (the hub restarting) is tried again at the
    next sample.
    """

    def __init__(
        self,
        *,
        server_activity,
        kernel_states,
        read_gpus,
        activity_url,
        token,
        server_name="",
        interval=DEFAULT_INTERVAL,
        gpu_busy_percent=DEFAULT_GPU_BUSY_PERCENT,
        ssl_options=None,
        log=log,
    ):
        self.server_activity = server_activity
        self.kernel_states = kernel_states
        self.read_gpus = read_gpus
        self.activity_url = activity_url
        self.token = token
        self.server_name = server_name
        self.interval = interval
        self.gpu_busy_percent = gpu_busy_percent
        self.ssl_options = ssl_options
        self.log = log
        self.last_active = None  # the rule's last result
        self.reported = None  # the last value the hub took
        self.reasons = []
        self._task = None

    @classmethod
    def from_environ(cls, serverapp, read_gpus, environ=os.environ, log=log):
        """A reporter for the Jupyter server ``serverapp``, set up from the
        variables the hub and the spawner export; None when the server runs
        without a hub or ``$PORTAL_ACTIVITY_SECONDS`` is 0."""
        hub = SessionEnv.from_environ(environ)
        interval = hub.activity_seconds
        token = environ.get("JUPYTERHUB_API_TOKEN", "")
        url = environ.get("JUPYTERHUB_ACTIVITY_URL", "")
        if not url and environ.get("JUPYTERHUB_API_URL") and environ.get("JUPYTERHUB_USER"):
            user = quote(environ["JUPYTERHUB_USER"], safe="")
            url = f"{environ['JUPYTERHUB_API_URL'].rstrip('/')}/users/{user}/activity"
        if interval <= 0 or not url or not token:
            return None
        ssl_options = tlscontext.from_environ(environ)  # the hub's internal_ssl, or None
        kernel_manager = serverapp.kernel_manager
        return cls(
            server_activity=serverapp.web_app.last_activity,
            kernel_states=lambda: [k.get("execution_state") for k in kernel_manager.list_kernels()],
            read_gpus=read_gpus,
            activity_url=url,
            token=token,
            server_name=environ.get("JUPYTERHUB_SERVER_NAME", ""),
            interval=interval,
            gpu_busy_percent=hub.gpu_busy_percent,
            ssl_options=ssl_options,
            log=log,
        )

    async def sample(self, now=None):
        """The activity to report at ``now``, by the rule."""
        gpus = await asyncio.get_running_loop().run_in_executor(None, self.read_gpus)
        utilizations = [gpu["utilization"] for gpu in gpus["gpus"]]
        states = self.kernel_states()
        now = now or datetime.now(UTC)
        reasons = busy_reasons(states, utilizations, self.gpu_busy_percent)
        if reasons != self.reasons:
            self.log.info("Session activity: %s", "; ".join(reasons) or "no kernel or GPU busy")
            self.reasons = reasons
        self.last_active = last_activity(
            now,
            self.server_activity(),
            states,
            utilizations,
            self.gpu_busy_percent,
            self.last_active,
        )
        return min(now, self.last_active)

    async def report(self):
        """Sample, and post the result when it is later than the last report."""
        when = await self.sample()
        if self.reported is not None and when <= self.reported:
            return False
        stamp = isoformat(when)
        body = {"last_activity": stamp, "servers": {self.server_name: {"last_activity": stamp}}}
        request = HTTPRequest(
            self.activity_url,
            method="POST",
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
            body=json.dumps(body),
            request_timeout=30,
            ssl_options=self.ssl_options,
        )
        await AsyncHTTPClient().fetch(request)
        self.reported = when
        self.log.debug("Reported activity %s to the hub", stamp)
        return True

    async def run(self):
        # The hub set the session's activity when it spawned it: the first
        # report follows one interval later, not while the server starts and
        # the hub checks that it answers.
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.report()
            except Exception as e:  # the hub restarting, NVML failing: try again next time
                self.log.warning("Activity report to the hub failed: %s", e)

    def start(self):
        if self._task is None:
            self._task = asyncio.ensure_future(self.run())
            self.log.info(
                "Reporting activity to the hub every %g s (GPUs busy above %g%%)",
                self.interval, self.gpu_busy_percent,
            )  # fmt: skip

    def stop(self):
        if self._task is not None:
            self._task.cancel()
            self._task = None
