"""The GPU slice: where a GPU count becomes cores, memory and sbatch options.

Pure functions, no Slurm: every request the portal submits passes through
``make_slice``, and its result is the only source of the job's resources.
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
    gpus: int
    cores: int
    mem_gb: int
    hours: int
    partition: str

    @property
    def time_limit(self):
        """Slurm's ``--time`` value, ``H:00:00``."""
        return f"{self.hours}:00:00"

    def sbatch_args(self):
        """The resource options of the job, as sbatch arguments."""
        return [
            "--nodes=1",
            "--ntasks=1",
            f"--partition={self.partition}",
            f"--gres=gpu:{self.gpus}",
            f"--cpus-per-task={self.cores}",
            f"--mem={self.mem_gb}G",
            f"--time={self.time_limit}",
        ]

    def describe(self):
        gpus = "1 GPU" if self.gpus == 1 else f"{self.gpus} GPUs"
        return (
            f"{gpus}, {self.cores} cores, {self.mem_gb} GB, "
            f"{self.hours} h on partition {self.partition}"
        )


def _whole_number(value, field, label):
    number = whole_number(value)
    if number is None:
        raise SliceError(f"{label} must be a whole number, not {str(value)[:40]!r}", field)
    return number


def make_slice(gpus, hours, *, partition, max_gpus, cores_per_gpu, mem_per_gpu_gb, max_hours):
    """Validate a request and compute its slice.

    ``gpus`` and ``hours`` may be ints or the strings a form sends. Raises
    SliceError, naming the field, for anything outside 1..max_gpus and
    1..max_hours; partition names are checked for shape as well, as they end
    up on sbatch's command line.
    """
    gpus = _whole_number(gpus, "gpus", "GPUs")
    hours = _whole_number(hours, "hours", "Hours")
    if not 1 <= gpus <= max_gpus:
        raise SliceError(f"GPUs must be between 1 and {max_gpus}, not {gpus}", "gpus")
    if not 1 <= hours <= max_hours:
        raise SliceError(f"Hours must be between 1 and {max_hours}, not {hours}", "hours")
    if not isinstance(partition, str) or not PARTITION_RE.match(partition):
        raise SliceError(f"{str(partition)[:40]!r} is not a valid partition name", "partition")
    return Slice(
        gpus=gpus,
        cores=gpus * cores_per_gpu,
        mem_gb=gpus * mem_per_gpu_gb,
        hours=hours,
        partition=partition,
    )
