"""The portal's APIs against their OpenAPI descriptions (docs/api, issue 40),
on the test hub, its admin service and the real Slurm:

- a call without a login or token, to every described operation, is
  refused with 401 or 403 and a JSON body: never the login page;
- every cross-user call is refused, together: for every described operation
  whose path names a user, session, job, preset, profile or image, bob (his
  login cookie, and his token) on alice's ids gets 403 or 404, none of her
  data, and changes nothing of hers; every list bob may read holds none of
  her data. The cases come from the descriptions: a route described later
  is covered without a change here.

The responses of these calls, as of every ``HubClient`` call of the
integration suite, are checked against the descriptions
(``tests.support.openapi.check_response``)."""

import json
import re
import secrets
import time
import uuid

import pytest
import requests

from tests.integration.test_notebook_jobs import as_user, home, sleeper
from tests.support import openapi
from tests.support.hubclient import Portal
from tests.support.hubsettings import CA_CERT
from tests.support.jobs import cancel_jobs_of

FOLDER = "api-contract"
IMAGE = "pytorch"  # a site image of the test hub's (hubsettings.IMAGE_PROFILES)
PROFILE = "vision"  # offered to the group vision: alice's, not bob's


def filled(path, ids):
    """The path template with every parameter given its id in ``ids``."""
    return re.sub(r"\{([^}]+)\}", lambda m: ids[m.group(1)], path)


def body_for(operation):
    """``requests`` keyword arguments for a body the operation takes: its
    described example, else an empty object (form: one hour more)."""
    content = operation.get("requestBody", {}).get("content", {})
    if "application/json" in content:
        media = content["application/json"]
        return {"data": json.dumps(media.get("example", {}))}
    if "application/x-www-form-urlencoded" in content:
        return {"data": content["application/x-www-form-urlencoded"].get("example", {"hours": 1})}
    return {}


def token_session(token=None):
    http = requests.Session()
    http.verify = CA_CERT
    http.headers["Accept"] = "application/json"
    if token:
        http.headers["Authorization"] = f"token {token}"
    http.hooks["response"].append(openapi.check_response)
    return http


def xsrf_header(client, path):
    cookie_path = "/services/portal/" if path.startswith("/services/") else "/hub/"
    xsrf = client.session.cookies.get("_xsrf", path=cookie_path)
    return {"X-XSRFToken": xsrf} if xsrf else {}


def new_token(client, name):
    r = client.api("POST", f"/users/{name}/tokens", json={"note": "api contract",
                                                          "expires_in": 3600})  # fmt: skip
    assert r.status_code == 201, r.text
    return r.json()["token"]


def test_every_described_call_without_a_login_is_refused_with_json(hub):
    anonymous = token_session()
    forged = token_session(secrets.token_hex(16))  # a token the hub never gave
    ids = {"job_id": "1", "preset_id": "1", "name": PROFILE, "profile_name": PROFILE,
           "image": IMAGE, "user_name": "alice", "server_name": "x"}  # fmt: skip
    refused = 0
    for _, path, method, operation in openapi.operations():
        params = {p["name"]: ids.get(p["name"], "alice") for p in operation["parameters"]}
        url = hub + filled(path, params)
        for http in (anonymous, forged):
            r = http.request(method, url, allow_redirects=False, timeout=30, **body_for(operation))
            if {} in operation.get("security", []):  # anyone's: /health
                assert r.status_code in (200, 503), (path, r.status_code)
                assert set(r.json()) == {"ok", "checked_at"}, r.text  # up or down, no more
                continue
            where = f"{method.upper()} {path}"
            assert r.status_code in (401, 403), f"{where}: {r.status_code} {r.text[:200]}"
            assert r.headers["Content-Type"].startswith("application/json"), where
            message = r.json().get("error") or r.json().get("message")
            assert isinstance(message, str) and message, f"{where}: {r.text[:200]}"
            refused += 1
    print(f"{refused} calls without a login refused with JSON")
    assert refused >= 2 * 30


