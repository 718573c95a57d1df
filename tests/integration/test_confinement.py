"""A slice is enforced by the kernel, not by convention: on the real cluster
(proctrack/cgroup, task/cgroup, cgroup.conf ConstrainDevices and
ConstrainRAMSpace), a job opens only its own GPUs' device files and is held
to its memory. The device files are 0666, as NVIDIA's are: the devices
cgroup alone keeps a job from the node's other GPUs."""

import asyncio
import errno
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
import uuid

import pytest

from portal.slurm import commands as slurm
from portal.slurm.model import describe_end
from tests.support.measure import figure

JOB_NAME = f"portal-confine-{uuid.uuid4().hex[:8]}"
GPU_DEV = "/dev/portal-gpu"

# Opens every GPU device file of the job's node; prints what each open gave.
PROBE = r"""
import errno, json, os, socket
node = socket.gethostname()
folder = f"/dev/portal-gpu/{node}"
opened = {}
for name in sorted(os.listdir(folder)):
    try:
        os.close(os.open(os.path.join(folder, name), os.O_RDWR))
        opened[name] = "opened"
    except OSError as e:
        opened[name] = errno.errorcode[e.errno]
print(json.dumps({"node": node, "opened": opened,
                  "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "job_gpus": os.environ.get("SLURM_JOB_GPUS")}))
"""

# Holds 1.5 GB, 50 MB at a time.
FILL = r"""
held = [bytearray(50 * 2**20) for _ in range(30)]
print("held", len(held) * 50, "MB")
"""


@pytest.fixture
def bobs_folder(cluster):
    """A folder of bob's for the jobs' scripts and output; his jobs of this
    file are cancelled afterwards."""
    # in bob's home, shared by the nodes as on a cluster: a job's /tmp is its own
    folder = tempfile.mkdtemp(prefix="portal-confine-", dir=pwd.getpwnam("bob").pw_dir)
    shutil.chown(folder, "bob", "portal-users")
    yield folder
    subprocess.run(["scancel", "-n", JOB_NAME], check=False)
    shutil.rmtree(folder, ignore_errors=True)


def run_as_bob(folder, name, code, *options, wait=True):
    """sbatch as bob a Python ``code`` (a file in ``folder``); returns
    ``(job_id, output)`` once it ended (``wait``), else ``(job_id, None)``."""
    script = os.path.join(folder, f"{name}.py")
    with open(script, "w") as f:
        f.write(code)
    shutil.chown(script, "bob", "portal-users")
    out = os.path.join(folder, f"{name}.out")
    argv = ["sudo", "-u", "bob", "sbatch", "--parsable", "-J", JOB_NAME, f"--chdir={folder}",
            f"--output={out}", "-p", "gpu", "-c", "1", "-t", "5", *options]  # fmt: skip
    if wait:
        argv.append("--wait")
    argv += ["--wrap", f"/usr/bin/python3 {script}"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    job_id = result.stdout.strip().split(";")[0]
    assert job_id.isdigit(), (result.returncode, result.stdout, result.stderr)
    if not wait:
        return job_id, None
    with open(out) as f:
        return job_id, f.read()


def wait_running(job_id, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True
        ).stdout.strip()
        if state == "RUNNING":
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not start within {timeout} s")


async def end_reason(job_id, timeout=30):
    """sacct's record of how the job ended (slurmdbd may get it a moment late)."""
    deadline = time.monotonic() + timeout
    while True:
        reason = await slurm.end_reason(job_id, JOB_NAME, timeout=20)
        if reason or time.monotonic() > deadline:
            return reason
        await asyncio.sleep(0.5)


def test_gpu_device_files_are_world_accessible_as_nvidias(cluster):
    files = [os.path.join(d, f) for d, _, names in os.walk(GPU_DEV) for f in names]
    assert files
    for path in files:
        mode = os.stat(path).st_mode
        assert stat.S_ISCHR(mode) and stat.S_IMODE(mode) == 0o666, (path, oct(mode))


def test_a_job_opens_its_own_gpu_and_no_other(bobs_folder, capsys):
    """bob's 1-GPU job on a node where his other job holds GPUs 0 and 1: its
    own device (GPU 2, which Slurm shows it as CUDA device 0) answers as the
    driver does (ENXIO here: no driver), every other GPU of the node EPERM."""
    holder, _ = run_as_bob(
        bobs_folder, "holder", "import time; time.sleep(120)", "-w", "n2", "--gres=gpu:2",
        "--mem=256M", wait=False,
    )  # fmt: skip
    wait_running(holder)
    _, output = run_as_bob(bobs_folder, "probe", PROBE, "-w", "n2", "--gres=gpu:1", "--mem=256M")
    seen = json.loads(output.strip().splitlines()[-1])
    figure(capsys, f"confinement: bob's 1-GPU job on {seen['node']}: {seen}")
    own = f"gpu{seen['job_gpus']}"
    assert seen["node"] == "n2"
    assert seen["job_gpus"] == "2" and seen["cuda"] == "0"  # Slurm renumbers what it sees
    assert seen["opened"][own] == errno.errorcode[errno.ENXIO]
    others = {name: got for name, got in seen["opened"].items() if name != own}
    assert sorted(others) == ["gpu0", "gpu1", "gpu3"]
    assert set(others.values()) == {errno.errorcode[errno.EPERM]}, others


async def test_a_job_past_its_memory_ends_out_of_memory(bobs_folder, capsys):
    """--mem=512M and 1.5 GB held: the kernel's memory cgroup kills it, sacct
    says OUT_OF_MEMORY, and the card's phrase (from the same sacct call the
    hub makes) names the slice's memory."""
    job_id, output = run_as_bob(bobs_folder, "fill", FILL, "--gres=gpu:1", "--mem=512M")
    assert "held 1500 MB" not in output
    reason = await end_reason(job_id)
    figure(capsys, f"confinement: 1.5 GB in --mem=512M: {reason}")
    assert reason.startswith("OUT_OF_MEMORY"), (reason, output[-500:])
    assert describe_end(reason, "0.5 GB") == "it ran out of its 0.5 GB of memory"
