"""Several sessions per user (issue 26), against the real hub and Slurm:
JupyterHub's named servers with the portal's spawner, each its own Slurm
job, a card each on the home page; stopping one leaves the other; one past
[hub] sessions_per_user is refused before anything is submitted."""

import re
import time

from portal import settings as portal_settings
from tests.support.jobs import cancel_jobs_of, squeue
from tests.support.testhub import JOB_NAME

PER_USER = portal_settings.load()["hub"]["sessions_per_user"]


def running(user):
    return sorted(squeue("-n", JOB_NAME, "-u", user, "-t", "RUNNING", "-o", "%i"))


def start(client, name, server=""):
    path = f"/users/{name}/servers/{server}" if server else f"/users/{name}/server"
    r = client.api("POST", path, json={"profile": "pytorch", "gpus": 1})
    assert r.status_code in (201, 202), r.text
    return r


def test_two_named_sessions_run_side_by_side_and_stop_one_by_one(login):
    alice = login("alice")
    try:
        for server in ("one", "two"):
            start(alice, "alice", server)
        for server in ("one", "two"):
            alice.wait_ready("alice", timeout=180, server_name=server)
        jobs = running("alice")
        assert len(jobs) == 2, jobs
        for server in ("one", "two"):
            assert alice.lab_answers("alice", server), server

        # the home page: a card for each, with its own job
        home = alice.session.get(alice.url("/hub/home"), timeout=30).text
        shown = {
            server: re.search(rf'id="session-job-{server}"[^>]*>(\d+)', home).group(1)
            for server in ("one", "two")
        }
        assert sorted([job] for job in shown.values()) == jobs
        assert "portal/sessions/alice/one/gpus" in home

        # one past sessions_per_user: refused, nothing submitted
        if PER_USER == 3:
            start(alice, "alice")  # the default session: the third
            alice.wait_ready("alice", timeout=180)
            r = alice.api("POST", "/users/alice/servers/four", json={"profile": "pytorch"})
            assert r.status_code == 400, r.text
            assert "You run 3 sessions (default, one, two)" in r.json()["message"]
            assert len(running("alice")) == 3
            alice.api("DELETE", "/users/alice/server")
            alice.wait_stopped_server("alice", "")

        # stopping one leaves the other running
        r = alice.api("DELETE", "/users/alice/servers/one")
        assert r.status_code in (202, 204), r.text
        alice.wait_stopped_server("alice", "one")
        deadline = time.monotonic() + 60
        while len(running("alice")) != 1:
            assert time.monotonic() < deadline, running("alice")
            time.sleep(0.5)
        assert running("alice") == [[shown["two"]]]
        assert alice.lab_answers("alice", "two")
    finally:
        for server in ("one", "two", "four"):
            alice.api("DELETE", f"/users/alice/servers/{server}", json={"remove": True})
        alice.api("DELETE", "/users/alice/server")
        cancel_jobs_of(["alice"], timeout=30)


def test_a_named_sessions_form_stores_no_session_until_it_starts(login):
    """A review filled bob's named servers with three GETs of spawn pages
    (JupyterHub stores a server to render its form), after which none could
    be made: the form of a new name now leaves nothing stored."""
    bob = login("bob")
    try:
        for ghost in ("ghost1", "ghost2", "ghost3", "ghost4"):
            r = bob.session.get(bob.url(f"/hub/spawn/bob/{ghost}"), timeout=30)
            assert r.status_code == 200 and 'id="profile"' in r.text, ghost
        r = bob.api("GET", "/users/bob?include_stopped_servers=1")
        assert not [name for name in r.json()["servers"] if name.startswith("ghost")]
        start(bob, "bob", "work")
        bob.wait_ready("bob", timeout=180, server_name="work")
    finally:
        bob.api("DELETE", "/users/bob/servers/work", json={"remove": True})
        cancel_jobs_of(["bob"], timeout=30)
