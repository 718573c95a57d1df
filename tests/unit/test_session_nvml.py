"""Which GPUs the session reads: only its job's (Slurm's numbers of the node's
GPUs matched to their minor numbers, else CUDA_VISIBLE_DEVICES's indices or
UUIDs), through a stand-in NVML of a 4-GPU node, with or without device
cgroups; and what it says on a node without the NVIDIA driver (this machine,
the real NVML)."""

import json
import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from portal.session.nvml import (
    NVMLReader,
    read_with,
    select_handles,
    slurm_gpus,
    visible_devices,
)
from tests.support import REPO

JUPYTER_PYTHON = "/opt/portal/envs/jupyter/bin/python"


class FakeNVML:
    """pynvml's calls for a node of 4 GPUs (/dev/nvidiaN, UUID GPU-000N), one
    with a MIG instance. A handle is the GPU's number on the node. ``visible``:
    the node's GPUs NVML sees, as its indices 0, 1...: all of them without
    device cgroups (or with a driver that shows them all), only the job's with
    them. ``minors``: whether NVML gives minor numbers."""

    class NVMLError(Exception):
        pass

    def __init__(self, visible=(0, 1, 2, 3), minors=True):
        self.gpus = {i: {"uuid": f"GPU-000{i}", "util": 10 * i + 5} for i in range(4)}
        self.visible = list(visible)
        self.minors = minors
        self.read = []  # the GPUs whose use was read, by their number on the node

    def nvmlDeviceGetCount(self):
        return len(self.visible)

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < len(self.visible):
            raise self.NVMLError("Invalid Argument")
        return self.visible[index]

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid == "MIG-aaaa-bbbb":
            return "mig"
        for gpu in self.visible:
            if self.gpus[gpu]["uuid"] == uuid:
                return gpu
        raise self.NVMLError("Not Found")

    def nvmlDeviceGetIndex(self, handle):
        if handle == "mig":
            raise self.NVMLError("Not Supported")
        return self.visible.index(handle)

    def nvmlDeviceGetMinorNumber(self, handle):
        if handle == "mig" or not self.minors:
            raise self.NVMLError("Not Supported")
        return handle

    def nvmlDeviceGetUUID(self, handle):
        return "MIG-aaaa-bbbb" if handle == "mig" else self.gpus[handle]["uuid"]

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetUtilizationRates(self, handle):
        if handle == "mig":
            raise self.NVMLError("Not Supported")
        self.read.append(handle)
        return SimpleNamespace(gpu=self.gpus[handle]["util"])

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=3 * 2**30, total=80 * 2**30)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("1,2", ["1", "2"]),
        ("GPU-0003, 0", ["GPU-0003", "0"]),
        ("", []),
        ("NoDevFiles", []),
        ("-1", []),
        (None, None),
    ],
)
def test_visible_devices(value, expected):
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert visible_devices(env) == expected


def test_only_the_jobs_gpus_are_read_by_index():
    nvml = FakeNVML()
    model = read_with(nvml, {"CUDA_VISIBLE_DEVICES": "1,2"})
    assert model["reason"] == ""
    assert [(g["index"], g["uuid"], g["utilization"]) for g in model["gpus"]] == [
        (1, "GPU-0001", 15),
        (2, "GPU-0002", 25),
    ]
    assert model["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert (model["gpus"][0]["memory_used_mb"], model["gpus"][0]["memory_total_mb"]) == (
        3072,
        81920,
    )
    assert nvml.read == [1, 2]  # GPUs 0 and 3 (another job's) never read


def test_gpus_named_by_uuid_and_mig_instances():
    nvml = FakeNVML()
    model = read_with(nvml, {"CUDA_VISIBLE_DEVICES": "GPU-0003,MIG-aaaa-bbbb"})
    assert [(g["index"], g["uuid"], g["utilization"]) for g in model["gpus"]] == [
        (3, "GPU-0003", 35),
        (None, "MIG-aaaa-bbbb", None),  # NVML gives no utilisation of a MIG instance
    ]
    assert nvml.read == [3]


def read(nvml, **environ):
    model = read_with(nvml, environ)
    return [(g["index"], g["uuid"]) for g in model["gpus"]], model["reason"]


def test_a_confined_job_reads_its_gpu_and_shows_the_nodes_number():
    """ConstrainDevices: the job given the node's GPU 2 sees it as 0 (CUDA and NVML)."""
    nvml = FakeNVML(visible=[2])
    job = {"CUDA_VISIBLE_DEVICES": "0", "SLURM_JOB_GPUS": "2"}
    assert read(nvml, **job) == ([(2, "GPU-0002")], "")
    assert nvml.read == [2]


