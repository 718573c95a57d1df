"""Sessions survive what happens around them: a hub restart, a job killed
behind the hub's back, slurmctld crashing or going away for a while, slapd
going away for a while."""

import os
import re
import signal
import subprocess
import time

import requests

from spawners.card import SETTLE_DEADLINE_S
from tests.support.hubclient import HubClient
from tests.support.jobs import user_jobs
from tests.support.measure import figure
from tests.support.testhub import POLL_INTERVAL, deploy

USERS = ("alice", "bob", "carol")


def test_hub_restart_keeps_every_session(session, hub_env, capsys):
    clients = {name: session(name, profile="pytorch", gpus=1) for name in USERS}
    jobs = {name: user_jobs(name) for name in USERS}
    assert all(len(rows) == 1 and rows[0][1] == "RUNNING" for rows in jobs.values()), jobs

    started = time.monotonic()
    result = deploy("hub.sh", "restart", env=hub_env, check=False)  # what make restart-hub runs
    restart_s = time.monotonic() - started
    assert result.returncode == 0, result.stderr

    kept = [
        name
        for name, client in clients.items()
        if client.user_model(name)["servers"].get("", {}).get("ready")
        and client.lab_answers(name)
        and user_jobs(name) == jobs[name]
    ]
    figure(
        capsys,
        f"hub restart: sessions kept {len(kept)}/{len(USERS)} "
        f"(reachable, same Slurm job), restart took {restart_s:.1f} s",
    )
    assert kept == list(USERS)


def test_a_cancelled_job_is_noticed_within_a_poll_and_the_user_can_start_again(session, capsys):
    bob = session("bob", profile="pytorch", gpus=1)
    [(job_id, _)] = user_jobs("bob")
    subprocess.run(["scancel", job_id], check=True)  # behind the hub's back
    cancelled = time.monotonic()
    while bob.user_model("bob")["servers"] and time.monotonic() - cancelled < 30:
        time.sleep(0.1)
    noticed_s = time.monotonic() - cancelled
    figure(
        capsys,
        f"scancel: the hub showed the server stopped after {noticed_s:.1f} s "
        f"(poll interval {POLL_INTERVAL:.0f} s)",
    )
    assert not bob.user_model("bob")["servers"], "the hub still shows a cancelled job's server"
    # the shared squeue notifies the spawner: one interval, plus slack for a busy machine
    assert noticed_s <= POLL_INTERVAL + 1
    # no session card any more; how the job ended, from sacct (slurmdbd may
    # record it a moment after squeue dropped the job: the page says so, for
    # at most SETTLE_DEADLINE_S)
    deadline = time.monotonic() + SETTLE_DEADLINE_S + 10
    while True:
        home = bob.session.get(bob.url("/hub/home"), timeout=10)
        assert home.status_code == 200 and 'id="session-job"' not in home.text
        ended = re.search(r'id="session-ended">(.*?)</p>', home.text, re.S)
        assert ended and job_id in ended[1], home.text
        if "not recorded yet" not in ended[1] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "it was cancelled (CANCELLED" in ended[1], ended[1]

    session("bob", profile="pytorch", gpus=1)  # starts again
    [(job_id2, state)] = user_jobs("bob")
    assert job_id2 != job_id and state == "RUNNING"


def wait_state_saved(since, timeout=30):
    """Wait for slurmctld to write its job state after ``since`` (epoch seconds).

    It writes it a few seconds after a change; killed before that, it comes
    back with the older state, purges newer jobs as defunct and kills their
    steps as orphans (seen: a session started 2 s before the kill was lost).
    """
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    folder = re.search(r"^StateSaveLocation\s*=\s*(\S+)", out, re.M).group(1)
    path = os.path.join(folder, "job_state")
    deadline = time.monotonic() + timeout
    while os.stat(path).st_mtime <= since:
        assert time.monotonic() < deadline, f"slurmctld did not write {path} in {timeout} s"
        time.sleep(0.2)


