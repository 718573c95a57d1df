"""The session's own GPUs, read through NVML (nvidia-ml-py).

Only the job's GPUs. Slurm names them by the node's numbering
(``SLURM_STEP_GPUS`` in an srun step, else ``SLURM_JOB_GPUS``), which is a
GPU's device minor number (``/dev/nvidiaN``, as in gres.conf): the GPUs read
are those NVML gives these minor numbers, in that order. Where that cannot
be done (no such variable, UUIDs, no minor number), they are those
``CUDA_VISIBLE_DEVICES`` names as CUDA does: a UUID (``"GPU-8f6c..."``,
``"MIG-4a2b..."``) as such, an index as NVML's index, the list ending at the
first entry that names no GPU. Under ``ConstrainDevices`` these indices
count from 0, and some drivers still show NVML every GPU of the node: when
NVML sees more GPUs than the job has and the indices are not Slurm's
numbers, nothing is guessed and ``reason`` says so. No other GPU is read.

    read_gpus() -> {"gpus": [{"index", "uuid", "name", "utilization",
                              "memory_used_mb", "memory_total_mb"}...],
                    "reason": ""}

``index`` is the GPU's number on the node, as Slurm and the home page's
card name it (NVML's index where NVML gives no minor number; None for a MIG
instance). ``utilization`` is the percentage of the last sample period in
which a kernel ran on the GPU (None where NVML cannot say, as for MIG
instances); memory is in MiB. Without GPUs, ``gpus`` is empty and
``reason`` says why: the job has none, or the node has no NVIDIA driver. No
jupyter_server here: ``portal.session.gpus`` serves it,
``portal.session.activity`` uses it.
"""

import os
import re
import socket
import threading

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
# The job's GPUs by the node's numbering: an srun step's, else the job's.
SLURM_GPUS_ENV = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z/-]+$")
INDEX_RE = re.compile(r"^[0-9]{1,4}$")
# Values by which Slurm or CUDA mean "no GPU" (NoDevFiles: gres without device files).
NO_DEVICES = {"", "-1", "NoDevFiles", "none"}
MIB = 1024 * 1024


def visible_devices(environ=os.environ):
    """The job's GPUs as ``CUDA_VISIBLE_DEVICES`` lists them, or None when it
    is unset (the job was given no GPUs).

    >>> visible_devices({"CUDA_VISIBLE_DEVICES": "1,2"})
    ['1', '2']
    >>> visible_devices({"CUDA_VISIBLE_DEVICES": " GPU-8f6c1f3e-7d1b-2c3a-9e4f-0a1b2c3d4e5f "})
    ['GPU-8f6c1f3e-7d1b-2c3a-9e4f-0a1b2c3d4e5f']
    >>> visible_devices({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}), visible_devices({})
    ([], None)
    """
    value = environ.get(VISIBLE_ENV)
    if value is None:
        return None
    value = value.strip()
    if value in NO_DEVICES:
        return []
    return [entry.strip() for entry in value.split(",")]


def slurm_gpus(environ=os.environ):
    """The node's numbers of the job's GPUs as Slurm names them
    (``SLURM_STEP_GPUS``, else ``SLURM_JOB_GPUS``), or None where it names
    none as a list of integers.

    >>> slurm_gpus({"SLURM_JOB_GPUS": "1,3"})
    [1, 3]
    >>> slurm_gpus({"SLURM_JOB_GPUS": "1,3", "SLURM_STEP_GPUS": "3"})
    [3]
    >>> slurm_gpus({"SLURM_JOB_GPUS": "gpu:2"}), slurm_gpus({})
    (None, None)
    """
    for name in SLURM_GPUS_ENV:
        value = environ.get(name, "").strip()
        if value:
            ids = [entry.strip() for entry in value.split(",")]
            if not all(INDEX_RE.match(entry) for entry in ids):
                return None
            return list(dict.fromkeys(int(entry) for entry in ids))
    return None


def no_gpus_reason(environ=os.environ):
    value = environ.get(VISIBLE_ENV)
    shown = "not set" if value is None else repr(value)
    return f"This session's Slurm job has no GPUs ({VISIBLE_ENV} is {shown})"


def select_handles(nvml, entries):
    """``[(entry, handle)]`` of the GPUs that ``entries`` name, and a reason
    for the entries that name none ("" when all do). ``nvml`` is the
    ``pynvml`` module (or a fake with its functions)."""
    selected, seen = [], set()
    for entry in entries:
        try:
            if UUID_RE.match(entry):
                handle = nvml.nvmlDeviceGetHandleByUUID(entry)
            elif INDEX_RE.match(entry):
                handle = nvml.nvmlDeviceGetHandleByIndex(int(entry))
            else:
                return selected, f"{VISIBLE_ENV} entry {entry[:60]!r} names no GPU"
        except nvml.NVMLError as e:
            return selected, f"{VISIBLE_ENV} entry {entry[:60]!r}: no such GPU (NVML: {e})"
        if entry not in seen:
            seen.add(entry)
            selected.append((entry, handle))
    return selected, ""


