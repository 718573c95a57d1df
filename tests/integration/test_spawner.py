"""The GPU-slice spawner against the real Slurm and a real hub."""

import glob
import html
import json
import os
import pwd
import re
import subprocess
import time
from pathlib import Path

import pytest
import requests

from tests.support.jobs import scontrol_job, user_jobs


def tres(job_id):
    return dict(item.split("=", 1) for item in scontrol_job(job_id)["TRES"].split(","))


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_gpus_give_the_right_slice(session, gpus):
    session("alice", profile="pytorch", gpus=gpus, hours=3)
    [(job_id, state)] = user_jobs("alice")
    assert state == "RUNNING"
    t = tres(job_id)
    assert (t["gres/gpu"], t["cpu"], t["mem"], t["node"]) == (
        str(gpus),
        str(8 * gpus),
        f"{48 * gpus}G",
        "1",
    )
    assert scontrol_job(job_id)["TimeLimit"] == "03:00:00"


BAD_FORMS = [
    ({"profile": "pytorch", "gpus": "5"}, "between 1 and 4"),
    ({"profile": "pytorch", "gpus": "0"}, "between 1 and 4"),
    ({"profile": "pytorch", "gpus": "-1"}, "whole number"),
    ({"profile": "pytorch", "gpus": "2;id"}, "whole number"),
    ({"profile": "pytorch", "gpus": "$(id)"}, "whole number"),
    ({"profile": "tensorflow", "gpus": "3"}, "between 1 and 2"),
    ({"profile": "pytorch", "gpus": "1", "hours": "25"}, "between 1 and 24"),
    ({"profile": "vision", "gpus": "1"}, "not available to you"),  # bob is not in vision
    ({"profile": "nosuch", "gpus": "1"}, "not available to you"),
]


@pytest.mark.parametrize("form, message", BAD_FORMS)
def test_bad_form_values_rerender_the_form_and_submit_nothing(login, form, message):
    bob = login("bob")
    page = bob.session.get(bob.url("/hub/spawn"), timeout=10)
    assert page.status_code == 200
    action = html.unescape(re.search(r'id="spawn_form"\s+action="([^"]+)"', page.text).group(1))
    r = bob.session.post(bob.url(action), data=form, allow_redirects=False, timeout=30)
    assert message in r.text
    assert 'name="gpus"' in r.text  # the form again, not an error page
    assert not user_jobs("bob")
    assert not bob.user_model("bob")["servers"]


BAD_API_OPTIONS = [
    {"profile": "pytorch", "gpus": 5},
    {"profile": "pytorch", "gpus": "1; id"},
    {"profile": "pytorch", "gpus": 1, "partition": "debug"},
    {"profile": "pytorch", "gpus": 1, "cmd": ["/bin/sh"]},
    {"profile": "vision", "gpus": 1},
    {"profile": "pytorch", "gpus": 1, "hours": 1000},
    {"profile": "pytorch", "gpus": True},
]


@pytest.mark.parametrize("options", BAD_API_OPTIONS)
def test_rest_api_refuses_out_of_profile_options(login, options):
    bob = login("bob")
    r = bob.api("POST", "/users/bob/server", json=options)
    assert r.status_code == 400, r.text
    assert r.json()["message"]
    time.sleep(0.2)
    assert not user_jobs("bob")
    assert not bob.user_model("bob")["servers"]


def test_group_restriction(login, session):
    bob, alice = login("bob"), login("alice")
    assert 'value="vision"' not in bob.session.get(bob.url("/hub/spawn")).text
    assert 'value="vision"' in alice.session.get(alice.url("/hub/spawn")).text
    session("alice", profile="vision", gpus=2, hours=4)
    [(job_id, _)] = user_jobs("alice")
    assert tres(job_id)["gres/gpu"] == "2"


def read_progress(client, name, until, timeout=30):
    """Messages of the spawn-progress event stream until one matches ``until``."""
    messages = []
    url = client.url(f"/hub/api/users/{name}/server/progress")
    xsrf = client.session.cookies.get("_xsrf", path="/hub/")
    with client.session.get(url, stream=True, timeout=timeout, headers={"X-XSRFToken": xsrf}) as r:
        deadline = time.monotonic() + timeout
        for line in r.iter_lines(decode_unicode=True):
            if line and line.startswith("data:"):
                messages.append(json.loads(line[5:])["message"])
                if re.search(until, messages[-1]):
                    return messages
            if time.monotonic() > deadline:
                break
    raise AssertionError(f"no progress message matching {until!r}: {messages}")


def test_requests_beyond_free_gpus_queue_with_reason_and_expected_start(
    session, login, one_free_node
):
    _node, total = one_free_node
    session("carol", profile="pytorch", gpus=4)  # the last node is full
    alice = session("alice", wait=False, profile="pytorch", gpus=1)
    messages = read_progress(alice, "alice", r"queued: Resources; expected start")
    assert any("Submitted Slurm job" in m for m in messages) or "queued" in messages[-1]
    [(_, state)] = user_jobs("alice")
    assert state == "PENDING"
    # alice's home page: the card says queued, when squeue expects it to
    # start and why (issue 39), from the shared poll's snapshot
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        home = alice.session.get(alice.url("/hub/home"), timeout=10).text
        expected = re.search(r'id="session-expected"[^>]*>(.*?)</td>', home, re.S)
        if expected and "not known" not in expected[1]:
            break
        time.sleep(1)
    assert re.search(r'id="session-state"[^>]*>queued<', home), home[:3000]
    assert expected and re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d \(Slurm: Resources\)$",
                                 expected[1].strip()), home[:3000]  # fmt: skip
    # the spawn page of another user says the node is full and when a slot frees
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        page = login("bob").session.get(login("bob").url("/hub/spawn")).text
        if f"0 of {total}" in page and '"expected": {"1":' in page:
            break
        time.sleep(1)
    assert f"0 of {total}" in page
    assert '"expected": {"1":' in page


