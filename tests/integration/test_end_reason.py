"""How a session's job ended, as slurmctld still holds it: the answer
``SessionCard.settle_end`` falls back to when slurmdbd has no record in its
time (``end_reason_ctld``), read from the real slurmctld's ``scontrol show
job -o``. A job of the user's, named as the session's, is cancelled: its
state is read while it runs (not an end), and once it ended; asked under
another job name, the same job gives nothing."""

import asyncio
import subprocess
import time

import pytest

from portal.slurm import commands
from spawners.card import is_final
from tests.support.jobs import PARTITION, scontrol_job
from tests.support.testhub import JOB_NAME

USER = "alice"
NAME = f"{JOB_NAME}-end-reason"


def submit_as(user, name):
    out = subprocess.run(
        ["sudo", "-u", user, "sbatch", "--parsable", "-J", name, "-p", PARTITION, "--gres=gpu:1",
         "-t", "5", "-o", "/dev/null", "--chdir", "/tmp", "--wrap", "sleep 300"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return out.strip().split(";")[0]


def wait_state(job_id, states, timeout=30):
    deadline = time.monotonic() + timeout
    while (state := scontrol_job(job_id).get("JobState")) not in states:
        assert time.monotonic() < deadline, f"job {job_id} is {state}, not one of {states}"
        time.sleep(0.3)


def ctld(job_id, name):
    return asyncio.run(commands.end_reason_ctld(job_id, name, 20))


@pytest.fixture
def job(cluster):
    job_id = submit_as(USER, NAME)
    yield job_id
    subprocess.run(["scancel", job_id], check=False)


def test_slurmctld_tells_how_a_cancelled_job_of_the_sessions_name_ended(job):
    wait_state(job, {"RUNNING"})
    running = ctld(job, NAME)
    assert running.startswith("RUNNING, exit code"), running
    assert not is_final(running)

    subprocess.run(["scancel", job], check=True)
    wait_state(job, {"CANCELLED"})
    ended = ctld(job, NAME)
    assert ended.startswith("CANCELLED, exit code "), ended
    assert is_final(ended)
    # the same job asked for as another session's: nothing, not its state
    assert ctld(job, f"{NAME}-other") == ""


def test_a_job_slurmctld_never_had_gives_nothing(cluster):
    assert ctld("999999999", NAME) == ""
