"""Slurm's own limits, for jobs submitted outside the portal (sbatch from a
shell): associations, the QOS "portal" and its caps, against the real Slurm."""

import subprocess
import time
import uuid

import pytest

from portal import settings
from tests.support.testhub import deploy

# The account portal's QOS (its users inherit them): portal, its default, and
# the CPU sessions' [cluster] cpu_qos, as sacctmgr lists them.
PORTAL_QOS = ",".join(sorted({"portal", settings.load()["cluster"]["cpu_qos"]} - {""}))
# A name of our own: the jobs of this file, and only them, are looked for and
# cancelled, whatever else runs on the cluster meanwhile.
JOB_NAME = f"portal-limits-{uuid.uuid4().hex[:8]}"


def sbatch_as(user, *args):
    """``sudo -u USER sbatch ARGS --wrap 'sleep 1'`` under this file's job name."""
    return subprocess.run(
        ["sudo", "-u", user, "sbatch", "--parsable", "-J", JOB_NAME, "--chdir=/tmp",
         "--output=/dev/null", *args, "--wrap", "sleep 1"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def jobs():
    """Our jobs as squeue lists them: ``[[id, user, account, qos], ...]``."""
    out = subprocess.run(
        ["squeue", "-h", "-n", JOB_NAME, "-o", "%i %u %a %q"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return [line.split() for line in out.splitlines()]


def accounted():
    """Job ids that slurmdbd ever recorded under our job name."""
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-a", "-S", "now-1hour", "--name", JOB_NAME, "-o", "jobid"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return out.split()


def association(user):
    out = subprocess.run(
        ["sacctmgr", "-n", "-P", "list", "assoc", f"user={user}", "account=portal",
         "format=user,qos"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return out.strip()


@pytest.fixture
def cleanup(cluster):
    """Cancel this file's jobs at the end of each test, and wait until they are gone."""
    yield
    subprocess.run(["scancel", "-n", JOB_NAME], check=False)
    deadline = time.monotonic() + 30
    while jobs() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not jobs(), f"jobs outlived scancel: {jobs()}"


def test_a_week_on_four_gpus_is_refused_with_slurms_reason(cleanup):
    r = sbatch_as("bob", "-p", "gpu", "--gres=gpu:4", "--time=7-00:00:00")
    assert r.returncode != 0, f"Slurm accepted job {r.stdout.strip()}"
    assert "QOSMaxWallDurationPerJobLimit" in r.stderr, r.stderr
    assert "Job violates accounting/QOS policy" in r.stderr, r.stderr
    assert not jobs()
    assert not accounted()


def test_a_job_without_a_gpu_is_refused(cleanup):
    """A GPU-less job could hold a node's cores and memory all day."""
    r = sbatch_as("bob", "-p", "gpu", "--cpus-per-task=32", "--time=1:00:00")
    assert r.returncode != 0, f"Slurm accepted job {r.stdout.strip()}"
    assert "QOSMinGRES" in r.stderr, r.stderr
    assert not jobs()


def test_a_job_within_the_limits_runs_under_the_portal_qos(cleanup):
    r = sbatch_as("bob", "-p", "gpu", "--gres=gpu:1", "--time=1:00:00")
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().split(";")[0]
    assert jobs() == [[job_id, "bob", "portal", "portal"]]
    subprocess.run(["scancel", job_id], check=True)


def test_another_qos_cannot_be_asked_for(cleanup):
    r = sbatch_as("bob", "-p", "gpu", "--gres=gpu:1", "--time=1:00:00", "--qos=normal")
    assert r.returncode != 0, f"Slurm accepted job {r.stdout.strip()}"
    assert "Invalid qos specification" in r.stderr, r.stderr
    assert not jobs()


def test_a_user_outside_the_portal_groups_is_refused(cleanup):
    assert association("eve") == ""
    r = sbatch_as("eve", "-p", "gpu", "--gres=gpu:1", "--time=1:00:00")
    assert r.returncode != 0, f"Slurm accepted job {r.stdout.strip()}"
    assert "Invalid account" in r.stderr, r.stderr
    assert not jobs()


def test_sync_users_removes_who_is_not_a_member(cluster):
    subprocess.run(
        ["sacctmgr", "-i", "add", "user", "eve", "account=portal"],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        assert association("eve") == f"eve|{PORTAL_QOS}"
        r = deploy("slurm.sh", "sync-users", check=False)
        assert r.returncode == 0, r.stderr
        assert "removing from account portal: eve" in r.stderr
        assert association("eve") == ""
        hub_user = settings.load()["hub"].get("user")  # its sbatch --test-only
        for member in ("alice", "bob", "carol", "root", hub_user or "root"):
            assert association(member) == f"{member}|{PORTAL_QOS}"
        r = deploy("slurm.sh", "sync-users", check=False)  # nothing to do for eve now
        assert r.returncode == 0, r.stderr
        assert "eve" not in r.stderr
    finally:
        subprocess.run(
            ["sacctmgr", "-i", "remove", "user", "eve", "account=portal"], capture_output=True
        )
