"""The GPU slice: where a GPU count becomes cores and memory.

Pure functions, no Slurm: every request the portal submits passes through
``make_slice``, and its result is the only source of the job's resources
(``portal.slurm.commands.sbatch_argv`` puts them on sbatch's command line).
"""

import re
from dataclasses import dataclass

from .numbers import whole_number

PARTITION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class FieldError(ValueError):
    """Invalid input; the message is shown to the user, ``field`` names the field."""

    def __init__(self, message, field=None):
        super().__init__(message)
        self.field = field


class SliceError(FieldError):
    """A request that cannot become a slice."""


@dataclass(frozen=True)
class Slice:
    """A session's resources. ``gpus``, ``cores`` and ``mem_gb`` are per node;
    the ``total_`` properties count every node."""

    gpus: int
    cores: int
    mem_gb: int
    hours: int
    partition: str
    nodes: int = 1  # states saved before multi-node sessions have no nodes: 1

    @property
    def time_limit(self):
        """Slurm's ``--time`` value, ``H:00:00``."""
        return f"{self.hours}:00:00"

    @property
    def cores_per_gpu(self):
        return self.cores // self.gpus

    @property
    def total_gpus(self):
        return self.gpus * self.nodes

    @property
    def total_cores(self):
        return self.cores * self.nodes

    @property
    def total_mem_gb(self):
        return self.mem_gb * self.nodes

    @property
    def memory_limit(self):
        """The memory the kernel holds each node of the job to (``--mem``, per
        node): ``48 GB``, ``48 GB per node`` over several."""
        return f"{self.mem_gb} GB" + (" per node" if self.nodes > 1 else "")

    def describe(self):
        """``2 GPUs, 16 cores, 96 GB, 8 h on partition gpu``; over several nodes,
        ``2 nodes × 1 GPU = 2 GPUs, 16 cores, 96 GB, ...`` (the totals)."""
        per_node = (
            f"{count(self.nodes, 'node')} × {count(self.gpus, 'GPU')} = " if self.nodes > 1 else ""
        )
        return (
            f"{per_node}{count(self.total_gpus, 'GPU')}, {self.total_cores} cores, "
            f"{self.total_mem_gb} GB, {self.hours} h on partition {self.partition}"
        )


def count(number, word):
    """``1 GPU``, ``2 GPUs``."""
    return f"{number} {word}" if number == 1 else f"{number} {word}s"


def _whole_number(value, field, label, high):
    """``value`` as a whole number in 1..high, or SliceError naming ``field``."""
    number = whole_number(value)
    if number is None:
        raise SliceError(f"{label} must be a whole number, not {str(value)[:40]!r}", field)
    if not 1 <= number <= high:
        allowed = "1" if high == 1 else f"between 1 and {high}"
        raise SliceError(f"{label} must be {allowed}, not {number}", field)
    return number


def make_slice(
    gpus,
    hours,
    *,
    partition,
    max_gpus,
    cores_per_gpu,
    mem_per_gpu_gb,
    max_hours,
    nodes=1,
    max_nodes=1,
):
    """Validate a request and compute its slice.

    ``gpus`` (per node), ``hours`` and ``nodes`` may be ints or the strings a
    form sends. Raises SliceError, naming the field, for anything outside
    1..max_gpus, 1..max_hours and 1..max_nodes; partition names are checked
    for shape as well, as they end up on sbatch's command line.
    """
    gpus = _whole_number(gpus, "gpus", "GPUs", max_gpus)
    hours = _whole_number(hours, "hours", "Hours", max_hours)
    nodes = _whole_number(nodes, "nodes", "Nodes", max_nodes)
    if not isinstance(partition, str) or not PARTITION_RE.match(partition):
        raise SliceError(f"{str(partition)[:40]!r} is not a valid partition name", "partition")
    return Slice(
        gpus=gpus,
        cores=gpus * cores_per_gpu,
        mem_gb=gpus * mem_per_gpu_gb,
        hours=hours,
        partition=partition,
        nodes=nodes,
    )
