"""Idle culling with the real culler, hub, Slurm and sessions.

A hub of its own (beside the test hub, whose sessions must not be culled)
with a 30 s idle timeout: jupyterhub-idle-culler runs as its service
``idle-culler``. alice's session stays idle and is stopped: the hub lists no
server, her Slurm job is gone (its GPUs free) and her home page says
"stopped after 30 s idle" with the relaunch button. bob's kernel runs a
silent ``time.sleep`` loop, which sends nothing: his server's own view
(what JupyterHub's singleuser reports) is as old as its start, yet the
session's activity rule reports it active and the culler keeps it. carol's
profile allows 1 min idle: the culler's arbiter (``portal.core.idle``) holds
her session to that, not to the site's 30 s.
"""

import asyncio
import os
import re
import subprocess
import time
from datetime import UTC, datetime

import pytest
import requests

from tests.support.hubclient import HubClient
from tests.support.hubsettings import (
    CA_CERT,
    PYTORCH_PROFILE,
    fresh_state,
    hub_settings,
    public_url,
    write_settings,
)
from tests.support.kernelcells import start_in_session
from tests.support.testhub import PORT as TEST_PORT
from tests.support.testhub import deploy

PORT = TEST_PORT + 30  # PORT+1, +2, +81: its proxy's API, its service, its API
STATE = f"/var/lib/portal/test-culling-hub-{PORT}"
SETTINGS_FILE = f"/var/lib/portal/test-culling-settings-{PORT}.toml"
JOB_NAME = f"portal-test-culling-{PORT}"
IDLE_SECONDS = 30
EVERY = 5  # the culler's period and the sessions' reports
SETTINGS = (
    hub_settings(PORT, STATE, JOB_NAME)
    + f"""poll_interval = 2.0
cluster_interval = 2.0

[culling]
idle_minutes = {IDLE_SECONDS / 60}
every_seconds = {EVERY}
activity_seconds = {EVERY}
"""
    + PYTORCH_PROFILE
    + """
[[profiles]]
name = "longidle"
display_name = "Long idle"
environment = "pytorch"
max_gpus = 4
idle_minutes = 1
"""
)
LONG_IDLE_SECONDS = 60
SLEEP_LOOP = "import time\nwhile True:\n    time.sleep(1)"


