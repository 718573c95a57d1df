"""The portal's own Prometheus series (issue 28), beside JupyterHub's at
``/hub/metrics`` (prometheus_client's default registry, which JupyterHub
serves; ``authenticate_prometheus`` kept: a token with ``read:metrics``, the
portal admins' and the site's monitoring service's).

Counted as they happen, in the hub:

- ``portal_spawn_duration_seconds{profile}``: a spawn's request to its
  server answering (``PortalSpawner.start``), spawns that answered;
- ``portal_queue_wait_seconds{profile}``: its sbatch to Slurm running it;
- ``portal_refused_requests_total{reason}``: requests refused before
  anything was submitted (``options``, ``qos``, ``sessions``, ``image``,
  ``notebook_job``), counted in the store (``refused``) by the hub and the
  admin service alike, read at each scrape;
- ``portal_gpu_samples_total{result}``: the hub's asks of the sessions'
  GPU use (``spawners.gpu_use``): ``sampled``, ``no_gpu_data``, ``no_answer``;
- ``portal_idle_culls_total{profile}``: sessions the idle culler stopped;
- ``portal_slurm_command_seconds{command}`` and
  ``portal_slurm_command_errors_total{command}``: every Slurm command the
  hub ran (``portal.slurm.commands.OBSERVERS``).

Read at each scrape (``PortalCollector``):

- ``portal_sessions{state,profile,gpu_model,account}``: sessions, pending
  or running, by the GPU model and account they asked for;
- ``portal_notebook_jobs{state,profile}``: notebook jobs not ended, as the
  jobs' notices last saw them (every 15 s);
- ``portal_gpus_held{kind,gpu_model,account}``: GPUs held by running
  sessions and notebook jobs, by the GPU model and account they asked for;
- ``portal_gpus_busy{kind="session"}``: GPUs of running sessions busy in
  the hub's latest samples of their NVML figures (``spawners.gpu_use``;
  sessions without a driver's figures count as none);
- ``portal_proxy_routes{state}``: ``missing`` and ``stale`` routes of the
  hub's last check (``spawners.route_check``);
- ``portal_poll_age_seconds``: since the shared poll's last good squeue;
- ``portal_extensions_total``: extensions of sessions, the store's audit
  (the hub's and the admin service's alike).

No series has a user's name in it: the login node's Prometheus is readable
by its local users. ``gpu_model`` and ``account`` are "" for Slurm's default
(no model asked; the user's default account) and for a session Slurm has
not taken yet (no job id): the names come from Slurm, never from what a
user typed (a session's or job's choice was checked against the site's
catalog, ``portal.slurm.choices``, and taken by sbatch), so there are no
more of them than the site's GPU models and accounts (``choice_labels``).
"""

import logging
import time

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from portal.core.slice import SLURM_NAME_RE
from portal.slurm import commands as slurm

log = logging.getLogger("portal.metrics")

SPAWN_BUCKETS = (1, 2, 3, 5, 8, 13, 20, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))
COMMAND_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, float("inf"))

SPAWN_DURATION = Histogram(
    "portal_spawn_duration_seconds",
    "A session's spawn request to its server answering, by profile (spawns that answered)",
    ["profile"], buckets=SPAWN_BUCKETS,
)  # fmt: skip
QUEUE_WAIT = Histogram(
    "portal_queue_wait_seconds",
    "A session's sbatch to Slurm running its job, by profile",
    ["profile"], buckets=SPAWN_BUCKETS,
)  # fmt: skip
IDLE_CULLS = Counter("portal_idle_culls", "Sessions the idle culler stopped", ["profile"])
GPU_SAMPLES = Counter(
    "portal_gpu_samples", "The hub's asks of sessions' GPU use (spawners.gpu_use), by result: "
    "sampled, no_gpu_data (no driver or no utilisation), no_answer", ["result"],
)  # fmt: skip
SLURM_SECONDS = Histogram(
    "portal_slurm_command_seconds", "Slurm commands the hub ran, by command", ["command"],
    buckets=COMMAND_BUCKETS,
)  # fmt: skip
SLURM_ERRORS = Counter(
    "portal_slurm_command_errors", "Slurm commands that failed or timed out, by command",
    ["command"],
)  # fmt: skip


