"""Which GPUs the session reads: only its job's (CUDA_VISIBLE_DEVICES, indices
or UUIDs), through a stand-in NVML of a 4-GPU node; and what it says on a
node without the NVIDIA driver (this machine, the real NVML)."""

import json
import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from portal.session.nvml import NVMLReader, read_with, select_handles, visible_devices
from tests.support import REPO

JUPYTER_PYTHON = "/opt/portal/envs/jupyter/bin/python"


class FakeNVML:
    """pynvml's calls for a node of 4 GPUs (UUID GPU-000N), one with a MIG instance."""

    class NVMLError(Exception):
        pass

    def __init__(self):
        self.gpus = {i: {"uuid": f"GPU-000{i}", "util": 10 * i + 5} for i in range(4)}
        self.read = []  # the GPUs whose use was read

    def nvmlDeviceGetHandleByIndex(self, index):
        if index not in self.gpus:
            raise self.NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid == "MIG-aaaa-bbbb":
            return "mig"
        for index, gpu in self.gpus.items():
            if gpu["uuid"] == uuid:
                return index
        raise self.NVMLError("Not Found")

    def nvmlDeviceGetIndex(self, handle):
        if handle == "mig":
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
