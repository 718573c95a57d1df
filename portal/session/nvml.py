"""The session's own GPUs, read through NVML (nvidia-ml-py).

Only the job's GPUs, as CUDA names them to the job's processes:
``CUDA_VISIBLE_DEVICES``, which Slurm sets to the GPUs it allocated. Each
entry is an index (``"2"``) or a UUID (``"GPU-8f6c..."``, ``"MIG-4a2b..."``):
a UUID is looked up as such, an index as NVML's index of the GPU on the
node, in PCI bus order as Slurm numbers them (without cgroups, the node's
numbering; with ``ConstrainDevices``, NVML in the job sees only the job's
GPUs and numbers them from 0, as CUDA does). As CUDA does, the list ends at
the first entry that names no GPU. No other GPU of the node is read.

    read_gpus() -> {"gpus": [{"index", "uuid", "name", "utilization",
                              "memory_used_mb", "memory_total_mb"}...],
                    "reason": ""}

``utilization`` is the percentage of the last sample period in which a
kernel ran on the GPU (None where NVML cannot say, as for MIG instances);
memory is in MiB. Without GPUs, ``gpus`` is empty and ``reason`` says why:
the job has none, or the node has no NVIDIA driver. No jupyter_server here:
``portal.session.gpus`` serves it, ``portal.session.activity`` uses it.
"""

import os
import re
import socket
import threading

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
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


def _text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def gpu_model(nvml, entry, handle):
    """One GPU's name, utilisation and memory."""
    try:
        index = nvml.nvmlDeviceGetIndex(handle)
    except nvml.NVMLError:
        index = int(entry) if INDEX_RE.match(entry) else None  # a MIG instance has none
    try:
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    except nvml.NVMLError:
        uuid = entry if UUID_RE.match(entry) else ""
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
    selected, reason = select_handles(nvml, entries)
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