def observe_command(name, seconds, ok):
    """``portal.slurm.commands.run``'s observer: one command's time and outcome."""
    SLURM_SECONDS.labels(name).observe(seconds)
    if not ok:
        SLURM_ERRORS.labels(name).inc()


def observe_spawn(spawner):
    """A spawn that answered: its duration and its queue wait (its timeline's)."""
    profile = spawner.profile.name if spawner.profile else ""
    timeline = spawner.timeline
    if "answered" in timeline:
        SPAWN_DURATION.labels(profile).observe(timeline["answered"])
    if "submitted" in timeline and "running seen" in timeline:
        QUEUE_WAIT.labels(profile).observe(
            max(0.0, timeline["running seen"] - timeline["submitted"])
        )


def refused(reason):
    """A request refused before anything was submitted, counted by the store
    (``ProfileStore.refused``; ``portal_refused_requests_total``: the hub's
    and the service's alike)."""
    store = _collector.store if _collector is not None else None
    if store is None:
        return
    try:
        store.refused(reason)
    except Exception as e:  # noqa: BLE001 (the refusal itself stands)
        log.warning("A refusal (%s) was not counted: %s", reason, e)


class PortalCollector:
    """The series read at each scrape, from the hub's memory and the store
    (no Slurm query: the shared poll's and the jobs' notices' last view)."""

    def __init__(self, spawners, poller, job_notices, store, gpu_use=None, routes=None):
        self.spawners = spawners  # () -> every active spawner of the hub
        self.poller = poller
        self.job_notices = job_notices
        self.store = store
        self.gpu_use = gpu_use  # spawners.gpu_use.GPUUse
        self.routes = routes  # spawners.route_check.RouteCheck

    def describe(self):
        """The families' names alone: prometheus_client registers a collector
        by them, without collecting (the hub is not running yet then)."""
        for name, kind in (("portal_sessions", GaugeMetricFamily),
                           ("portal_notebook_jobs", GaugeMetricFamily),
                           ("portal_gpus_held", GaugeMetricFamily),
                           ("portal_gpus_busy", GaugeMetricFamily),
                           ("portal_proxy_routes", GaugeMetricFamily),
                           ("portal_poll_age_seconds", GaugeMetricFamily),
                           ("portal_extensions", CounterMetricFamily),
                           ("portal_refused_requests", CounterMetricFamily)):  # fmt: skip
            yield kind(name, "")

    def collect(self):
        sessions = GaugeMetricFamily(
            "portal_sessions", "Sessions by Slurm state, profile, GPU model and account",
            labels=["state", "profile", "gpu_model", "account"],
        )  # fmt: skip
        gpus = GaugeMetricFamily(
            "portal_gpus_held", "GPUs held by what runs, by kind, GPU model and account",
            labels=["kind", "gpu_model", "account"],
        )  # fmt: skip
        counts, held = {}, {("", ""): 0}
        for spawner in self.spawners():
            job_id = getattr(spawner, "job_id", "")
            job = self.poller.job(job_id) if job_id else None
            state = "running" if job and job.running else "pending"
            profile = spawner.profile.name if getattr(spawner, "profile", None) else ""
            job_slice = getattr(spawner, "job_slice", None)
            chosen = choice_labels(job_slice, job_id)
            counts[(state, profile, *chosen)] = counts.get((state, profile, *chosen), 0) + 1
            if state == "running" and job_slice:
                held[chosen] = held.get(chosen, 0) + job_slice.total_gpus
        for key, n in sorted(counts.items()):
            sessions.add_metric(list(key), n)
        for (model, account), n in sorted(held.items()):
            gpus.add_metric(["session", model, account], n)
        jobs = GaugeMetricFamily(
            "portal_notebook_jobs", "Notebook jobs not ended, by state and profile",
            labels=["state", "profile"],
        )  # fmt: skip
        seen = self.job_notices.seen if self.job_notices else {}
        for (state, profile), n in sorted(seen.get("counts", {}).items()):
            jobs.add_metric([state.lower(), profile], n)
        job_gpus = seen.get("gpus_by") or {("", ""): seen.get("gpus", 0)}
        for (model, account), n in sorted(job_gpus.items()):
            gpus.add_metric(["notebook_job", *slurm_names(model, account)], n)
        busy = GaugeMetricFamily(
            "portal_gpus_busy",
            "GPUs busy (utilisation above [culling] gpu_busy_percent) in the latest samples",
            labels=["kind"],
        )
        busy.add_metric(["session"], self.gpu_use.busy_now() if self.gpu_use else 0)
        age = GaugeMetricFamily(
            "portal_poll_age_seconds", "Seconds since the shared poll's last good squeue"
        )
        snapshot = self.poller.snapshot
        if snapshot.ok:
            age.add_metric([], max(0.0, time.monotonic() - snapshot.started))
        extensions = CounterMetricFamily(
            "portal_extensions", "Extensions of sessions' time limits (the store's audit)"
        )
        refusals = CounterMetricFamily(
            "portal_refused_requests",
            "Requests refused before anything was submitted, by reason (the hub's and the "
            "admin service's; the store's count)",
            labels=["reason"],
        )
        try:
            extensions.add_metric([], self.store.extension_count())
            for reason, n in sorted(self.store.refusal_counts().items()):
                refusals.add_metric([reason], n)
        except Exception as e:  # noqa: BLE001 (the other series still go out)
            log.warning("The store's counts could not be read: %s", e)
        routes = GaugeMetricFamily(
            "portal_proxy_routes",
            "The proxy's routes against the running sessions, in two checks in a row: "
            "missing (a running session without one), stale (one to no running session)",
            labels=["state"],
        )
        last = self.routes.last if self.routes else None
        if last and "missing" in last:
            routes.add_metric(["missing"], last["missing"])
            routes.add_metric(["stale"], last["stale"])
        yield from (sessions, jobs, gpus, busy, age, extensions, refusals, routes)


