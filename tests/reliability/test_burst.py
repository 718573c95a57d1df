"""30 users ask for a session at the same moment, on a node with 4 GPUs: each
gets exactly one Slurm job, running (and reachable) or queued with Slurm's
reason, and none is lost."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.hubclient import HubClient
from tests.support.jobs import cancel_jobs_of, squeue
from tests.support.measure import figure
from tests.support.testhub import JOB_NAME

USERS = 30
SETTLE_TIMEOUT = 240  # seconds for the jobs that can run to be up


def server_state(client, name):
    """``ready``, ``pending`` or ``none`` as the hub shows the user's server."""
    server = client.user_model(name)["servers"].get("")
    if not server:
        return "none"
    return "ready" if server.get("ready") else "pending"


@pytest.mark.slow
def test_30_users_at_once_each_run_or_queue_with_a_reason(hub, load_users, capsys):
    accounts = load_users(USERS)
    names = sorted(accounts)
    clients = {}
    for name in names:
        clients[name] = HubClient(hub)
        assert clients[name].login(name, accounts[name]).status_code == 302
    gate = threading.Barrier(USERS)

    def spawn(name):
        gate.wait()
        t = time.monotonic()
        r = clients[name].api(
            "POST", f"/users/{name}/server", json={"profile": "pytorch", "gpus": 1}, timeout=60
        )
        return r.status_code, time.monotonic() - t

    try:
        with ThreadPoolExecutor(USERS) as pool:
            answers = dict(zip(names, pool.map(spawn, names), strict=True))
        assert {code for code, _ in answers.values()} <= {201, 202}, answers

        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            jobs = {}
            for job_id, user, state, reason in squeue(
                "-n", JOB_NAME, "-u", ",".join(names), "-o", "%i %u %T %r"
            ):
                jobs.setdefault(user, []).append((job_id, state, reason))
            states = {name: server_state(clients[name], name) for name in names}
            settled = all(
                len(jobs.get(name, [])) == 1
                and (
                    (states[name] == "ready" and jobs[name][0][1] == "RUNNING")
                    or (states[name] == "pending" and jobs[name][0][1] == "PENDING")
                )
                for name in names
            )
            if settled or time.monotonic() > deadline:
                break
            time.sleep(2)

        running = [n for n in names if states[n] == "ready"]
        queued = [n for n in names if states[n] == "pending"]
        lost = [n for n in names if states[n] == "none" or not jobs.get(n)]
        reasons = sorted({jobs[n][0][2] for n in queued})
        figure(
            capsys,
            f"{USERS} spawns at once: {len(running)} running, {len(queued)} queued "
            f"(reasons: {', '.join(reasons) or '-'}), {len(lost)} lost, "
            f"{sum(len(v) for v in jobs.values())} jobs for {len(jobs)} users; "
            f"slowest POST {max(s for _, s in answers.values()):.1f} s",
        )
        assert not lost, lost
        assert all(len(jobs[n]) == 1 for n in names), jobs
        assert settled, {n: (states[n], jobs.get(n)) for n in names}
        assert running, "no session runs"
        assert all(jobs[n][0][2] not in ("", "None") for n in queued), jobs
        # a queued user's spawn page says why
        if queued:
            client = clients[queued[0]]
            page = client.session.get(client.url(f"/hub/spawn-pending/{queued[0]}"), timeout=10)
            assert page.status_code == 200
    finally:
        for name, client in clients.items():
            client.api("DELETE", f"/users/{name}/server")
        cancel_jobs_of(names)
        for name, client in clients.items():
            client.wait_stopped(name, timeout=60)
