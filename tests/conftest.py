"""Fixtures of the tests against the real services (integration and browser).

The real services: the one-machine cluster (slapd, nslcd, munge,
slurmctld, slurmd), started or reused by `make test`, and a test hub with its
own proxy, ports, database and Slurm job name, so a demo started by `make up`
is left alone.

$PORTAL_TEST_PORT (default 18000) moves the test hub to other ports (PORT,
PORT+81 for its API, PORT+1 for the proxy's, PORT+2 for the
portal service), its own state folder and Slurm
job name, so that two runs of the tests can share the cluster."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.hubclient import HubClient, Portal
from tests.hubsettings import CA_CERT, fresh_state, hub_settings, write_settings

REPO = Path(__file__).resolve().parents[1]
PORT = int(os.environ.get("PORTAL_TEST_PORT", "18000"))
_SUFFIX = "" if PORT == 18000 else f"-{PORT}"
STATE = Path(f"/var/lib/portal/test-hub{_SUFFIX}")
JOB_NAME = f"portal-test{_SUFFIX}"
# The test hub's settings: where its account (not root only) can read them.
SETTINGS_FILE = Path(f"/var/lib/portal/test-settings{_SUFFIX}.toml")
# Every requests call checks the portal's certificate against its CA.
os.environ["REQUESTS_CA_BUNDLE"] = CA_CERT

TEST_SETTINGS = (
    hub_settings(PORT, STATE, JOB_NAME)
    + """poll_interval = 2.0
cluster_interval = 2.0

[[profiles]]
name = "pytorch"
display_name = "PyTorch"
environment = "pytorch"
max_gpus = 4

[[profiles]]
name = "tensorflow"
display_name = "TensorFlow"
environment = "tensorflow"
max_gpus = 2

[[profiles]]
name = "vision"
display_name = "Vision team"
environment = "pytorch"
max_gpus = 2
default_hours = 2
max_hours = 4
groups = ["vision"]
"""
)


def deploy(*args, env=None, check=True):
    return subprocess.run(
        ["bash", str(REPO / "deploy" / args[0]), *args[1:]],
        env=env,
        check=check,
        capture_output=True,
        text=True,
    )


def cancel_test_jobs():
    subprocess.run(["scancel", "--name", JOB_NAME], check=False)


@pytest.fixture(scope="session")
def cluster():
    """slapd and Slurm up (idempotent: reused when already running)."""
    deploy("ldap.sh", "start")
    deploy("slurm.sh", "start")
    return True


@pytest.fixture(scope="session")
def accounts(cluster):
    users = json.loads(deploy("ldap.sh", "accounts").stdout)
    return {a["username"]: a for a in users}


@pytest.fixture(scope="session")
def hub_env():
    settings = write_settings(SETTINGS_FILE, TEST_SETTINGS)
    return {**os.environ, "PORTAL_CONFIG": str(settings)}


@pytest.fixture(scope="session")
def hub(cluster, hub_env):
    """A fresh test hub and proxy on :18000; stopped, and its jobs cancelled, at the end."""
    deploy("hub.sh", "stop", env=hub_env)
    cancel_test_jobs()
    fresh_state(STATE)  # a fresh database and profile store; the logs are kept
    result = deploy("hub.sh", "start", env=hub_env, check=False)
    assert result.returncode == 0, result.stderr
    yield f"https://127.0.0.1:{PORT}"
    deploy("hub.sh", "stop", env=hub_env)
    cancel_test_jobs()


@pytest.fixture
def login(hub, accounts):
    """login(name) -> a HubClient logged in as that demo user."""

    def _login(name):
        client = HubClient(hub)
        r = client.login(name, accounts[name]["password"])
        assert r.status_code == 302, f"login of {name} answered {r.status_code}"
        return client

    return _login


@pytest.fixture
def portal(login):
    """portal(name) -> a Portal client of the admin service, logged in as that user."""
    return lambda name: Portal(login(name))


@pytest.fixture
def restore_profiles(portal):
    """Put every profile back as it was before the test (as carol): the changed
    ones restored, the deleted ones created again, the new ones deleted."""
    carol = portal("carol")
    before = {p["name"]: p for p in carol.get("api/profiles").json()}
    yield
    now = {p["name"]: p for p in carol.get("api/profiles").json()}
    for name, old in before.items():
        if name not in now:
            r = carol.send(
                "POST", "api/profiles", json={k: v for k, v in old.items() if k != "revision"}
            )
            assert r.status_code == 201, r.text
            continue
        fields = {k: old[k] for k in old if k not in ("name", "revision")}
        if {k: now[name][k] for k in fields} != fields:
            r = carol.put(name, **fields, revision=now[name]["revision"])
            assert r.status_code == 200, r.text
    for name in set(now) - set(before):
        r = carol.send("DELETE", f"api/profiles/{name}?revision={now[name]['revision']}")
        assert r.status_code == 204, r.text


def user_jobs(user):
    return squeue("-n", JOB_NAME, "-u", user, "-o", "%i %T")


def wait_no_jobs(user, timeout=30):
    deadline = time.monotonic() + timeout
    while user_jobs(user) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not user_jobs(user), f"jobs of {user} outlived Stop: {user_jobs(user)}"


@pytest.fixture
def session(login):
    """session(name, **options) -> a logged-in client whose server is ready;
    every session started this way is stopped at the end of the test."""
    started = []

    def _start(name, wait=True, **options):
        client = login(name)
        r = client.api("POST", f"/users/{name}/server", json=options or None)
        assert r.status_code in (201, 202), r.text
        started.append((client, name))
        if wait:
            client.wait_ready(name)
        return client

    yield _start
    for client, name in started:
        client.api("DELETE", f"/users/{name}/server")
    for client, name in started:
        try:
            client.wait_stopped(name)
        finally:
            subprocess.run(["scancel", "-n", JOB_NAME, "-u", name], check=False)
            wait_no_jobs(name)


def squeue(*args):
    out = subprocess.run(["squeue", "-h", *args], check=True, capture_output=True, text=True).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


def scontrol_job(job_id):
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True
    ).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)