def choice_labels(job_slice, job_id):
    """``(gpu_model, account)`` labels of a session: its slice's, once Slurm
    took its job (``job_id``); ("", "") before, and for Slurm's defaults.

    >>> from portal.core.slice import Slice
    >>> typed = Slice(1, 8, 48, 1, "sxm2", gpu_type="v100-sxm2", account="lab-nlp")
    >>> choice_labels(typed, "12"), choice_labels(typed, ""), choice_labels(None, "12")
    (('v100-sxm2', 'lab-nlp'), ('', ''), ('', ''))
    """
    if not job_id or job_slice is None:
        return "", ""
    return slurm_names(getattr(job_slice, "gpu_type", ""), getattr(job_slice, "account", ""))


def slurm_names(*values):
    """Label values that have the shape of a name Slurm gave (``SLURM_NAME_RE``), else "".

    >>> slurm_names("v100-sxm2", "lab nlp; x", None)
    ('v100-sxm2', '', '')
    """
    return tuple(v if isinstance(v, str) and SLURM_NAME_RE.match(v) else "" for v in values)


_collector = None  # the one registered in this process


def install(spawners, poller, job_notices, store, gpu_use=None, routes=None):
    """Observe Slurm's commands and register the collector (once a process:
    a second configuration gives the same collector its new sources)."""
    global _collector
    if observe_command not in slurm.OBSERVERS:
        slurm.OBSERVERS.append(observe_command)
    if _collector is None:
        _collector = PortalCollector(spawners, poller, job_notices, store, gpu_use, routes)
        REGISTRY.register(_collector)
    else:
        _collector.__init__(spawners, poller, job_notices, store, gpu_use, routes)
    return _collector
