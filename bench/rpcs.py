"""slurmctld's job-info RPCs per minute with 1 and with N running sessions.

The sessions are lightweight servers (``bench/lite_session.py``, profile
``lite``: one GPU, one core, 1 GB), so 100 of them fit on the one-machine
cluster. For that the node advertises N more GPUs, cores and GB than its
settings say while the figures are taken (``big_node``): ``deploy/slurm.sh
start`` with those settings restarts slurmctld and slurmd (running jobs
survive), and the original configuration is written and restarted again in
any case at the end. sdiag counts every client of slurmctld, so the rate of
the others (the demo and test hubs, users) is measured first with no bench hub
running, and subtracted.
"""

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from bench import users
from bench.hubs import REPO
from portal import settings as site_settings
from tests.support.measure import job_info_rpcs

BATCH = 20  # sessions asked for at once


def per_minute(window):
    """Job-info RPCs per minute over ``window`` seconds."""
    before = job_info_rpcs()
    time.sleep(window)
    return (job_info_rpcs() - before) * 60 / window


def slurm_start(env=None):
    result = subprocess.run(
        ["bash", str(REPO / "deploy" / "slurm.sh"), "start"],
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"deploy/slurm.sh start failed: {result.stderr[-2000:]}")


@contextmanager
def big_node(extra):
    """The node advertises ``extra`` more GPUs, cores and GB while inside."""
    cluster = site_settings.load()["cluster"]
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as config:
        config.write(
            "[cluster]\n"
            f"node_gpus = {cluster['node_gpus'] + extra}\n"
            f"node_cpus = {cluster['node_cpus'] + extra}\n"
            f"node_mem_mb = {cluster['node_mem_mb'] + 1024 * extra}\n"
        )
        config.flush()
        print(f"bench: the node advertises {extra} more GPUs for the load figures", file=sys.stderr)
        try:
            slurm_start({**os.environ, "PORTAL_CONFIG": config.name})
            yield
        finally:
            env = {k: v for k, v in os.environ.items() if k != "PORTAL_CONFIG"}
            slurm_start(env)
            print("bench: the node's configuration is restored", file=sys.stderr)


def sessions_rates(hub, accounts, sessions, window, options=None, settle=5):
    """(per minute with 1 session, per minute with ``sessions``), on ``hub`` in lite mode."""
    hub.start(lite=True)
    clients = {}
    try:
        clients = users.login_all(hub, accounts, workers=8)
        names = sorted(clients)[:sessions]

        def ask(name):
            r = clients[name].api("POST", f"/users/{name}/server", json=options, timeout=120)
            if r.status_code not in (201, 202):
                raise RuntimeError(f"spawn of {name} on the {hub.name} hub: {r.status_code}")

        ask(names[0])
        clients[names[0]].wait_ready(names[0], timeout=300)
        time.sleep(settle)
        one = per_minute(window)
        with ThreadPoolExecutor(BATCH) as pool:
            for i in range(1, len(names), BATCH):
                batch = names[i : i + BATCH]
                list(pool.map(ask, batch))
                for name in batch:
                    clients[name].wait_ready(name, timeout=600)
        running = len(hub.jobs("RUNNING"))
        if running != sessions:
            raise RuntimeError(f"{running} jobs of {hub.job_name} run, not {sessions}")
        time.sleep(settle)
        many = per_minute(window)
        return one, many
    finally:
        with ThreadPoolExecutor(BATCH) as pool:
            list(pool.map(lambda n: clients[n].api("DELETE", f"/users/{n}/server"), clients))
        hub.cancel_jobs()
        hub.wait_no_jobs()
        hub.stop()
