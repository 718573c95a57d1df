"""Fixtures of the reliability suite: outages of the shared services, kept
short and always ended, and the figures each test prints.

The outages stop one daemon of the shared cluster (slurmctld, slapd) by its
pid file and start it again with the idempotent ``deploy/*.sh start``, in a
``finally``, so a failing test never leaves the cluster down.
"""

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from portal import settings
from tests.conftest import JOB_NAME, deploy

SITE = settings.load()
SLURMCTLD_PID = Path("/run/slurm/slurmctld.pid")
SLAPD_PID = Path("/run/portal/slapd/slapd.pid")  # deploy/ldap.sh
# the test hub's Spawner.poll_interval and shared squeue interval (tests/conftest.py)
POLL_INTERVAL = 2.0


def figure(capsys, text):
    """Print one of the suite's figures, past pytest's capture."""
    with capsys.disabled():
        print(f"\nRELIABILITY {text}")


def _stop_by_pidfile(pidfile, name, timeout=30):
    pid = int(pidfile.read_text().split()[0])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} (pid {pid}) did not stop within {timeout} s")


@contextlib.contextmanager
def outage(pidfile, name, script):
    """Stop one shared daemon for the ``with`` block, then start it again."""
    started = time.monotonic()
    _stop_by_pidfile(pidfile, name)
    try:
        yield
    finally:
        result = deploy(script, "start", check=False)
        print(f"{name} outage: {time.monotonic() - started:.1f} s")
        assert result.returncode == 0, result.stderr


@pytest.fixture
def slurmctld_down():
    """``with slurmctld_down(): ...``: slurmctld stopped for the block."""
    return lambda: outage(SLURMCTLD_PID, "slurmctld", "slurm.sh")


@pytest.fixture
def slapd_down():
    """``with slapd_down(): ...``: slapd stopped for the block (nslcd keeps running)."""
    return lambda: outage(SLAPD_PID, "slapd", "ldap.sh")


def cancel_jobs_of(users):
    """scancel the test hub's jobs of ``users`` (never another job name); wait until gone."""
    for user in users:
        subprocess.run(["scancel", "-n", JOB_NAME, "-u", user], check=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["squeue", "-h", "-n", JOB_NAME, "-u", ",".join(users), "-o", "%i"],
            capture_output=True,
            text=True,
        ).stdout
        if not out.strip():
            return
        time.sleep(0.5)
    raise AssertionError(f"jobs of {users} outlived scancel: {out}")