def test_a_profile_with_its_own_slice_is_shown_its_own_expected_start(
    session, login, portal, restore_profiles, one_free_node
):
    """Expected starts are asked of Slurm per profile slice, with the options
    of the real submission: a 16-cores-per-GPU profile gets its own."""
    r = portal("carol").send(
        "POST",
        "api/profiles",
        json={
            "name": "wide", "display_name": "Wide", "environment": "pytorch",
            "max_gpus": 2, "cores_per_gpu": 16,
        },
    )  # fmt: skip
    assert r.status_code == 201, r.text
    session("carol", profile="pytorch", gpus=4)  # the last node is full
    alice = login("alice")
    deadline = time.monotonic() + 20
    while True:
        page = alice.session.get(alice.url("/hub/spawn"), timeout=30).text
        offered = json.loads(re.search(r'id="portal-profiles">(.*?)</script>', page).group(1))
        wide = next(p for p in offered if p["name"] == "wide")
        if set(wide["expected"]) == {"1", "2"} or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert wide["cores_per_gpu"] == 16
    assert set(wide["expected"]) == {"1", "2"}, wide


def server_token(user):
    """The API token of the user's running single-user server, read from its process."""
    return server_env(user)["JUPYTERHUB_API_TOKEN"]


def server_port(user):
    """The port the user's running server reported, from Jupyter's own line in its job log."""
    (job_id, _), *_ = user_jobs(user)
    log = Path(pwd.getpwnam(user).pw_dir, ".portal", "logs", f"jupyter-{job_id}.log")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(rf"https?://[0-9.]+:(\d+)/user/{user}/", log.read_text(errors="replace"))
        if found:
            return int(found.group(1))
        time.sleep(0.5)
    raise AssertionError(f"no listening address in {log}")


def server_env(user):
    """The environment of the user's running single-user server process."""
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            if os.stat(path).st_uid < 20000:
                continue
            env = dict(
                item.split("=", 1)
                for item in open(path, "rb").read().decode(errors="replace").split("\0")
                if "=" in item
            )
        except OSError:
            continue
        if env.get("JUPYTERHUB_USER") == user and env.get("JUPYTERHUB_API_TOKEN"):
            return env
    raise AssertionError(f"no server process of {user}")


def test_port_callback_accepts_only_the_port(session, hub):
    alice = session("alice", profile="pytorch", gpus=1)
    token = server_token("alice")
    url = hub + "/hub/api/batchspawner"
    auth = {"Authorization": f"token {token}"}
    for body in ({"port": 5000, "cmd": ["/bin/sh"]}, {"cmd": ["/bin/sh"]}, {"ip": "10.0.0.1"}, [1]):
        r = requests.post(url, json=body, headers=auth, timeout=10)
        assert r.status_code == 400, (body, r.status_code)
    for port in (0, 80, 70000, "5000", True):
        r = requests.post(url, json={"port": port}, headers=auth, timeout=10)
        assert r.status_code in (400, 409), (port, r.status_code)
    r = requests.post(url, json={"port": 6000}, headers=auth, timeout=10)
    assert r.status_code == 409  # once per spawn
    # the same report again (its answer lost): taken, nothing changes
    port = server_port("alice")
    r = requests.post(url, json={"port": port}, headers=auth, timeout=10)
    assert r.status_code == 200, r.text
    # a token of alice that is not her server's
    user_token = alice.api("POST", "/users/alice/tokens", json={}).json()["token"]
    r = requests.post(url, json={"port": 6000}, headers={"Authorization": f"token {user_token}"})
    assert r.status_code == 403
    # the server still works, on its reported port
    model = alice.wait_ready("alice")
    assert alice.session.get(alice.url(model["servers"][""]["url"] + "api/status")).status_code in (
        200,
        403,
    )


def test_a_job_cancelled_while_queued_ends_the_spawn_at_once(session, one_free_node):
    session("carol", profile="pytorch", gpus=4)  # the last node is full
    alice = session("alice", wait=False, profile="pytorch", gpus=1)
    deadline = time.monotonic() + 20
    while not user_jobs("alice") and time.monotonic() < deadline:
        time.sleep(0.2)
    [(job_id, state)] = user_jobs("alice")
    assert state == "PENDING"
    subprocess.run(["scancel", job_id], check=True)
    cancelled = time.monotonic()
    while alice.user_model("alice")["servers"] and time.monotonic() - cancelled < 15:
        time.sleep(0.3)
    assert not alice.user_model("alice")["servers"], "the spawn kept waiting for a cancelled job"
