"""Fixtures of the reliability suite: outages of the shared services, kept
short and always ended.

The outages stop one daemon of the shared cluster (slurmctld, slapd) by its
pid file (SIGTERM, or SIGKILL for a crash) and start it again with the
idempotent ``deploy/*.sh start``, in a ``finally``, so a failing test never
leaves the cluster down.
"""

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.testhub import deploy

SLURMCTLD_PID = Path("/run/slurm/slurmctld.pid")  # deploy/slurm.sh
SLAPD_PID = Path("/run/portal/slapd/slapd.pid")  # deploy/ldap.sh


def _stop_by_pidfile(pidfile, name, sig, timeout=30):
    pid = int(pidfile.read_text().split()[0])
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} (pid {pid}) did not stop within {timeout} s")


@contextlib.contextmanager
def outage(pidfile, name, script, sig=signal.SIGTERM):
    """Stop one shared daemon with ``sig`` for the ``with`` block, then start it again."""
    started = time.monotonic()
    _stop_by_pidfile(pidfile, name, sig)
    try:
        yield
    finally:
        result = deploy(script, "start", check=False)
        print(f"{name} outage: {time.monotonic() - started:.1f} s")
        assert result.returncode == 0, result.stderr


@pytest.fixture
def slurmctld_down():
    """``with slurmctld_down(): ...``: slurmctld stopped for the block;
    ``slurmctld_down(signal.SIGKILL)``: crashed (no state saved on the way out)."""
    return lambda sig=signal.SIGTERM: outage(SLURMCTLD_PID, "slurmctld", "slurm.sh", sig)


@pytest.fixture
def slapd_down():
    """``with slapd_down(): ...``: slapd stopped for the block (nslcd keeps running)."""
    return lambda: outage(SLAPD_PID, "slapd", "ldap.sh")