def test_slurmctld_outage_does_not_drop_a_running_session(session, slurmctld_down):
    alice = session("alice", profile="pytorch", gpus=1)
    [(job_id, _)] = user_jobs("alice")
    # A crash, not a crash before Slurm recorded the running job: a job the
    # backfill scheduler starts is saved only at the next change of a job, so
    # make one (a comment), then wait for the save.
    since = time.time()
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "Comment=state-saved"], check=True)
    wait_state_saved(since)
    with slurmctld_down(signal.SIGKILL):
        time.sleep(4 * POLL_INTERVAL)  # several polls of the test hub
        assert alice.user_model("alice")["servers"][""]["ready"]
        assert alice.lab_answers("alice")
    time.sleep(5)
    assert alice.user_model("alice")["servers"][""]["ready"]
    assert user_jobs("alice") == [[job_id, "RUNNING"]]


def spawn_failure(client, name, timeout=90):
    """(seconds, message) of a spawn that fails, through the REST API and the
    progress stream a spawn page reads."""
    started = time.monotonic()
    r = client.api("POST", f"/users/{name}/server", json={"profile": "pytorch", "gpus": 1})
    if r.status_code >= 400:  # failed within the hub's slow_spawn_timeout
        return time.monotonic() - started, r.json().get("message", "")
    assert r.status_code == 202, r.text
    url = client.url(f"/hub/api/users/{name}/server/progress")
    headers = {"X-XSRFToken": client.session.cookies.get("_xsrf", path="/hub/")}
    with client.session.get(url, stream=True, timeout=timeout, headers=headers) as stream:
        for line in stream.iter_lines(decode_unicode=True):
            if line and line.startswith("data:") and '"failed": true' in line:
                return time.monotonic() - started, line
    raise AssertionError("the progress stream ended without a failure")


def test_without_slurmctld_a_spawn_fails_fast_and_works_again_after(
    login, session, slurmctld_down, capsys
):
    alice = login("alice")
    with slurmctld_down():
        # the spawn page never waits on Slurm
        t = time.monotonic()
        assert alice.session.get(alice.url("/hub/spawn"), timeout=30).status_code == 200
        page_s = time.monotonic() - t
        fail_s, message = spawn_failure(alice, "alice")
        model = alice.user_model("alice")
    figure(
        capsys,
        f"slurmctld down: the spawn failed after {fail_s:.1f} s "
        f"(spawn page in {page_s:.2f} s); message: {message[:200]}",
    )
    assert fail_s < 60
    assert re.search(r"(?i)unable to contact|unreachable|not answer|no answer", message), message
    assert not model["servers"], f"a server stayed pending: {model['servers']}"
    assert not user_jobs("alice")
    # back up: spawning works without a hub restart
    session("alice", profile="pytorch", gpus=1)
    [(_, state)] = user_jobs("alice")
    assert state == "RUNNING"


def test_without_slapd_login_is_refused_with_a_message_and_the_hub_keeps_serving(
    hub, accounts, login, slapd_down, capsys
):
    bob = login("bob")
    with slapd_down():
        t = time.monotonic()
        refused = HubClient(hub).login("alice", accounts["alice"]["password"])
        refused_s = time.monotonic() - t
        home = bob.session.get(bob.url("/hub/home"), timeout=10)
        model = bob.api("GET", "/users/bob")
        login_page = requests.get(hub + "/hub/login", timeout=10)
    figure(
        capsys,
        f"slapd down: login refused with HTTP {refused.status_code} in {refused_s:.2f} s; "
        f"a logged-in user's home page: HTTP {home.status_code}",
    )
    assert refused.status_code in (403, 503), refused.status_code
    assert "LDAP" in refused.text and "not answering" in refused.text
    assert "Traceback" not in refused.text
    assert home.status_code == 200 and model.status_code == 200
    assert login_page.status_code == 200
    # back up: login works
    assert login("alice").user_model("alice")["name"] == "alice"
