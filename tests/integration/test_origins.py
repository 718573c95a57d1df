"""Per-user origins, held where an attacker's review found them open: the
hub serves its pages on its own host only (never on a session's host, where
a victim's login would leave the hub's cookie on the attacker's origin); the
admin service's login cookie is a __Host- cookie like the hub's; and a
session that ends by itself leaves no API token of its server behind."""

import subprocess
import time
from urllib.parse import urlparse

import requests

from tests.support.hubsettings import CA_CERT
from tests.support.jobs import user_jobs


def host_of(hub, name):
    parsed = urlparse(hub)
    return f"{parsed.scheme}://{name}.{parsed.hostname}:{parsed.port}"


def test_the_hub_answers_on_its_own_host_only(hub):
    bobs = host_of(hub, "bob")
    # (the hub's static files, the same for everyone, still answer there: on
    # bob's origin, which is his anyway, they reach nothing of anyone's)
    for path in ("/hub/login?next=%2Fuser%2Fbob%2Fx", "/hub/api/user", "/hub/home"):
        r = requests.get(bobs + path, verify=CA_CERT, allow_redirects=False, timeout=30)
        assert r.status_code == 302, (path, r.status_code, r.text[:200])
        assert r.headers["Location"] == hub + path, (path, r.headers["Location"])
        assert 'name="password"' not in r.text
    r = requests.post(bobs + "/hub/login", data={"username": "bob", "password": "x"},
                      verify=CA_CERT, allow_redirects=False, timeout=30)  # fmt: skip
    assert r.status_code == 302 and r.headers["Location"].startswith(hub + "/hub/login")
    # on its own host, the hub is as before
    r = requests.get(hub + "/hub/login", verify=CA_CERT, timeout=30)
    assert r.status_code == 200 and 'name="password"' in r.text


def test_the_admin_services_cookie_is_a_host_cookie(portal):
    carol = portal("carol")
    names = {cookie.name: cookie for cookie in carol.client.session.cookies}
    service = [name for name in names if "service-portal" in name]
    assert service == ["__Host-service-portal"], sorted(names)
    assert names["__Host-service-portal"].path == "/"


def test_a_session_that_ends_by_itself_leaves_no_server_token(session):
    alice = session("alice", profile="pytorch", gpus=1)

    def server_tokens():
        r = alice.api("GET", "/users/alice/tokens")
        assert r.status_code == 200, r.text
        return [t for t in r.json()["api_tokens"] if "Server at" in (t.get("note") or "")]

    assert len(server_tokens()) == 1
    [(job_id, _)] = user_jobs("alice")
    subprocess.run(["scancel", job_id], check=True)  # a time limit, a node failure, OOM
    deadline = time.monotonic() + 60
    while alice.user_model("alice").get("servers"):
        assert time.monotonic() < deadline, "the hub did not see the job end"
        time.sleep(0.5)
    assert server_tokens() == []
