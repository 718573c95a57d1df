"""Notices by e-mail (issue 26), against the real parts: the hub's shared
poll of the real Slurm, alice's LDAP mail, and exim4 on the login node
delivering to /var/mail/alice (deploy/mail.sh).

With every GPU of the cluster held (root's jobs, as another team's work
would), alice's session with ``"notify": true`` queues; when the GPUs free
and it starts, her mailbox holds a message naming its Slurm job id; when
the job is cancelled from a shell, a second one says it ended and why."""

import mailbox
import re
import subprocess
import time

import pytest

from tests.support.jobs import occupy_nodes, release_nodes, squeue
from tests.support.testhub import JOB_NAME

MAILBOX = "/var/mail/alice"
WITHIN = 60  # seconds from the event to the delivered mail


def subjects():
    """The subjects of alice's mailbox, unfolded."""
    try:
        box = mailbox.mbox(MAILBOX, create=False)
    except (FileNotFoundError, mailbox.NoSuchMailboxError):
        return []
    try:
        return [" ".join(str(m["Subject"] or "").split()) for m in box]
    finally:
        box.close()


def wait_for_subject(text, timeout=WITHIN):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [s for s in subjects() if text in s]
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"no mail with {text!r} in {MAILBOX} within {timeout} s: {subjects()}")


def body_of(text):
    box = mailbox.mbox(MAILBOX, create=False)
    try:
        return next(
            m.get_payload(decode=True).decode() for m in box if text in " ".join(
                str(m["Subject"] or "").split()
            )
        )  # fmt: skip
    finally:
        box.close()


@pytest.fixture
def full_cluster(cluster, mail_server):
    occupy_nodes(leave_free=0)
    yield
    release_nodes()


def test_a_queued_session_with_notices_mails_its_start_and_its_end(session, login, full_cluster):
    alice = session("alice", wait=False, profile="pytorch", gpus=1, notify=True)
    deadline = time.monotonic() + 30
    while not (rows := squeue("-n", JOB_NAME, "-u", "alice", "-o", "%i %T")):
        assert time.monotonic() < deadline, "alice's session was not submitted"
        time.sleep(0.3)
    [(job_id, state)] = rows
    assert state == "PENDING", rows  # every GPU is held: it queues
    time.sleep(3)  # the shared poll sees it pending (active rate: 1 s)

    release_nodes()
    started = wait_for_subject(f"has started (Slurm job {job_id})")
    assert len(started) == 1
    body = body_of(f"has started (Slurm job {job_id})")
    assert f"Slurm job:  {job_id}" in body
    link = next(line for line in body.splitlines() if line.startswith("Open it:"))
    assert re.fullmatch(r"Open it: +https://alice\.[^/ ]+:\d+/user/alice/", link), link
    alice.wait_ready("alice", timeout=120)

    # ended without alice's stopping it: a scancel from a shell
    subprocess.run(["scancel", job_id], check=True)
    wait_for_subject(f"has ended (Slurm job {job_id})")
    assert "without your stopping it: it was cancelled." in body_of(
        f"has ended (Slurm job {job_id})"
    )
    # sent once each
    time.sleep(3)
    assert len([s for s in subjects() if f"(Slurm job {job_id})" in s]) == 2

    # the pages' notices: alice's own, never another user's
    def notices(client):
        r = client.session.get(client.url("/hub/portal/notices?since=0"), timeout=30)
        assert r.status_code == 200, r.text
        return [(e["job_id"], e["kind"]) for e in r.json()["events"]]

    assert {(job_id, "started"), (job_id, "ended")} <= set(notices(alice))
    assert not [n for n in notices(login("bob")) if n[0] == job_id]
    r = alice.session.get(alice.url("/hub/portal/notices?since=x"), timeout=30)
    assert r.status_code == 400