@pytest.fixture
def alices(login, accounts, session):
    """alice's things, each with a marker of hers that no answer to bob may
    hold: her running session, a notebook job, a preset; the profile only
    her group is offered."""
    marker = f"matrix-{uuid.uuid4().hex[:10]}"
    folder = home("alice") / FOLDER
    as_user("alice", "mkdir", "-p", str(folder))
    as_user("alice", "tee", str(folder / f"{marker}.ipynb"), stdin=sleeper(600))
    alice = session("alice")
    r = alice.api("POST", "/portal/jobs", json={
        "notebook": f"{FOLDER}/{marker}.ipynb", "profile": "pytorch", "gpus": 1, "hours": 1,
    })  # fmt: skip
    assert r.status_code == 201, r.text
    job = r.json()
    r = alice.api("POST", "/portal/presets", json={
        "name": marker, "options": {"profile": "pytorch", "gpus": "1", "hours": "1"},
    })  # fmt: skip
    assert r.status_code == 201, r.text
    preset = r.json()
    carol = Portal(login("carol"))
    profile = carol.get(f"api/profiles/{PROFILE}").json()
    extensions = carol.get("api/sessions/extensions", params={"user": "alice"}).json()
    yield {
        "client": alice,
        "marker": marker,
        "ids": {
            "user": "alice",
            "session": "",
            "job": job["id"],
            "preset": str(preset["id"]),
            "profile": PROFILE,
            "image": IMAGE,
        },  # fmt: skip
        "job": job,
        "preset": preset,
        "profile": profile,
        "extensions": extensions,
    }
    alice.api("DELETE", f"/portal/presets/{preset['id']}")
    cancel_jobs_of(["alice"], timeout=30)
    as_user("alice", "rm", "-rf", str(folder))


def owned_ids(operation, ids):
    """The path's parameters filled with alice's ids (by x-portal-id); None
    when the path names nothing of anyone's."""
    params = [p for p in operation["parameters"] if p["in"] == "path"]
    if not any(p.get("x-portal-id") for p in params):
        return None
    values = {}
    for p in params:
        kind = p["x-portal-id"]
        value = ids[kind]
        if kind == "session" and not value:
            value = "matrix"  # a named session of alice's route: she has none by that name
        values[p["name"]] = value
    return values


def test_every_cross_user_call_is_refused_and_changes_nothing(hub, login, portal, alices):
    bob = login("bob")
    Portal(bob)  # the service's login cookie and _xsrf
    by_token = token_session(new_token(bob, "bob"))
    alice = alices["client"]
    marker, ids = alices["marker"], alices["ids"]
    before = alice.user_model("alice")["servers"][""]

    cells, lists = [], 0
    for _, path, method, operation in openapi.operations():
        values = owned_ids(operation, ids)
        kwargs = body_for(operation)
        if values is None:
            if method != "get":
                continue
            values = {}
            lists += 1  # a read without ids: whatever bob sees holds nothing of hers
        url = hub + filled(path, values)
        # the ways in it takes: the login cookie, a token (the pages' routes: the cookie)
        ways = [h for h in ("cookie", "token") if any(h in s for s in operation["security"])]
        for how in ways:
            if how == "cookie":
                headers = xsrf_header(bob, path)
                r = bob.session.request(method, url, headers=headers, allow_redirects=False,
                                        timeout=60, **kwargs)  # fmt: skip
            else:
                r = by_token.request(method, url, allow_redirects=False, timeout=60, **kwargs)
            where = f"bob ({how}) {method.upper()} {filled(path, values)}"
            assert marker not in r.text and "Vision team" not in r.text, f"{where}: {r.text}"
            if path.endswith("/health"):
                continue
            if not owned_ids(operation, ids):
                assert r.status_code < 500, f"{where}: {r.status_code}"
                continue
            assert r.status_code in (403, 404), f"{where}: {r.status_code} {r.text[:300]}"
            cells.append((path, method, how))

    # nothing of hers changed: her session runs, as long as it did; her job
    # runs; her preset is as she saved it; her group's profile is as it was
    time.sleep(1)
    after = alice.user_model("alice")["servers"][""]
    assert after["ready"] and after["started"] == before["started"], after
    r = alice.api("GET", f"/portal/jobs/{ids['job']}")
    assert r.status_code == 200 and r.json()["state"] in ("PENDING", "RUNNING"), r.text
    r = alice.api("GET", f"/portal/presets/{ids['preset']}")
    assert r.status_code == 200 and r.json()["name"] == marker, r.text
    assert r.json()["options"] == alices["preset"]["options"]
    carol = portal("carol")
    assert carol.get(f"api/profiles/{PROFILE}").json() == alices["profile"]
    extensions = carol.get("api/sessions/extensions", params={"user": "alice"}).json()
    assert extensions == alices["extensions"], "bob extended a session of hers"
    operations = {(p, m) for p, m, _ in cells}
    tokens = sum(1 for *_, how in cells if how == "token")
    print(f"cross-user matrix: {len(operations)} operations, {len(cells)} cells (cookie "
          f"{len(cells) - tokens}, token {tokens}), every one refused; "
          f"{lists} lists read clean")  # fmt: skip
    assert len(cells) - tokens == len(operations) >= 20
