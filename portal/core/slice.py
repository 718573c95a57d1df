"""The GPU slice: where a GPU count becomes cores and memory.

Pure functions, no Slurm: every request the portal submits passes through
``make_slice``, and its result is the only source of the job's resources
(``portal.slurm.commands.sbatch_argv`` puts them on sbatch's command line).
"""

import re
from dataclasses import dataclass

from .numbers import whole_number

PARTITION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# The shapes of the site's names a user may choose (issue 38): a GPU model
# (a GRES type), an account, a QOS, a reservation, a node feature. Slurm's
# own names are wider; these are what reaches sbatch's command line.
SLURM_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
CHOICE_LABELS = {
    "gpu_type": "GPU model",
    "account": "Account",
    "qos": "QOS",
    "reservation": "Reservation",
    "feature": "Node feature",
}


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
    # The site's choices (issue 38); "" is Slurm's default (any model, the
    # user's default account and its QOS, no reservation, any node).
    gpu_type: str = ""
    account: str = ""
    qos: str = ""
    reservation: str = ""
    feature: str = ""

    @property
    def cpu_only(self):
        """A session without GPUs (a CPU partition's): ``cores`` and ``mem_gb`` as asked."""
        return self.gpus == 0

    @property
    def tasks_per_node(self):
        """One task per GPU (``srun`` starts one process per GPU); one without GPUs."""
        return self.gpus or 1

    @property
    def time_limit(self):
        """Slurm's ``--time`` value, ``H:00:00``."""
        return f"{self.hours}:00:00"

    @property
    def cores_per_gpu(self):
        """The cores of each task (``--cpus-per-task``): a GPU's, or all of a CPU session's."""
        return self.cores // self.tasks_per_node

    @property
    def gres(self):
        """sbatch's ``--gres`` value: ``gpu:2``, ``gpu:v100-sxm2:2``; "" without GPUs."""
        if not self.gpus:
            return ""
        return f"gpu:{self.gpu_type}:{self.gpus}" if self.gpu_type else f"gpu:{self.gpus}"

    def choices(self):
        """The site's choices this slice names, ``{field: value}`` (none: {})."""
        return {key: getattr(self, key) for key in CHOICE_LABELS if getattr(self, key)}

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
        ``2 nodes × 1 GPU = 2 GPUs, 16 cores, 96 GB, ...`` (the totals);
        ``1 GPU (v100-sxm2), ...``, ``no GPU, 4 cores, ...``; then the account,
        QOS, reservation and node feature chosen, if any."""
        model = f" ({self.gpu_type})" if self.gpu_type else ""
        gpus = count(self.gpus, "GPU") + model if self.gpus else "no GPU"
        per_node = f"{count(self.nodes, 'node')} × {gpus} = " if self.nodes > 1 else ""
        total = count(self.total_gpus, "GPU") + model if self.gpus else "no GPU"
        chosen = "".join(
            f", {CHOICE_LABELS[key].lower() if key != 'qos' else 'QOS'} {value}"
            for key, value in self.choices().items()
            if key != "gpu_type"
        )
        return (
            f"{per_node if self.gpus else ''}{total}, {self.total_cores} cores, "
            f"{self.total_mem_gb} GB, {self.hours} h on partition {self.partition}{chosen}"
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
    choices=None,
    cores=None,
    mem_gb=None,
    max_cores=0,
    max_mem_gb=0,
):
    """Validate a request and compute its slice.

    ``gpus`` (per node), ``hours`` and ``nodes`` may be ints or the strings a
    form sends. Raises SliceError, naming the field, for anything outside
    1..max_gpus, 1..max_hours and 1..max_nodes; partition names are checked
    for shape as well, as they end up on sbatch's command line.

    ``gpus`` 0 is a CPU session where ``max_cores`` allows one: on one node,
    with ``cores`` (1..max_cores) and ``mem_gb`` (1..max_mem_gb), by default
    one GPU's slice within them. ``cores`` and ``mem_gb`` are refused with
    GPUs, whose slice comes with them.

    ``choices``: the site's names the user chose (``CHOICE_LABELS``: GPU
    model, account, QOS, reservation, node feature), checked for shape here
    ("" or None: Slurm's default); whether the site and the profile offer
    them is checked against the cluster (``portal.slurm.choices``).

    >>> s = make_slice(0, 2, partition="cpu", max_gpus=4, cores_per_gpu=8, mem_per_gpu_gb=48,
    ...                max_hours=8, max_cores=16, max_mem_gb=64, cores="4")
    >>> s.describe(), s.gres, s.cores_per_gpu
    ('no GPU, 4 cores, 48 GB, 2 h on partition cpu', '', 4)
    >>> try:
    ...     make_slice(1, 2, partition="gpu", max_gpus=4, cores_per_gpu=8, mem_per_gpu_gb=48,
    ...                max_hours=8, cores=4)
    ... except SliceError as e:
    ...     print(e.field, "|", e)  # doctest: +NORMALIZE_WHITESPACE
    cores | Cores are chosen for sessions without GPUs only:
    a GPU comes with 8 cores and 48 GB
    """
    cpu = max_cores > 0 and whole_number(gpus) == 0
    if cpu:
        gpus = 0
        nodes = _whole_number(nodes, "nodes", "Nodes", 1)
        cores = _whole_number(
            min(cores_per_gpu, max_cores) if cores in (None, "") else cores,
            "cores", "Cores", max_cores,
        )  # fmt: skip
        mem = _whole_number(
            min(mem_per_gpu_gb, max_mem_gb) if mem_gb in (None, "") else mem_gb,
            "mem_gb", "Memory (GB)", max_mem_gb,
        )  # fmt: skip
    else:
        for key, given in (("cores", cores), ("mem_gb", mem_gb)):
            if given not in (None, ""):
                raise SliceError(
                    f"{'Cores are' if key == 'cores' else 'Memory is'} chosen for sessions "
                    f"without GPUs only: a GPU comes with {cores_per_gpu} cores and "
                    f"{mem_per_gpu_gb} GB",
                    key,
                )
        gpus = _whole_number(gpus, "gpus", "GPUs", max_gpus)
        nodes = _whole_number(nodes, "nodes", "Nodes", max_nodes)
        cores, mem = gpus * cores_per_gpu, gpus * mem_per_gpu_gb
    hours = _whole_number(hours, "hours", "Hours", max_hours)
    if not isinstance(partition, str) or not PARTITION_RE.match(partition):
        raise SliceError(f"{str(partition)[:40]!r} is not a valid partition name", "partition")
    chosen = check_choices(choices or {})
    if cpu and chosen.get("gpu_type"):
        raise SliceError(
            f"GPU model {chosen['gpu_type']} needs GPUs: choose 1 or more, or no model",
            "gpu_type",
        )
    return Slice(
        gpus=gpus,
        cores=cores,
        mem_gb=mem,
        hours=hours,
        partition=partition,
        nodes=nodes,
        **chosen,
    )


def check_choices(choices):
    """The site's names in ``choices`` (``{field: name}``) that are given,
    each of a shape sbatch takes; SliceError naming the field otherwise.

    >>> check_choices({"account": "lab-nlp", "qos": "", "reservation": None})
    {'account': 'lab-nlp'}
    >>> check_choices({"account": "lab nlp; rm"})
    Traceback (most recent call last):
    ...
    portal.core.slice.SliceError: Account 'lab nlp; rm' is not a name Slurm gave
    """
    chosen = {}
    for key, value in choices.items():
        if key not in CHOICE_LABELS:
            raise SliceError(f"{str(key)[:40]!r} is not one of the site's choices", key)
        if value in (None, ""):
            continue
        if not isinstance(value, str) or not SLURM_NAME_RE.match(value):
            raise SliceError(
                f"{CHOICE_LABELS[key]} {str(value)[:40]!r} is not a name Slurm gave", key
            )
        chosen[key] = value
    return chosen