def handles_by_minor(nvml, count):
    """``{minor number: handle}`` of the ``count`` GPUs NVML sees, without
    those whose handle or minor number NVML will not give."""
    handles = {}
    for index in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            handles[nvml.nvmlDeviceGetMinorNumber(handle)] = handle
        except nvml.NVMLError:
            pass
    return handles


def select_job_gpus(nvml, entries, ids):
    """``[(entry, handle)]`` of the job's GPUs and a reason for those not
    found ("" when all are): by minor number where Slurm names them
    (``ids``) and CUDA by index, else as ``select_handles``."""
    if ids is None or not all(INDEX_RE.match(entry) for entry in entries):
        return select_handles(nvml, entries)
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as e:
        return [], f"NVML could not count the node's GPUs ({e})"
    handles = handles_by_minor(nvml, count)
    selected = [(str(i), handles[i]) for i in ids if i in handles]
    if len(selected) == len(ids):
        return selected, ""
    if count <= len(ids) or [int(entry) for entry in entries] == ids:
        return select_handles(nvml, entries)  # CUDA's indices name only the job's GPUs
    missing = ",".join(str(i) for i in ids if i not in handles)
    return selected, (
        f"Slurm's GPU {missing} is not among the minor numbers of the {count} GPUs "
        f"NVML sees; not read by {VISIBLE_ENV} index, which could name another job's GPU"
    )


def node_number(nvml, handle):
    """A GPU's number on the node: its minor number (``/dev/nvidiaN``), else
    NVML's index, else None."""
    for query in (nvml.nvmlDeviceGetMinorNumber, nvml.nvmlDeviceGetIndex):
        try:
            return query(handle)
        except nvml.NVMLError:
            pass
    return None


def _text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def gpu_model(nvml, entry, handle):
    """One GPU's number on the node, name, utilisation and memory."""
    try:
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    except nvml.NVMLError:
        uuid = entry if UUID_RE.match(entry) else ""
    if uuid.startswith("MIG-"):
        index = None  # a MIG instance has none
    else:
        index = node_number(nvml, handle)
        if index is None and INDEX_RE.match(entry):
            index = int(entry)
    try:
        utilization = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
    except nvml.NVMLError:
        utilization = None  # not supported (MIG) or not permitted
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    return {
        "index": index,
        "uuid": uuid,
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "utilization": utilization,
        "memory_used_mb": round(memory.used / MIB),
        "memory_total_mb": round(memory.total / MIB),
    }


def read_with(nvml, environ=os.environ):
    """``{"gpus": [...], "reason": ...}`` for the GPUs of ``environ``'s job,
    read through ``nvml`` (initialised by the caller)."""
    entries = visible_devices(environ)
    if not entries:
        return {"gpus": [], "reason": no_gpus_reason(environ)}
    selected, reason = select_job_gpus(nvml, entries, slurm_gpus(environ))
    gpus = []
    for entry, handle in selected:
        try:
            gpus.append(gpu_model(nvml, entry, handle))
        except nvml.NVMLError as e:
            reason = reason or f"GPU {entry}: NVML could not read it ({e})"
    return {"gpus": gpus, "reason": reason}


class NVMLReader:
    """Reads the job's GPUs through the real NVML, initialised at the first
    read (again after a failure, so a driver loaded later is found).
    Thread-safe: the server reads it from a worker thread."""

    def __init__(self, environ=os.environ, node=None):
        self.environ = environ
        self.node = node or socket.gethostname()
        self._lock = threading.Lock()
        self._nvml = None

    def _init(self):
        try:
            import pynvml
        except ImportError:
            return None, "nvidia-ml-py (pynvml) is not installed in the session's environment"
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            return None, f"No NVIDIA driver on {self.node} (NVML: {e})"
        return pynvml, ""

    def read(self):
        if not visible_devices(self.environ):
            return {"gpus": [], "reason": no_gpus_reason(self.environ)}
        with self._lock:
            if self._nvml is None:
                self._nvml, reason = self._init()
                if self._nvml is None:
                    return {"gpus": [], "reason": reason}
            return read_with(self._nvml, self.environ)

    def close(self):
        with self._lock:
            if self._nvml is not None:
                try:
                    self._nvml.nvmlShutdown()
                except self._nvml.NVMLError:
                    pass
                self._nvml = None
