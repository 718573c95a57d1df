"""Slurm's load does not grow with the sessions: one shared poll for all.

Counts slurmctld's job-info RPCs (sdiag) over the same interval with 1 and
with 20 running sessions. The node advertises 20 GPUs for this test and is
put back afterwards (running jobs survive the reconfiguration).
"""

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.hubclient import HubClient
from tests.support.jobs import squeue
from tests.support.measure import job_info_rpcs
from tests.support.testhub import JOB_NAME, deploy

SESSIONS = 20
# seconds per measurement: ten of the test hub's polls (POLL_INTERVAL 2 s), so
# a poll per session would show as 200 RPCs against 10
WINDOW = 20


def rpcs_over(seconds):
    before = job_info_rpcs()
    time.sleep(seconds)
    return job_info_rpcs() - before


@pytest.fixture
def big_node(tmp_path):
    config = tmp_path / "cluster.toml"
    config.write_text(
        f"[cluster]\nnode_gpus = {SESSIONS}\nnode_cpus = {8 * SESSIONS}\n"
        f"node_mem_mb = {48 * 1024 * SESSIONS}\n"
    )
    result = deploy(
        "slurm.sh", "start", env={**os.environ, "PORTAL_CONFIG": str(config)}, check=False
    )
    assert result.returncode == 0, result.stderr
    yield
    subprocess.run(["scancel", "-n", JOB_NAME], check=False)
    deadline = time.monotonic() + 30
    while squeue("-n", JOB_NAME) and time.monotonic() < deadline:
        time.sleep(0.5)
    result = deploy("slurm.sh", "start", check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_job_info_rpcs_do_not_grow_with_sessions(hub, load_users, big_node, capsys):
    accounts = load_users(SESSIONS)  # removed after big_node's scancel (fixture order)
    clients = {}

    def start(name):
        client = HubClient(hub)
        assert client.login(name, accounts[name]).status_code == 302
        r = client.api("POST", f"/users/{name}/server", json={"profile": "pytorch", "gpus": 1})
        assert r.status_code in (201, 202), r.text
        clients[name] = client
        return client

    names = sorted(accounts)
    try:
        start(names[0]).wait_ready(names[0])
        time.sleep(3)
        one = rpcs_over(WINDOW)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(start, names[1:]))
        for name in names:
            clients[name].wait_ready(name, timeout=300)
        assert len(squeue("-n", JOB_NAME, "-t", "RUNNING")) == SESSIONS
        time.sleep(3)
        many = rpcs_over(WINDOW)
    finally:
        for name, client in clients.items():
            client.api("DELETE", f"/users/{name}/server")
        for name, client in clients.items():
            client.wait_stopped(name, timeout=120)

    with capsys.disabled():
        print(
            f"\nsdiag job-info RPCs per {WINDOW} s: 1 session: {one}, {SESSIONS} sessions: {many}"
        )
    # one shared poll: the same rate, not 20 times it (a little slack for the
    # other hub's poll, if one runs, and for the interval's edges)
    assert many <= one * 1.5 + 3, (one, many)
