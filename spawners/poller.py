"""One shared poll of Slurm for every spawner of the hub.

batchspawner runs one ``squeue`` per spawner: every 0.5 s while it starts and
at every hub poll after that, so Slurm's load grows with the sessions. Here one
``SlurmPoller`` per job name queries once per interval, ``squeue`` for all the
portal's jobs (state, node, reason, expected start, end) and ``sinfo`` for the
nodes (GPUs configured and in use, cores, memory, partitions); every
spawner's ``poll()``, ``start()`` and ``progress()`` and the spawn page read
from it. It polls faster only while a session is starting.

A query that fails or times out leaves the last good state in place: a job is
gone only when a *successful* query, begun after the job was submitted, no
longer lists it.

After each query the poll writes what it knows to ``snapshot_path`` (JSON,
see ``portal.slurm.model.snapshot_to_json``), so the admin service validates
profiles and shows the cluster from the same poll, without querying Slurm
itself.

In a third loop, every ``catalog_interval`` seconds, the poll reads the
site's catalog (``portal.slurm.model.SiteCatalog``: associations, default
accounts, QOS and their limits, fairshare, reservations, the partitions'
Allow/Deny lists) once for every user; the spawn page reads ``catalog``
and never asks Slurm itself. A failed read keeps the last catalog. Each
read is written beside the snapshot too (``model.catalog_path``, the
hub's account's alone), for the admin service.

The commands and their parsers are ``portal.slurm``'s.
"""

import asyncio
import dataclasses
import logging
import os
import time
from dataclasses import dataclass, field
from datetime import datetime

from portal.settings import defaults
from portal.slurm import commands as slurm
from portal.slurm.model import catalog_path, snapshot_to_json

from .notices import Notices
from .quota import Quotas

log = logging.getLogger("portal.poller")


@dataclass
class Snapshot:
    """The result of the last successful squeue, and what followed it."""

    jobs: dict = field(default_factory=dict)
    started: float = 0.0  # monotonic time the successful query began
    ok: bool = False
    error: str = ""  # the last failure, while the latest query failed
    failing_since: float = 0.0