def jobs(user):
    out = subprocess.run(
        ["squeue", "-h", "-n", JOB_NAME, "-u", user, "-o", "%i %T"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


def cancel_jobs():
    subprocess.run(["scancel", "--name", JOB_NAME], check=False)


@pytest.fixture(scope="module")
def culling_hub(cluster):
    env = {**os.environ, "PORTAL_CONFIG": str(write_settings(SETTINGS_FILE, SETTINGS))}
    deploy("hub.sh", "stop", env=env)
    cancel_jobs()
    if os.path.isdir(STATE):
        fresh_state(STATE)
    result = deploy("hub.sh", "start", env=env, check=False)
    assert result.returncode == 0, result.stderr
    yield public_url(PORT)
    deploy("hub.sh", "stop", env=env)
    cancel_jobs()


def since(stamp):
    """Seconds since the hub's ISO time stamp ``stamp``."""
    when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (datetime.now(UTC) - when).total_seconds()


def test_an_idle_session_is_culled_and_a_silently_busy_kernel_keeps_one(culling_hub, accounts):
    clients = {}
    profiles = {"alice": "pytorch", "bob": "pytorch", "carol": "longidle"}
    for name, profile in profiles.items():
        clients[name] = client = HubClient(culling_hub)
        assert client.login(name, accounts[name]["password"]).status_code == 302
        r = client.api("POST", f"/users/{name}/server", json={"profile": profile, "gpus": 1})
        assert r.status_code in (201, 202), r.text
    alice, bob, carol = clients["alice"], clients["bob"], clients["carol"]
    try:
        alice.wait_ready("alice")
        bob.wait_ready("bob")
        carol.wait_ready("carol")
        [(alice_job, _)] = jobs("alice")

        # bob's kernel: a silent loop, started as the browser does, its tab then closed
        r = bob.api(
            "POST",
            "/users/bob/tokens",
            json={"scopes": ["access:servers!user=bob"], "note": "culling test", "expires_in": 600},
        )
        assert r.status_code == 201, r.text
        token = r.json()["token"]
        server_url = bob.url("/user/bob/")
        asyncio.run(start_in_session(server_url, token, SLEEP_LOOP))
        bob_busy_since = time.monotonic()

        # alice, idle, is culled: no server, no job, and her home page says why
        deadline = time.monotonic() + IDLE_SECONDS + 4 * EVERY + 30
        while alice.user_model("alice")["servers"] and time.monotonic() < deadline:
            time.sleep(1)
        assert not alice.user_model("alice")["servers"], "alice's idle session was not culled"
        deadline = time.monotonic() + 30
        while jobs("alice") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert jobs("alice") == [], f"alice's job {alice_job} is still in the queue"
        state = subprocess.run(
            ["sacct", "-n", "-X", "-j", alice_job, "-o", "State"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert state.startswith("CANCELLED"), state  # cancelled: its GPUs are free
        home = alice.session.get(alice.url("/hub/home"), timeout=30).text
        ended = re.search(r'id="session-ended">(.*?)</p>', home, re.S)
        assert ended, home[-3000:]
        assert f"Slurm job {alice_job}" in ended.group(1)
        assert f"stopped after {IDLE_SECONDS} s idle" in ended.group(1)
        assert 'id="relaunch"' in home

        # carol, idle too, is held to her profile's minute, not the site's 30 s
        deadline = time.monotonic() + LONG_IDLE_SECONDS + 4 * EVERY + 30
        last = None
        while (servers := carol.user_model("carol")["servers"]) and time.monotonic() < deadline:
            last = servers[""]["last_activity"] or last
            time.sleep(1)
        assert not carol.user_model("carol")["servers"], "carol's idle session was not culled"
        assert last and since(last) >= LONG_IDLE_SECONDS, last  # not at the site's 30 s
        home = carol.session.get(carol.url("/hub/home"), timeout=30).text
        assert "stopped after 1 min idle" in home, home[-3000:]

        # bob, whose kernel computes silently, is kept past the timeout
        wait = IDLE_SECONDS + 2 * EVERY + 5 - (time.monotonic() - bob_busy_since)
        if wait > 0:
            time.sleep(wait)
        server = bob.user_model("bob")["servers"][""]
        assert server["ready"], server
        assert since(server["last_activity"]) < 3 * EVERY, server["last_activity"]
        assert [state for _, state in jobs("bob")] == ["RUNNING"]
        # the server's own view, which is all the hub's singleuser reports, is idle
        status = requests.get(
            server_url + "api/status",
            headers={"Authorization": f"token {token}"},
            timeout=30,
            verify=CA_CERT,
        ).json()
        assert since(status["last_activity"]) > IDLE_SECONDS, status
        assert status["kernels"] == 1
    finally:
        for name, client in clients.items():
            client.api("DELETE", f"/users/{name}/server")
        cancel_jobs()


def cullers():
    """The pids of this hub's idle cullers (by its internal certificates' folder)."""
    out = subprocess.run(["pgrep", "-f", f"jupyterhub_idle_culler.*{STATE}/"],
                         capture_output=True, text=True).stdout  # fmt: skip
    return out.split()


def test_the_culler_ends_with_the_hub(culling_hub):
    """JupyterHub stops its services with SIGINT, which the culler took as one
    failed callback: every hub stopped left its culler running."""
    assert len(cullers()) == 1
    env = {**os.environ, "PORTAL_CONFIG": str(SETTINGS_FILE)}
    deploy("hub.sh", "stop", env=env)
    deadline = time.monotonic() + 10
    while cullers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cullers() == []
