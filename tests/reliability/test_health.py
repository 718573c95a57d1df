"""The health check (issue 28) against the real parts of the test hub:
``make health`` (``python -m portal.health``) exits 0 with everything up;
with slurmctld stopped it exits 1 naming slurmctld, and the service's
``/services/portal/health`` answers 503 naming it, as JSON and as a page;
started again, both are up again. A running session whose route the proxy
lost (deleted through the proxy's API) makes both name the proxy's routes
until the route is back. An anonymous visitor of the endpoint learns up or
down alone; the monitoring token and a logged-in user see every part."""

import json
import subprocess
import sys
import time

import requests

from portal import settings as site_settings
from portal.service.health import FRESH_SECONDS
from tests.support import REPO
from tests.support.hubsettings import CA_CERT
from tests.support.internaltls import proxy_api, proxy_call
from tests.support.testhub import ROUTE_CHECK_SECONDS, SETTINGS_FILE, STATE


def make_health(hub_env):
    run = subprocess.run(
        [sys.executable, "-m", "portal.health"], env=hub_env, cwd=REPO, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    return run.returncode, run.stdout + run.stderr


def monitoring():
    """The monitoring token's header (the token the login node's Prometheus holds)."""
    token = site_settings.metrics_token_file(site_settings.load(str(SETTINGS_FILE)))
    return {"Authorization": f"Bearer {token.read_text().strip()}"}


def endpoint(hub, headers=None, **params):
    """The endpoint, as the monitoring token asks it (``headers={}``: anonymously)."""
    return requests.get(
        f"{hub}/services/portal/health", params=params, verify=CA_CERT, timeout=60,
        headers=monitoring() if headers is None else headers,
    )  # fmt: skip


def test_an_anonymous_visitor_learns_up_or_down_alone(hub, hub_env, portal):
    wait_up(hub_env)
    r = endpoint(hub, headers={}, format="json")
    assert r.status_code == 200 and set(r.json()) == {"ok", "checked_at"}, r.text
    assert r.json()["ok"] is True
    for headers in ({}, {"Authorization": "Bearer " + "0" * 64}, {"Authorization": "Basic x"}):
        page = endpoint(hub, headers=headers)
        assert page.status_code == 200 and "The portal is up" in page.text
        assert 'data-part="' not in page.text and "slurmctld" not in page.text
        assert "127.0.0.1" not in page.text and "gpu" not in page.text.lower(), page.text
        assert "parts" not in endpoint(hub, headers=headers, format="json").json()
    # "Log in" leads through the hub's login back to the page, with its parts
    r = requests.get(f"{hub}/services/portal/health", params={"detail": "1"}, verify=CA_CERT,
                     allow_redirects=False, timeout=60)  # fmt: skip
    assert r.status_code == 302 and "/hub/api/oauth2/authorize" in r.headers["Location"]
    page = portal("alice").get("health")
    assert page.status_code == 200 and 'data-part="slurmctld"' in page.text, page.text
    r = portal("alice").get("health", params={"format": "json"})
    assert {p["name"] for p in r.json()["parts"]} >= {"ldap", "slurmctld", "nodes"}, r.text
    r = endpoint(hub, format="json")  # the monitoring token
    assert r.status_code == 200 and "slurmctld" in {p["name"] for p in r.json()["parts"]}


def wait_up(hub_env, timeout=90):
    deadline = time.monotonic() + timeout
    while (result := make_health(hub_env))[0] != 0:
        assert time.monotonic() < deadline, result[1]
        time.sleep(2)
    return result


def test_health_names_slurmctld_while_it_is_down(hub, hub_env, slurmctld_down):
    status, said = wait_up(hub_env)
    for part in ("login page", "ldap", "slurmctld", "slurmdbd", "shared poll", "nodes",
                 "proxy routes", "disk"):  # fmt: skip
        assert f"ok   {part}: " in said, said
    free = next(line for line in said.splitlines() if "free GPUs: " in line)
    assert " gpu " in f" {free.split(': ', 1)[1]}", said  # each partition's, gpu among them
    assert said.rstrip().splitlines()[-1].startswith("portal: up")
    r = endpoint(hub, format="json")
    assert r.status_code == 200 and r.json()["ok"] and r.json()["down"] == [], r.text

    with slurmctld_down():
        status, said = make_health(hub_env)
        assert status == 1 and "FAIL slurmctld: " in said, said
        assert "portal: down: " in said and "slurmctld" in said.splitlines()[-1], said
        time.sleep(FRESH_SECONDS + 1)  # the service's last answer is no longer fresh
        r = endpoint(hub, format="json")
        assert r.status_code == 503 and "slurmctld" in r.json()["down"], r.text
        r = endpoint(hub, headers={}, format="json")
        assert r.status_code == 503 and r.json()["ok"] is False and "down" not in r.json()
        page = endpoint(hub)
        assert page.status_code == 503 and "The portal is down: " in page.text
        assert 'data-part="slurmctld"' in page.text

    status, said = wait_up(hub_env)
    time.sleep(FRESH_SECONDS + 1)
    assert endpoint(hub, format="json").status_code == 200


def test_health_names_the_proxy_routes_while_a_running_session_has_none(hub, hub_env, session):
    session("alice", profile="pytorch", gpus=1)
    deadline = time.monotonic() + 10 * ROUTE_CHECK_SECONDS + 30
    while json.loads((STATE / "proxy-routes.json").read_text())["sessions"] != 1:
        assert time.monotonic() < deadline, "the hub's check never saw alice's session"
        time.sleep(1)  # the hub's next check has it
    status, said = wait_up(hub_env)
    assert "ok   proxy routes: 0 running session(s) without a route" in said, said
    [(spec, route)] = [(s, r) for s, r in proxy_api().json().items() if r.get("user") == "alice"]

    def lost():
        """The proxy loses alice's route (a restart without its routes, say),
        again whenever JupyterHub's own periodic check has put it back."""
        if spec in proxy_api().json():
            proxy_call("DELETE", spec)

    try:
        deadline = time.monotonic() + 10 * ROUTE_CHECK_SECONDS + 30
        while True:
            lost()
            status, said = make_health(hub_env)
            if status == 1 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert "FAIL proxy routes: 1 running session(s) without a route" in said, said
        assert "alice" not in said  # served without a login: counts only
        deadline = time.monotonic() + 10 * ROUTE_CHECK_SECONDS + FRESH_SECONDS + 30
        while True:  # once the service's last answer is no longer fresh
            lost()
            r = endpoint(hub, format="json")
            if r.status_code == 503 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert r.status_code == 503 and r.json()["down"] == ["proxy routes"], r.text
    finally:
        if spec not in proxy_api().json():
            proxy_call("POST", spec, json=route)
    wait_up(hub_env)
