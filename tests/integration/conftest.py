"""The real services: the one-machine cluster (slapd, nslcd, munge,
slurmctld, slurmd), started or reused by `make test`, and a test hub with its
own proxy, ports, database and Slurm job name, so a demo started by `make up`
is left alone."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.hubclient import HubClient

REPO = Path(__file__).resolve().parents[2]
STATE = Path("/var/lib/portal/test-hub")
PORT = 18000
JOB_NAME = "portal-test"

TEST_SETTINGS = f"""
[hub]
bind_url = "http://127.0.0.1:{PORT}"
api_port = 18081
proxy_api_port = 18001
db_url = "sqlite:///{STATE}/jupyterhub.sqlite"
state_dir = "{STATE}"

[slurm]
job_name = "{JOB_NAME}"
"""


def deploy(*args, env=None, check=True):
    return subprocess.run(
        ["bash", str(REPO / "deploy" / args[0]), *args[1:]],
        env=env, check=check, capture_output=True, text=True,
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
def hub_env(tmp_path_factory):
    settings = tmp_path_factory.mktemp("settings") / "portal.toml"
    settings.write_text(TEST_SETTINGS)
    return {**os.environ, "PORTAL_CONFIG": str(settings)}


@pytest.fixture(scope="session")
def hub(cluster, hub_env):
    """A fresh test hub and proxy on :18000; stopped, and its jobs cancelled, at the end."""
    deploy("hub.sh", "stop", env=hub_env)
    cancel_test_jobs()
    subprocess.run(["rm", "-rf", str(STATE)], check=True)
    result = deploy("hub.sh", "start", env=hub_env, check=False)
    assert result.returncode == 0, result.stderr
    yield f"http://127.0.0.1:{PORT}"
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


def squeue(*args):
    out = subprocess.run(
        ["squeue", "-h", *args], check=True, capture_output=True, text=True
    ).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


def scontrol_job(job_id):
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True
    ).stdout
    return dict(
        field.split("=", 1) for field in out.split() if "=" in field
    )
