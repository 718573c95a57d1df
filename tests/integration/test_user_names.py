"""Login names as a site's directory has them, through the real slapd, nslcd,
hub, proxy and Slurm: a name with a dot logs in, runs a session as its own
Unix account, and the session is served on the user's own host
(``portal.core.usernames.user_host``); a name with upper case keeps it.

The accounts are made in the test directory as the load tests' are
(tests/support/loadusers.py) and removed at the end."""

import subprocess
from urllib.parse import urlparse

import pytest
import requests

from portal.core.usernames import user_host
from tests.support.hubclient import HubClient
from tests.support.hubsettings import CA_CERT, DOMAIN
from tests.support.jobs import cancel_jobs_of
from tests.support.loadusers import ensure_users, remove_users
from tests.support.testhub import JOB_NAME, PORT


@pytest.fixture(scope="module")
def named(cluster):
    """``{name: password}`` of j.doe001 and J.Roe001, removed at the end."""
    accounts = {**ensure_users(1, prefix="j.doe"), **ensure_users(1, prefix="J.Roe")}
    yield accounts
    remove_users(sorted(accounts))


def logged_in(hub, name, password):
    client = HubClient(hub)
    r = client.login(name, password)
    assert r.status_code == 302, f"login of {name}: {r.status_code} {r.text[:300]}"
    return client


def test_a_name_with_a_dot_runs_its_session_as_itself_on_its_own_host(hub, named):
    name = "j.doe001"
    client = logged_in(hub, name, named[name])
    assert client.api("GET", "/user").json()["name"] == name
    r = client.api("POST", f"/users/{name}/server", json={"profile": "pytorch", "gpus": 1})
    assert r.status_code in (201, 202), r.text
    try:
        model = client.wait_ready(name)
        # the session's URL, as the hub gives it, is on the user's own host:
        # a hashed label (a dot is no host name label), never j.doe001.DOMAIN
        url = urlparse(model["servers"][""]["url"])
        assert url.hostname == user_host(name, DOMAIN)
        assert url.hostname.startswith("u-jdoe001--") and url.hostname.endswith("." + DOMAIN)
        assert (url.scheme, url.port, url.path) == ("https", PORT, f"/user/{name}/")
        assert client.lab_answers(name)  # JupyterLab through the proxy, on that host
        # the Slurm job runs as the Unix account j.doe001
        out = subprocess.run(
            ["squeue", "-h", "-n", JOB_NAME, "-u", name, "-o", "%u %T"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert out == [name, "RUNNING"], out
        # the name taken as it is would be two labels, j.doe001.DOMAIN, which
        # the portal's wildcard certificate (*.DOMAIN) does not even cover
        with pytest.raises(requests.exceptions.SSLError, match="not valid for"):
            requests.get(f"https://{name}.{DOMAIN}:{PORT}/user/{name}/lab", verify=CA_CERT,
                         allow_redirects=False, timeout=30)  # fmt: skip
    finally:
        client.api("DELETE", f"/users/{name}/server")
        try:
            client.wait_stopped(name)
        finally:
            cancel_jobs_of([name], timeout=30)


def test_a_name_with_upper_case_keeps_it(hub, named):
    """J.Roe001 is J.Roe001 in the hub, as in NSS and sudo (JupyterHub would
    lower it); the spawn page takes the account as it is. j.roe001 is no
    one's account here (nslcd and the directory's memberUid match case)."""
    name = "J.Roe001"
    client = logged_in(hub, name, named[name])
    assert client.api("GET", "/user").json()["name"] == name
    page = client.session.get(client.url("/hub/spawn"), timeout=30)
    assert page.status_code == 200 and 'name="profile"' in page.text, page.text[:500]
    assert "on this host" not in page.text
    assert HubClient(hub).login(name.lower(), named[name]).status_code == 403