def test_a_driver_that_shows_every_gpu_to_a_confined_job_never_reads_gpu_0():
    nvml = FakeNVML()  # NVML sees all 4, CUDA's index 0 is the node's GPU 2
    assert read(nvml, CUDA_VISIBLE_DEVICES="0", SLURM_JOB_GPUS="2") == ([(2, "GPU-0002")], "")
    assert nvml.read == [2]
    nvml = FakeNVML(minors=False)  # nothing tells which is GPU 2: none is read
    gpus, reason = read(nvml, CUDA_VISIBLE_DEVICES="0", SLURM_JOB_GPUS="2")
    assert gpus == [] and nvml.read == []
    assert reason.startswith("Slurm's GPU 2 is not among the minor numbers of the 4 GPUs")


def test_an_unconfined_job_reads_the_gpus_slurm_gave_it():
    nvml = FakeNVML()
    job = {"CUDA_VISIBLE_DEVICES": "1,3", "SLURM_JOB_GPUS": "1,3"}
    assert read(nvml, **job) == ([(1, "GPU-0001"), (3, "GPU-0003")], "")
    assert read(FakeNVML(minors=False), **job) == ([(1, "GPU-0001"), (3, "GPU-0003")], "")
    assert nvml.read == [1, 3]


def test_a_steps_gpus_come_before_the_jobs():
    nvml = FakeNVML()
    job = {"CUDA_VISIBLE_DEVICES": "0", "SLURM_JOB_GPUS": "1,3", "SLURM_STEP_GPUS": "3"}
    assert read(nvml, **job) == ([(3, "GPU-0003")], "")
    assert slurm_gpus({"SLURM_JOB_GPUS": "NoDevFiles"}) is None


def test_without_minor_numbers_a_confined_job_reads_by_cudas_index():
    """NVML sees only the job's GPUs: its index 0 is the job's; NVML's index is shown."""
    nvml = FakeNVML(visible=[2], minors=False)
    assert read(nvml, CUDA_VISIBLE_DEVICES="0", SLURM_JOB_GPUS="2") == ([(0, "GPU-0002")], "")
    assert nvml.read == [2]


def test_uuids_and_jobs_without_slurms_numbers_read_as_cuda_names_them():
    nvml = FakeNVML()
    job = {"CUDA_VISIBLE_DEVICES": "GPU-0003,MIG-aaaa-bbbb", "SLURM_JOB_GPUS": "3"}
    assert read(nvml, **job) == ([(3, "GPU-0003"), (None, "MIG-aaaa-bbbb")], "")
    # confined, no SLURM_* variable: index 0 is the job's only GPU, shown by its number
    assert read(FakeNVML(visible=[2]), CUDA_VISIBLE_DEVICES="0") == ([(2, "GPU-0002")], "")
    assert read(FakeNVML(), CUDA_VISIBLE_DEVICES="0,2") == ([(0, "GPU-0000"), (2, "GPU-0002")], "")


def test_the_list_ends_at_the_first_entry_that_names_no_gpu_as_cudas_does():
    nvml = FakeNVML()
    selected, reason = select_handles(nvml, ["2", "7", "0"])
    assert selected == [("2", 2)]
    assert "'7': no such GPU" in reason
    selected, reason = select_handles(nvml, ["1", "gpu0", "3"])
    assert selected == [("1", 1)] and "'gpu0' names no GPU" in reason


def test_a_job_without_gpus_says_so():
    model = read_with(FakeNVML(), {})
    assert model == {
        "gpus": [],
        "reason": "This session's Slurm job has no GPUs (CUDA_VISIBLE_DEVICES is not set)",
    }
    assert NVMLReader(environ={"CUDA_VISIBLE_DEVICES": ""}).read()["gpus"] == []


def test_no_driver_on_this_node_is_the_reason_with_the_real_nvml():
    """In the sessions' environment, with nvidia-ml-py, on this machine (no GPU)."""
    if not Path(JUPYTER_PYTHON).exists():
        pytest.skip(f"no {JUPYTER_PYTHON}: make up builds it")
    code = (
        "import json; from portal.session.nvml import NVMLReader\n"
        "reader = NVMLReader(environ={'CUDA_VISIBLE_DEVICES': '0'})\n"
        "print(json.dumps(reader.read())); reader.close()\n"
    )
    out = subprocess.run(
        [JUPYTER_PYTHON, "-c", code],
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    model = json.loads(out.stdout)
    assert model["gpus"] == []
    assert model["reason"].startswith(f"No NVIDIA driver on {socket.gethostname()} (NVML: ")
