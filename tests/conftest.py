"""Fixtures of the tests against the real services (integration, reliability
and browser); the plain helpers they use are in tests/support.

The real services: the one-machine cluster (slapd, nslcd, munge,
slurmctld, slurmd), started or reused by `make test`, and a test hub with its
own proxy, ports, database and Slurm job name (tests/support/testhub.py), so a
demo started by `make up` is left alone."""

import json
import os

import pytest

from tests.support.hubclient import HubClient, Portal
from tests.support.hubsettings import CA_CERT, fresh_state, public_url, write_settings
from tests.support.jobs import (
    cancel_jobs_of,
    cancel_test_jobs,
    occupy_all_nodes_but_one,
    release_nodes,
)
from tests.support.loadusers import ensure_users, remove_users
from tests.support.testhub import PORT, SETTINGS_FILE, STATE, TEST_SETTINGS, deploy

# Every requests call checks the portal's certificate against its CA.
os.environ["REQUESTS_CA_BUNDLE"] = CA_CERT


@pytest.fixture(scope="session")
def cluster():
    """slapd and Slurm up (idempotent: reused when already running)."""
    deploy("ldap.sh", "start")
    deploy("slurm.sh", "start")
    return True


@pytest.fixture(scope="session")
def mail_server(cluster):
    """exim4 up on the login node (idempotent), after slapd and nslcd."""
    result = deploy("mail.sh", "start", check=False)
    assert result.returncode == 0, result.stderr
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
    """A fresh test hub and proxy on PORT; stopped, and its jobs cancelled, at the end."""
    deploy("hub.sh", "stop", env=hub_env)
    cancel_test_jobs()
    fresh_state(STATE)  # a fresh database and profile store; the logs are kept
    result = deploy("hub.sh", "start", env=hub_env, check=False)
    assert result.returncode == 0, result.stderr
    yield public_url(PORT)
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


@pytest.fixture
def load_users():
    """load_users(count) -> ``{name: password}`` of that many load-test LDAP
    accounts (tests/support/loadusers.py), removed at the end of the test."""
    made = set()

    def _make(count):
        accounts = ensure_users(count)
        made.update(accounts)
        return accounts

    yield _make
    if made:
        remove_users(sorted(made))


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
            cancel_jobs_of([name], timeout=30)


@pytest.fixture
def one_free_node(cluster):
    """Every compute node but one is full (root's jobs hold their GPUs):
    ``(node, total_gpus)``, for tests of what a full cluster shows."""
    yield occupy_all_nodes_but_one()
    release_nodes()


def pytest_terminal_summary(terminalreporter):
    """How many real answers were checked against docs/api (HubClient's calls)."""
    from tests.support.openapi import CHECKED

    if CHECKED:
        operations = {operation for operation, _ in CHECKED}
        terminalreporter.write_line(
            f"docs/api: {sum(CHECKED.values())} answers of {len(operations)} described "
            f"operations kept to their description"
        )
