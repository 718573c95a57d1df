"""What the portal knows of Slurm: jobs, nodes, partitions, and the poll's
snapshot as JSON (the hub writes it, the admin service reads it). Pure."""

import json
import re
from dataclasses import asdict, dataclass
from datetime import datetime

RUNNING_STATES = {"RUNNING", "CONFIGURING", "STOPPED", "SUSPENDED"}
# Cancelled, timed out or failed, its processes being killed: the server is going
ENDING_STATES = {"COMPLETING"}
PENDING_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
UNAVAILABLE_NODE = re.compile(
    r"down|drain|drng|fail|maint|unk|not_responding|inval|futr|power", re.I
)


# How a job's end reads for its user, by sacct's state.
END_STATES = {
    "NODE_FAIL": "its node failed",
    "BOOT_FAIL": "its node failed to boot",
    "TIMEOUT": "it reached its time limit",
    "DEADLINE": "it reached its deadline",
    "PREEMPTED": "it was preempted",
    "OUT_OF_MEMORY": "it ran out of memory",
    "CANCELLED": "it was cancelled",
    "FAILED": "Jupyter exited with an error",
    "COMPLETED": "Jupyter exited",
}


def describe_end(reason, memory=""):
    """A phrase for ``parse_end_reason``'s text (``"NODE_FAIL, exit code 0:0"``);
    ``memory``, the slice's (``"48 GB"``), names what a job killed for
    memory ran out of (the cgroup's limit, cgroup.conf ConstrainRAMSpace).

    >>> describe_end("NODE_FAIL, exit code 0:0")
    'its node failed'
    >>> describe_end("OUT_OF_MEMORY, exit code 0:125", "48 GB")
    'it ran out of its 48 GB of memory'
    >>> describe_end("")
    'Slurm has no record of how it ended'
    """
    state = reason.split(",", 1)[0].split()[0] if reason.strip() else ""
    if not state:
        return "Slurm has no record of how it ended"
    if state == "OUT_OF_MEMORY" and memory:
        return f"it ran out of its {memory} of memory"
    return END_STATES.get(state, f"Slurm ended it ({state})")


@dataclass(frozen=True)
class Job:
    id: str
    user: str
    state: str
    nodes: tuple  # the allocation's nodes, in Slurm's order; () while pending
    reason: str
    start: datetime | None
    end: datetime | None
    gres: str
    partition: str
    time_limit: int | None = None  # minutes (squeue's %l); None: unlimited or unknown

    @property
    def node(self):
        """The first node, where Slurm runs the batch script (and so Jupyter); "" while pending."""
        return self.nodes[0] if self.nodes else ""

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
        # "*": not responding (mixed*, idle*): Slurm starts nothing there
        return not UNAVAILABLE_NODE.search(self.state) and not self.state.endswith("*")

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


@dataclass(frozen=True)
class GpuQuota:
    """The GPUs Slurm's QOS lets one user hold at once (its
    ``MaxTRESPerUser=gres/gpu=N``) and those they hold now, in all of their
    running jobs of that QOS (portal sessions and batch jobs alike). A
    request past it would pend with ``QOSMaxGRESPerUser`` until others end:
    the portal refuses it at once instead.

    >>> quota = GpuQuota("portal", 4, 3)
    >>> quota.room, quota.describe()
    (1, 'You hold 3 of the 4 GPUs that QOS portal lets you use at once: you may ask for 1 more.')
    >>> print(quota.refusal(2))
    2 GPUs is more than you may ask for now: you hold 3 of the 4 GPUs that QOS portal lets \
you use at once. Ask for at most 1, or stop a session or job first.
    >>> GpuQuota("portal", 4, 1).refusal(3) is None, GpuQuota("normal", None, 9).refusal(64)
    (True, None)
    >>> print(GpuQuota("portal", 4, 4).refusal(1))
    You hold all 4 GPUs that QOS portal lets you use at once: stop a session or job first.

    Sessions of the user's that are starting (``waiting``: their jobs are not
    running yet, so Slurm does not count them) take their GPUs too:

    >>> print(GpuQuota("portal", 4, 1, waiting=2).refusal(2))
    2 GPUs is more than you may ask for now: you hold 1 of the 4 GPUs that QOS portal lets \
you use at once, and 2 more in sessions starting. Ask for at most 1, or stop a session or job first.
    """

    qos: str
    limit: int | None  # None: the QOS sets no GPU limit per user
    used: int
    waiting: int = 0  # the GPUs of the user's sessions that are starting

    @property
    def room(self):
        """How many more GPUs the user may hold (None: no limit)."""
        return None if self.limit is None else max(self.limit - self.used - self.waiting, 0)

    def _held(self):
        more = f", and {self.waiting} more in sessions starting" if self.waiting else ""
        return (
            f"you hold {self.used} of the {self.limit} GPUs that QOS {self.qos} lets you use "
            f"at once{more}"
        )

    def describe(self):
        if self.limit is None:
            return f"You hold {self.used} GPUs; QOS {self.qos} sets no limit per user."
        if not self.room:
            return self.refusal(1)
        held = self._held()
        return f"{held[0].upper()}{held[1:]}: you may ask for {self.room} more."

    def refusal(self, gpus):
        """Why a request of ``gpus`` GPUs in all is refused; None when it fits."""
        if self.limit is None or gpus <= self.room:
            return None
        if not self.room and not self.waiting:
            return (
                f"You hold all {self.limit} GPUs that QOS {self.qos} lets you use at once: "
                "stop a session or job first."
            )
        return (
            f"{gpus} GPUs is more than you may ask for now: {self._held()}. Ask for at most "
            f"{self.room}, or stop a session or job first."
        )


def parse_time(text):
    """A Slurm time stamp (``2026-11-23T15:20:44``) as a datetime; None for
    ``N/A``, ``Unknown``, ``None`` or anything else."""
    text = (text or "").strip()
    if not text or text in ("N/A", "Unknown", "None"):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


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
    jobs = {j["id"]: _job(j) for j in data["jobs"]}
    errors = {"cluster": data.get("cluster_error", ""), "jobs": data.get("jobs_error", "")}
    return datetime.fromisoformat(data["time"]), partitions, jobs, errors


def _job(data):
    data = dict(data)
    # a snapshot of a hub before multi-node sessions has "node", one name or ""
    old = data.pop("node", "")
    data["nodes"] = tuple(data.get("nodes") or ([old] if old else []))
    data["start"], data["end"] = parse_time(data["start"]), parse_time(data["end"])
    return Job(**data)
