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
see ``snapshot_to_json``), so the admin service validates profiles and shows
the cluster from the same poll, without querying Slurm itself.

The parsers are pure functions, tested without Slurm.
"""

import asyncio
import json
import logging
import os
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime

from . import slurm

log = logging.getLogger("portal.poller")

SQUEUE_FORMAT = "%i|%u|%T|%N|%r|%S|%e|%b|%P"
SINFO_FIELDS = [
    "NodeList:128",
    "Partition:64",
    "Gres:128",
    "GresUsed:128",
    "CPUsState:32",
    "StateCompact:24",
    "Memory:16",
    "AllocMem:16",
    "Time:24",
]
RUNNING_STATES = {"RUNNING", "CONFIGURING", "STOPPED", "SUSPENDED"}
# Cancelled, timed out or failed, its processes being killed: the server is going
ENDING_STATES = {"COMPLETING"}
PENDING_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
UNAVAILABLE_NODE = re.compile(r"down|drain|fail|maint|unk|not_responding|inval|futr|power", re.I)


@dataclass(frozen=True)
class Job:
    id: str
    user: str
    state: str
    node: str
    reason: str
    start: datetime | None
    end: datetime | None
    gres: str
    partition: str

    @property
    def running(self):
        return self.state in RUNNING_STATES

    @property
    def pending(self):
        return self.state in PENDING_STATES

    @property
    def ending(self):
        return self.state in ENDING_STATES


@dataclass(frozen=True)
class Node:
    name: str
    partitions: tuple
    gpus: int
    gpus_used: int
    cpus: int
    cpus_alloc: int
    mem_mb: int
    mem_alloc_mb: int
    state: str

    @property
    def available(self):
        return not UNAVAILABLE_NODE.search(self.state)

    @property
    def gpus_free(self):
        return max(self.gpus - self.gpus_used, 0) if self.available else 0


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: tuple
    max_time: str

    @property
    def gpus(self):
        return sum(n.gpus for n in self.nodes)

    @property
    def gpus_free(self):
        return sum(n.gpus_free for n in self.nodes)

    @property
    def largest_free(self):
        """The most GPUs one single-node job could get now."""
        return max((n.gpus_free for n in self.nodes), default=0)

    @property
    def largest_node(self):
        """The node with the most GPUs (ties: the most cores, then memory)."""
        return max(self.nodes, key=lambda n: (n.gpus, n.cpus, n.mem_mb), default=None)


def parse_time(text):
    text = (text or "").strip()
    if not text or text in ("N/A", "Unknown", "None"):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def parse_squeue(text):
    """``squeue -o SQUEUE_FORMAT`` output -> ``{job_id: Job}``."""
    jobs = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 9 or not parts[0].isdigit():
            continue
        job_id, user, state, node, reason, start, end, gres, partition = parts
        jobs[job_id] = Job(
            id=job_id,
            user=user,
            state=state,
            node="" if node in ("", "(null)") else node,
            reason="" if reason in ("None", "(null)") else reason,
            start=parse_time(start),
            end=parse_time(end),
            gres=gres,
            partition=partition,
        )
    return jobs


def gpu_count(gres):
    """GPUs in a Gres or GresUsed value: ``gpu:4``, ``gpu:a100:2(IDX:0-1)``, ``gpu:0,shard:8``."""
    total = 0
    for item in re.split(r",(?![^()]*\))", gres or ""):
        item = re.sub(r"\(.*\)$", "", item.strip())
        parts = item.split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def parse_sinfo(text):
    """``sinfo -N -O SINFO_FIELDS`` output -> ``{partition: Partition}``.

    Nodes appear once per partition; each is combined from its own line, so
    partitions of mixed node types are right (jupyterhub-moss #97).
    """
    nodes_by_partition = {}
    times = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 9:
            continue
        name, partition, gres, gres_used, cpus_state, state, mem, alloc_mem, max_time = parts
        partition = partition.rstrip("*")
        try:
            alloc, _idle, _other, total = (int(x) for x in cpus_state.split("/"))
            mem_mb, alloc_mb = int(mem), int(alloc_mem)
        except ValueError:
            continue
        node = Node(
            name=name,
            partitions=(partition,),
            gpus=gpu_count(gres),
            gpus_used=gpu_count(gres_used),
            cpus=total,
            cpus_alloc=alloc,
            mem_mb=mem_mb,
            mem_alloc_mb=alloc_mb,
            state=state,
        )
        nodes_by_partition.setdefault(partition, []).append(node)
        times[partition] = max_time
    return {
        p: Partition(name=p, nodes=tuple(nodes), max_time=times[p])
        for p, nodes in nodes_by_partition.items()
    }


def snapshot_to_json(partitions, jobs, cluster_error="", jobs_error="", now=None):
    """What the poll knows, as JSON text (for ``snapshot_from_json``)."""

    def job(j):
        d = asdict(j)
        d["start"] = j.start.isoformat() if j.start else None
        d["end"] = j.end.isoformat() if j.end else None
        return d

    return json.dumps(
        {
            "time": (now or datetime.now()).isoformat(timespec="seconds"),
            "cluster_error": cluster_error,
            "jobs_error": jobs_error,
            "partitions": {
                p.name: {"max_time": p.max_time, "nodes": [asdict(n) for n in p.nodes]}
                for p in partitions.values()
            },
            "jobs": [job(j) for j in jobs.values()],
        },
        indent=1,
        sort_keys=True,
    )


def snapshot_from_json(text):
    """``snapshot_to_json`` text -> (time, partitions, jobs, errors)."""
    data = json.loads(text)
    partitions = {
        name: Partition(
            name=name,
            max_time=p["max_time"],
            nodes=tuple(Node(**{**n, "partitions": tuple(n["partitions"])}) for n in p["nodes"]),
        )
        for name, p in data["partitions"].items()
    }
    jobs = {
        j["id"]: Job(**{**j, "start": parse_time(j["start"]), "end": parse_time(j["end"])})
        for j in data["jobs"]
    }
    errors = {"cluster": data.get("cluster_error", ""), "jobs": data.get("jobs_error", "")}
    return datetime.fromisoformat(data["time"]), partitions, jobs, errors


WILL_RUN_RE = re.compile(r"to start at (\S+)")


def parse_will_run(text):
    """``sbatch --test-only`` output -> the expected start, or None."""
    match = WILL_RUN_RE.search(text)
    return parse_time(match.group(1)) if match else None


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
        self.interval = 15.0
        self.active_interval = 1.0
        self.cluster_interval = 30.0
        self.unknown_grace = 300.0
        self.timeout = 20.0
        self.will_run_slice = None  # (cores_per_gpu, mem_per_gpu_gb, hours) for expected starts
        self.snapshot_path = ""  # where each query's result is written for the admin service
        self.configure(**settings)
        self.snapshot = Snapshot()
        self.partitions = {}
        self.cluster_error = ""
        self.expected_start = {}  # (partition, gpus) -> datetime
        self.squeue_calls = 0
        self._active = set()
        self._followed = {}  # job id -> (submitted, callback) of running sessions
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._cluster_wake = asyncio.Event()
        self._inflight = None
        self._task = None
        self._cluster_task = None
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

    @staticmethod
    async def _sleep(wake, seconds):
        if seconds <= 0:
            return
        try:
            await asyncio.wait_for(wake.wait(), seconds)
        except TimeoutError:
            pass

    def watch(self, key):
        """Poll at the active rate while ``key`` (a starting spawner) is watched."""
        self._active.add(key)
        self.ensure_running()
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
        argv = ["squeue", "--noheader", "--name", self.job_name, "--format", SQUEUE_FORMAT]
        self.squeue_calls += 1
        try:
            out = await slurm.run(argv, timeout=self.timeout)
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
            self.snapshot = Snapshot(jobs=parse_squeue(out), started=started, ok=True)
            self._notify_gone()
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
        argv = ["sinfo", "--noheader", "--Node", "--Format", ",".join(SINFO_FIELDS)]
        try:
            self.partitions = parse_sinfo(await slurm.run(argv, timeout=self.timeout))
            self.cluster_error = ""
        except slurm.SlurmError as e:
            self.cluster_error = str(e)
            log.warning("sinfo failed; keeping the last known cluster state: %s", e)
            self.write_snapshot()
            return
        self.write_snapshot()
        if self.will_run_slice:
            await self._refresh_expected_starts()

    async def _refresh_expected_starts(self):
        cores, mem, hours = self.will_run_slice
        expected = {}
        for partition in self.partitions.values():
            largest = partition.largest_node
            if largest is None:
                continue
            for gpus in range(partition.largest_free + 1, largest.gpus + 1):
                argv = [
                    "sbatch", "--test-only", "--nodes=1", f"--partition={partition.name}",
                    f"--gres=gpu:{gpus}", f"--cpus-per-task={cores * gpus}",
                    f"--mem={mem * gpus}G", f"--time={hours}:00:00", "--wrap=true",
                ]  # fmt: skip
                try:
                    out = await slurm.run(argv, timeout=self.timeout, with_stderr=True)
                except slurm.SlurmError as e:
                    log.debug("sbatch --test-only for %s GPUs failed: %s", gpus, e)
                    continue
                start = parse_will_run(out)
                if start:
                    expected[(partition.name, gpus)] = start
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
