"""``make load USERS=N``: N accounts, made for the run and removed after
(LDAP ``drive001``..), each through the portal as a data scientist goes,
all at once, against the running portal (``make up``, the [hub] settings'
public URL):

1. ``login``: the hub's login form (LDAP over StartTLS);
2. ``spawn``: ``POST /hub/api/users/NAME/server`` (the PyTorch profile, one
   GPU, one hour) to the server answering through the proxy; past the
   cluster's GPUs the spawns queue in Slurm until others stop (each is seen
   pending or not: ``queued``);
3. ``cell``: a new kernel of the session runs a cell over its websocket;
4. ``stop``: ``DELETE`` the server, to the hub saying it stopped.

It prints each stage's p50 and p95 (seconds), how many users went through
every stage, and each failure with its stage and reason; the exit status is
1 when any user failed. The clients are requests (HTTP) and tornado's
websocket, through the proxy with the portal's certificate checked.
"""

import argparse
import asyncio
import math
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from portal import settings as site_settings
from tests.support import loadusers
from tests.support.hubclient import HubClient
from tests.support.kernelcells import run_in_session

PREFIX = "drive"
STAGES = ("login", "spawn", "cell", "stop")
OPTIONS = {"profile": "pytorch", "gpus": 1, "hours": 1}


def say(message):
    print(f"load: {message}", file=sys.stderr, flush=True)


class PendingWatcher:
    """Who of the run's users had a job queued (pending for a reason, such
    as Resources: not one just submitted): one ``squeue`` a second for them
    all (not one per user, which at 100 users would be the load)."""

    def __init__(self, prefix, every=1.0, squeue=None):
        self.prefix, self.every = prefix, every
        self.squeue = squeue or self._squeue
        self.seen, self.stop = set(), threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    @staticmethod
    def _squeue():
        return subprocess.run(
            ["squeue", "-h", "-t", "PENDING", "-o", "%u %r"], capture_output=True, text=True,
            check=False,
        ).stdout  # fmt: skip

    def run(self):
        while True:
            for line in self.squeue().splitlines():
                user, _, reason = line.strip().partition(" ")
                # "None": just submitted, not yet looked at; Resources, Priority...: queued
                if user.startswith(self.prefix) and reason.strip() not in ("", "None"):
                    self.seen.add(user)
            if self.stop.wait(self.every):
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)


def one_user(url, name, password, timeout, watcher):
    """``(times by stage, queued, failure or None)`` of one user's run
    (``watcher``: the run's ``PendingWatcher``)."""
    times, queued, stage = {}, False, "login"
    try:
        began = time.monotonic()
        client = HubClient(url)
        r = client.login(name, password)
        if r.status_code != 302:
            raise RuntimeError(f"the login answered {r.status_code}")
        times["login"] = time.monotonic() - began

        stage, began = "spawn", time.monotonic()
        r = client.api("POST", f"/users/{name}/server", json=OPTIONS)
        if r.status_code not in (201, 202):
            raise RuntimeError(f"the spawn answered {r.status_code}: {r.text[:200]}")
        client.wait_ready(name, timeout=timeout)
        times["spawn"], queued = time.monotonic() - began, name in watcher.seen

        stage, began = "cell", time.monotonic()
        r = client.api("POST", f"/users/{name}/tokens", json={"expires_in": 3600})
        r.raise_for_status()
        status, printed = asyncio.run(
            run_in_session(client.url(f"/user/{name}/"), r.json()["token"], "print(6 * 7)")
        )
        if status != "ok" or "42" not in printed:
            raise RuntimeError(f"the cell ended {status}: {printed[:200]!r}")
        times["cell"] = time.monotonic() - began

        stage, began = "stop", time.monotonic()
        client.api("DELETE", f"/users/{name}/server")
        client.wait_stopped(name, timeout=120)
        times["stop"] = time.monotonic() - began
        return times, queued, None
    except Exception as e:  # noqa: BLE001 (each failure is reported with its stage)
        return times, queued, f"{name} at {stage}: {type(e).__name__}: {str(e)[:300]}"


def p95(values):
    """The nearest-rank 95th percentile: the value 95 % of them are at most."""
    ordered = sorted(values)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


def report(results, users, seconds):
    failures = [f for _, _, f in results if f]
    lines = [f"{users} users, {seconds:.0f} s in all"]
    for stage in STAGES:
        values = [t[stage] for t, _, _ in results if stage in t]
        if values:
            lines.append(
                f"{stage:6} {len(values):3d} done   p50 {statistics.median(values):7.2f} s   "
                f"p95 {p95(values):7.2f} s"
            )
        else:
            lines.append(f"{stage:6}   0 done")
    done = sum(1 for t, _, f in results if not f and len(t) == len(STAGES))
    queued = sum(1 for _, q, _ in results if q)
    lines.append(f"completed {done} of {users}, {queued} of them queued in Slurm first")
    lines += [f"FAILED {f}" for f in failures]
    return "\n".join(lines), not failures


def main(argv=None):
    parser = argparse.ArgumentParser(prog="make load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=12)
    parser.add_argument("--timeout", type=float, default=900, help="seconds a spawn may queue")
    args = parser.parse_args(argv)
    if args.users < 1:
        parser.error("USERS must be at least 1")
    url = site_settings.public_url(site_settings.load()).rstrip("/")
    say(f"making {args.users} accounts {PREFIX}001.. for the run")
    began = time.monotonic()
    accounts = {}
    try:
        accounts = loadusers.ensure_users(args.users, prefix=PREFIX)
        with PendingWatcher(PREFIX) as watcher, ThreadPoolExecutor(args.users) as pool:
            results = list(pool.map(
                lambda item: one_user(url, *item, args.timeout, watcher), sorted(accounts.items())
            ))  # fmt: skip
    finally:
        if accounts:
            subprocess.run(["scancel", "-u", ",".join(accounts)], check=False, capture_output=True)
        time.sleep(2)
        removed = loadusers.remove_users(PREFIX)
        say(f"removed the {len(removed)} accounts")
    text, ok = report(results, args.users, time.monotonic() - began)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
