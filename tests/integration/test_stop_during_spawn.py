"""Stopping a session in the first second of its spawn, against the real hub
and Slurm: the spawn ends as a stop (its job cancelled, the server shown
stopped), never as an error, and the user can start again."""

import threading
import time

import pytest

from tests.support.jobs import user_jobs, wait_no_jobs
from tests.support.testhub import STATE

HUB_LOG = STATE / "jupyterhub.log"


def wait_pending_spawn(client, name, timeout=10):
    """Wait until the hub lists ``name``'s server as pending spawn."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        server = client.user_model(name)["servers"].get("")
        if server and server["pending"] == "spawn":
            return
        time.sleep(0.05)
    raise AssertionError(f"no pending spawn of {name} within {timeout} s")


def start_then_stop(client, name, delay, **options):
    """POST a spawn, DELETE it ``delay`` seconds after the hub lists it as
    pending (while the POST still waits for it); returns both answers."""
    answers = {}

    def post():
        answers["post"] = client.api("POST", f"/users/{name}/server", json=options, timeout=60)

    thread = threading.Thread(target=post)
    thread.start()
    try:
        wait_pending_spawn(client, name)
        time.sleep(delay)
        answers["delete"] = client.api("DELETE", f"/users/{name}/server")
    finally:
        thread.join()
    return answers["post"], answers["delete"]


@pytest.mark.parametrize("delay", [0.0, 0.5])
def test_stop_in_the_first_second_of_a_spawn_ends_it_as_a_stop(login, session, delay):
    alice = login("alice")
    log_start = HUB_LOG.stat().st_size
    try:
        post, delete = start_then_stop(alice, "alice", delay, profile="pytorch", gpus=1)
        # the spawn's request is answered as accepted, not with an error
        assert post.status_code == 202, post.text
        assert delete.status_code in (202, 204), delete.text
        alice.wait_stopped("alice", timeout=30)
        wait_no_jobs("alice")  # the submitted job is cancelled
        assert not alice.user_model("alice")["servers"]
        home = alice.session.get(alice.url("/hub/home"), timeout=10)
        assert home.status_code == 200
        assert 'id="start-session"' in home.text and 'id="stop"' not in home.text
    finally:
        alice.api("DELETE", "/users/alice/server")
        wait_no_jobs("alice")
    with HUB_LOG.open("rb") as log:
        log.seek(log_start)
        assert b"Uncaught exception POST /hub/api/users/alice/server" not in log.read()
    # no failed spawn is remembered: the next start works
    session("alice", profile="pytorch", gpus=1)
    [(_, state)] = user_jobs("alice")
    assert state == "RUNNING"