class SlurmPoller:
    """The shared poll of one hub (one instance per Slurm job name)."""

    _instances = {}

    @classmethod
    def instance(cls, job_name, **settings):
        poller = cls._instances.get(job_name)
        if poller is None:
            poller = cls._instances[job_name] = cls(job_name, **settings)
        else:
            poller.configure(**settings)
        return poller

    def __init__(self, job_name, **settings):
        self.job_name = job_name
        slurm_defaults = defaults()["slurm"]  # deploy/portal.toml, their one declaration
        self.interval = slurm_defaults["poll_interval"]
        self.active_interval = slurm_defaults["poll_interval_active"]
        self.cluster_interval = slurm_defaults["cluster_interval"]
        self.catalog_interval = slurm_defaults["catalog_interval"]
        self.unknown_grace = slurm_defaults["unknown_grace"]
        self.timeout = slurm_defaults["command_timeout"]
        # a callable returning the slices (portal.core.slice.Slice) whose
        # expected start the spawn page shows: every profile's, per GPU count
        self.will_run_slices = None
        self.snapshot_path = ""  # where each query's result is written for the admin service
        self.configure(**settings)
        self.snapshot = Snapshot()
        self.partitions = {}
        self.cluster_error = ""
        self.expected_start = {}  # Slice -> datetime
        self.quotas = Quotas(self)  # the GPUs each user may hold, read beside sinfo
        self.notices = Notices()  # the notices (pages, mail), from each squeue's jobs
        self.squeue_calls = 0
        self.catalog = None  # the latest SiteCatalog; None before the first read
        self.catalog_error = ""  # the last read's failure ("": it answered)
        self.catalog_calls = 0  # catalog reads begun (six Slurm commands each)
        self._active = set()
        self._followed = {}  # job id -> (submitted, callback) of running sessions
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._cluster_wake = asyncio.Event()
        self._inflight = None
        self._sinfo_inflight = None
        self._sinfo_started = -float("inf")  # monotonic time the last good sinfo began
        self._task = None
        self._cluster_task = None
        self._catalog_task = None
        self._pages_task = None
        self._pages_seen = -float("inf")  # monotonic time a spawn page last asked
        self._pages_age = 0.0  # the age it asked for (form_sinfo_age)
        self._pages_wake = asyncio.Event()
        self._catalog_inflight = None
        self._catalog_started = -float("inf")  # monotonic time the last read began
        self._warned_unknown = False
        self._written = ""
        self._written_at = 0.0

    def configure(self, **settings):
        for key, value in settings.items():
            if not hasattr(self, key):
                raise TypeError(f"unknown poller setting {key}")
            setattr(self, key, value)

    # -- the loop --------------------------------------------------------

    def ensure_running(self):
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._loop())
        if self._cluster_task is None or self._cluster_task.done():
            self._cluster_task = asyncio.ensure_future(self._cluster_loop())
        if self._catalog_task is None or self._catalog_task.done():
            self._catalog_task = asyncio.ensure_future(self._catalog_loop())
        if self._pages_task is None or self._pages_task.done():
            self._pages_task = asyncio.ensure_future(self._pages_loop())

    async def _loop(self):
        """squeue at a steady cadence: every ``interval`` from the start of the
        last query (``active_interval`` while a session starts)."""
        while True:
            began = time.monotonic()
            try:
                await self.refresh()
            except Exception:
                log.exception("Slurm poll failed")
            interval = self.active_interval if self._active else self.interval
            self._wake.clear()
            await self._sleep(self._wake, began + interval - time.monotonic())

    async def _cluster_loop(self):
        """sinfo and expected starts, in their own loop: a slow ``sbatch
        --test-only`` never delays the squeue that notices ended jobs."""
        while True:
            try:
                await self.refresh_cluster()
            except Exception:
                log.exception("Slurm cluster poll failed")
            self._cluster_wake.clear()
            await self._sleep(self._cluster_wake, self.cluster_interval)

    async def _pages_loop(self):
        """sinfo (and the QOS use read beside it) every 0.8 of the age the
        spawn page asks for, while a page was rendered within the last
        ``cluster_interval``: one user or two hundred on the page cost Slurm
        the same (issue 38), and a page never waits for sinfo under use."""
        while True:
            self._pages_wake.clear()
            idle = time.monotonic() - self._pages_seen > self.cluster_interval
            if idle or self._pages_age <= 0:
                await self._pages_wake.wait()
                continue
            due = self._sinfo_started + 0.8 * self._pages_age - time.monotonic()
            if due > 0:
                await self._sleep(self._pages_wake, due)
                continue
            try:
                await self._refresh_partitions()
            except Exception:
                log.exception("Slurm cluster poll failed")

    async def _catalog_loop(self):
        """The site's catalog, for every user at once, ``catalog_interval``
        after the start of the last read (this loop's or a page's)."""
        while True:
            due = self._catalog_started + self.catalog_interval - time.monotonic()
            if due > 0:
                await asyncio.sleep(due)
                continue
            try:
                await self.refresh_catalog()
            except Exception:
                log.exception("Slurm catalog read failed")
                await asyncio.sleep(self.catalog_interval)

    @staticmethod
    async def _sleep(wake, seconds):
        if seconds <= 0:
            return
        try:
            await asyncio.wait_for(wake.wait(), seconds)
        except TimeoutError:
            pass

    def watch(self, key):
        """Poll at the active rate while ``key`` (a starting spawner) is
        watched: a query now when it was not (the loop may sleep a whole
        ``interval``), none more when it already was."""
        new = key not in self._active
        self._active.add(key)
        self.ensure_running()
        if new:
            self._wake.set()

    def unwatch(self, key):
        self._active.discard(key)

    def follow(self, job_id, submitted, callback):
        """Call ``callback()`` (a coroutine function) as soon as a query finds
        the job gone, rather than at the hub's next poll of the spawner."""
        self._followed[str(job_id)] = (submitted, callback)
        self.ensure_running()

    def unfollow(self, job_id):
        self._followed.pop(str(job_id), None)

    def _notify_gone(self):
        for job_id, (submitted, callback) in list(self._followed.items()):
            if self.is_gone(job_id, submitted):
                del self._followed[job_id]
                # its GPUs are free again, or its node is down: the next
                # spawn page reads sinfo anew
                self._sinfo_started = -float("inf")
                asyncio.ensure_future(callback())

    def poke(self):
        """Ask for a query now (coalesced with one under way)."""
        self.ensure_running()
        self._wake.set()

    def poke_cluster(self):
        """Ask for an sinfo now (the spawn page found none yet)."""
        self.ensure_running()
        self._cluster_wake.set()

    async def wait_changed(self, timeout):
        """Wait for the next query to finish, at most ``timeout`` seconds."""
        event = self._changed
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass

    # -- queries ---------------------------------------------------------

    async def refresh(self):
        """One squeue for every job of the portal; concurrent callers share it."""
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.ensure_future(self._query_jobs())
        await asyncio.shield(self._inflight)

    async def _query_jobs(self):
        started = time.monotonic()
        self.squeue_calls += 1
        try:
            jobs = await slurm.queue(self.job_name, timeout=self.timeout)
        except slurm.SlurmError as e:
            snap = self.snapshot
            if not snap.error:
                snap.failing_since = started
            snap.error = str(e)
            down_for = started - snap.failing_since
            if down_for >= self.unknown_grace and not self._warned_unknown:
                self._warned_unknown = True
                log.error(
                    "Slurm has not answered for %d s (%s); sessions are kept as they "
                    "were last seen. Check slurmctld.",
                    down_for,
                    e,
                )
            else:
                log.warning("squeue failed; keeping the last known state: %s", e)
        else:
            if self.snapshot.error:
                log.info("Slurm answers again")
            self._warned_unknown = False
            self.snapshot = Snapshot(jobs=jobs, started=started, ok=True)
            self._notify_gone()
            try:
                self.notices.update(jobs)
            except Exception:
                log.exception("The notices of this poll failed; the poll goes on")
        finally:
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()
            self.write_snapshot()

    async def snapshot_since(self, since):
        """A snapshot begun after ``since`` (monotonic), querying if needed."""
        if self.snapshot.started < since or not self.snapshot.ok:
            await self.refresh()
        return self.snapshot

    async def refresh_cluster(self):
        """One sinfo; then expected starts for GPU counts that do not fit now."""
        if await self._refresh_partitions() and self.will_run_slices:
            await self._refresh_expected_starts()

    async def partitions_since(self, max_age, timeout):
        """Make ``partitions`` what an sinfo begun at most ``max_age`` seconds
        ago saw (a node that went down shows on the next spawn page, not after
        ``cluster_interval``), waiting at most ``timeout`` seconds; the last
        known state otherwise. Concurrent callers share one sinfo. While
        pages are rendered, the pages' loop reads it every 0.8 ``max_age``
        (``_pages_loop``), whatever the number of users: no page waits."""
        now = time.monotonic()
        if now - self._pages_seen > self.cluster_interval or self._pages_age != max_age:
            self._pages_wake.set()  # the pages' loop keeps it fresh from now on
        self._pages_seen, self._pages_age = now, max_age
        self.ensure_running()
        if now - self._sinfo_started <= max_age:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._refresh_partitions()), timeout)
        except TimeoutError:
            log.warning(
                "sinfo took more than %.1f s; the spawn page shows the last known state", timeout
            )

    def _refresh_partitions(self):
        """One sinfo, shared by concurrent callers: True when it answered."""
        if self._sinfo_inflight is None or self._sinfo_inflight.done():
            self._sinfo_inflight = asyncio.ensure_future(self._query_partitions())
        return self._sinfo_inflight

    async def _query_partitions(self):
        started = time.monotonic()
        try:
            self.partitions = await slurm.partitions(timeout=self.timeout)
            self.cluster_error = ""
            self._sinfo_started = started
            await self.quotas.refresh()
            return True
        except slurm.SlurmError as e:
            self.cluster_error = str(e)
            self._sinfo_started = started  # no second try for every page meanwhile
            log.warning("sinfo failed; keeping the last known cluster state: %s", e)
            return False
        finally:
            self.write_snapshot()

    def refresh_catalog(self):
        """One read of the site's catalog, shared by concurrent callers (a
        Task: True when it answered)."""
        if self._catalog_inflight is None or self._catalog_inflight.done():
            self._catalog_inflight = asyncio.ensure_future(self._query_catalog())
        return self._catalog_inflight

    async def _query_catalog(self):
        started = time.monotonic()
        self.catalog_calls += 1
        try:
            await slurm.recheck_private_data(timeout=self.timeout)
            catalog = await slurm.site_catalog(timeout=self.timeout)
        except slurm.SlurmError as e:
            self.catalog_error = str(e)
            log.warning("The site's catalog could not be read; keeping the last: %s", e)
            return False
        finally:
            self._catalog_started = started  # no second try for every page meanwhile
        if catalog.error:
            log.warning("The catalog has no fairshare this time: %s", catalog.error)
            if self.catalog is not None and self.catalog.shares:
                catalog = dataclasses.replace(catalog, shares=self.catalog.shares)
        self.catalog, self.catalog_error = catalog, catalog.error
        self.write_catalog()
        return True

    def write_catalog(self):
        """Write the catalog beside the snapshot (``model.catalog_path``),
        atomically, readable by the hub's account alone (the admin service
        runs as it): it holds every user's fairshare and GPU-hours."""
        if not self.snapshot_path or self.catalog is None:
            return
        path = catalog_path(self.snapshot_path)
        tmp = f"{path}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self.catalog.to_json())
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except OSError as e:
            log.warning("could not write the site's catalog %s: %s", path, e)

    async def catalog_since(self, max_age, timeout=2.0):
        """The catalog as a read begun at most ``max_age`` seconds ago saw it,
        waiting at most ``timeout`` seconds for one; the last known one (None
        before the first) otherwise. Concurrent callers share one read. The
        poll reads it every ``catalog_interval``: with ``max_age`` past that,
        a page never causes a read of its own (only the first, or one after
        the poll stalled)."""
        if time.monotonic() - self._catalog_started <= max_age:
            return self.catalog
        self.ensure_running()
        try:
            await asyncio.wait_for(asyncio.shield(self.refresh_catalog()), timeout)
        except TimeoutError:
            log.warning(
                "The site's catalog took more than %.1f s; the spawn page shows the last one",
                timeout,
            )
        return self.catalog

    async def _refresh_expected_starts(self):
        """``sbatch --test-only`` for each slice that no node can take now,
        with the same options as its real submission (``sbatch_argv``)."""
        expected = {}
        for job_slice in dict.fromkeys(self.will_run_slices()):
            partition = self.partitions.get(job_slice.partition)
            if partition is None or job_slice.gpus <= partition.largest_free:
                continue
            try:
                start = await slurm.expected_start(job_slice, timeout=self.timeout)
            except slurm.SlurmError as e:
                log.debug("sbatch --test-only for %s failed: %s", job_slice.describe(), e)
                continue
            if start:
                expected[job_slice] = start
        self.expected_start = expected

    def write_snapshot(self):
        """Write what is known to ``snapshot_path`` (atomically), when it changed."""
        if not self.snapshot_path:
            return
        args = (self.partitions, self.snapshot.jobs, self.cluster_error, self.snapshot.error)
        # the time stamp changes every query: compare without it, but rewrite at
        # least every cluster interval, so that readers can tell the poll is live
        key = snapshot_to_json(*args, now=datetime.min)
        if key == self._written and time.monotonic() - self._written_at < self.cluster_interval:
            return
        content = snapshot_to_json(*args)
        tmp = f"{self.snapshot_path}.tmp"
        try:
            with open(tmp, "w") as f:
                f.write(content)
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.snapshot_path)
        except OSError as e:
            log.warning("could not write the cluster snapshot %s: %s", self.snapshot_path, e)
            return
        self._written, self._written_at = key, time.monotonic()

    # -- reading ---------------------------------------------------------

    def job(self, job_id):
        """The last known Job, or None."""
        return self.snapshot.jobs.get(str(job_id))

    def is_gone(self, job_id, submitted):
        """Whether a successful query begun after ``submitted`` no longer lists
        the job, or lists it as ending (COMPLETING: its server is being killed)."""
        snap = self.snapshot
        if not snap.ok or snap.error or snap.started <= submitted:
            return False
        job = snap.jobs.get(str(job_id))
        return job is None or job.ending

    @property
    def unknown(self):
        return bool(self.snapshot.error) or not self.snapshot.ok
