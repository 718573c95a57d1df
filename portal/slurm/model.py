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
    jobs = {
        j["id"]: Job(**{**j, "start": parse_time(j["start"]), "end": parse_time(j["end"])})
        for j in data["jobs"]
    }
    errors = {"cluster": data.get("cluster_error", ""), "jobs": data.get("jobs_error", "")}
    return datetime.fromisoformat(data["time"]), partitions, jobs, errors
