"""sbatch's whole command line comes from one function,
``portal.slurm.commands.sbatch_argv``: the same argv, byte for byte, as the
submission and the expected-start query had when it was assembled in four
places (the spawner, ``Slice.sbatch_args``, ``commands.submit`` and
``commands.expected_start``)."""

import asyncio

import pytest

from portal.core.slice import make_slice
from portal.slurm import commands
from portal.slurm.commands import resource_options, sbatch_argv

LIMITS = dict(partition="gpu", max_gpus=4, cores_per_gpu=8, mem_per_gpu_gb=48, max_hours=24)


def before(job_slice, job_name, home):
    """The submission's and the query's argv as the code before ``sbatch_argv`` wrote them."""
    resources = [
        f"--nodes={job_slice.nodes}",
        f"--ntasks-per-node={job_slice.gpus}",
        f"--partition={job_slice.partition}",
        f"--gres=gpu:{job_slice.gpus}",
        f"--cpus-per-task={job_slice.cores_per_gpu}",
        f"--mem={job_slice.mem_gb}G",
        f"--time={job_slice.time_limit}",
        "--no-requeue",
    ]
    options = [f"--job-name={job_name}", f"--chdir={home}", "--output=/dev/null", *resources]
    return (
        ["/usr/bin/sbatch", "--parsable", *options],
        ["/usr/bin/sbatch", "--test-only", *resources, "--wrap=true"],
    )


@pytest.mark.parametrize("gpus, nodes, hours", [(1, 1, 8), (2, 1, 1), (4, 2, 24), (1, 2, 3)])
def test_the_argv_is_the_one_the_old_code_produced(gpus, nodes, hours):
    job_slice = make_slice(gpus, hours, nodes=nodes, max_nodes=2, **LIMITS)
    submission, query = before(job_slice, "portal-jupyter", "/home/ada")
    assert sbatch_argv(job_slice, job_name="portal-jupyter", chdir="/home/ada") == submission
    assert sbatch_argv(job_slice, test_only=True) == query
    assert resource_options(job_slice) == query[2:-1]


def test_a_sample_slice_gives_this_command_line():
    job_slice = make_slice(2, 8, **LIMITS)
    assert sbatch_argv(job_slice, job_name="portal-jupyter", chdir="/home/ada") == [
        "/usr/bin/sbatch", "--parsable", "--job-name=portal-jupyter", "--chdir=/home/ada",
        "--output=/dev/null", "--nodes=1", "--ntasks-per-node=2", "--partition=gpu",
        "--gres=gpu:2", "--cpus-per-task=8", "--mem=96G", "--time=8:00:00", "--no-requeue",
    ]  # fmt: skip


def test_submit_runs_the_argv_as_the_user(monkeypatch):
    job_slice = make_slice(1, 2, **LIMITS)
    argv = sbatch_argv(job_slice, job_name="portal-jupyter", chdir="/home/ada")
    ran = []

    async def fake_run(command, **kwargs):  # Slurm's runner, faked in this unit test only
        ran.append((command, kwargs["input"]))
        return "77"

    monkeypatch.setattr(commands, "run", fake_run)
    assert asyncio.run(commands.submit("ada", "#!/bin/bash\n", argv, timeout=5)) == "77"
    assert ran == [(["sudo", "-n", "-u", "ada", "--", *argv], "#!/bin/bash\n")]


def test_the_batch_template_has_no_sbatch_line():
    from portal.core.script import TEMPLATES

    assert "#SBATCH" not in (TEMPLATES / "batch.sh.j2").read_text()
