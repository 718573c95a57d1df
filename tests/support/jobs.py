"""The test hub's Slurm jobs, as squeue and scontrol show them; cancelled by
the test hub's job name only, so another hub's jobs are left alone."""

import subprocess
import time

from portal import settings as site_settings
from tests.support.testhub import JOB_NAME


def squeue(*args):
    """squeue's rows (no header), each split into its fields."""
    out = subprocess.run(["squeue", "-h", *args], check=True, capture_output=True, text=True).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


def scontrol_job(job_id):
    """``scontrol show job``'s fields of one job, as a dict."""
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True
    ).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def sacct_record(job_id, timeout=60):
    """``(AllocTRES, Account, QOS)`` slurmdbd records of ``job_id`` once it
    ended and the record names them."""
    deadline = time.monotonic() + timeout
    row = ""
    while time.monotonic() < deadline:
        row = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "State,AllocTRES,Account,QOS"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        state, *rest = row.split("|") if row else ("",)
        # slurmdbd fills a record in steps: seen in CI, an ended job's QOS
        # read "Unknown" first (its QOS named a moment later)
        settled = rest and rest[0] and rest[2] not in ("", "Unknown")
        if state and state not in ("PENDING", "RUNNING", "COMPLETING") and settled:
            return tuple(rest)
        time.sleep(1)
    raise AssertionError(f"sacct has no end of job {job_id} within {timeout} s: {row!r}")


def user_jobs(user):
    """``[[job_id, state], ...]`` of the test hub's jobs of ``user`` (``a,b``: of several)."""
    return squeue("-n", JOB_NAME, "-u", user, "-o", "%i %T")


def wait_no_jobs(user, timeout=30):
    """Wait until ``user`` has no job of the test hub; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while user_jobs(user) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not user_jobs(user), f"jobs of {user} still there after {timeout} s: {user_jobs(user)}"


def cancel_jobs_of(users, timeout=60):
    """scancel the test hub's jobs of ``users``; wait until they are gone."""
    for user in users:
        subprocess.run(["scancel", "-n", JOB_NAME, "-u", user], check=False)
    wait_no_jobs(",".join(users), timeout)


def stop_session(client, name):
    """Stop ``name``'s main session through the hub (``client``: a logged-in
    HubClient), and scancel its job in any case."""
    client.api("DELETE", f"/users/{name}/server")
    try:
        client.wait_stopped(name, timeout=90)
    finally:
        cancel_jobs_of([name], timeout=30)


def cancel_test_jobs():
    """scancel every job of the test hub, its notebook jobs too (without
    waiting). scancel takes one --name: a comma list matches no job."""
    for name in (JOB_NAME, f"{JOB_NAME}-notebook"):
        subprocess.run(["scancel", "--name", name], check=False)


def partition_nodes(partition):
    """The names of the nodes of ``partition``, as sinfo lists them, sorted."""
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-p", partition, "-o", "%N"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return sorted(set(out.split()))


FILLER = f"{JOB_NAME}-filler"
PARTITION = site_settings.load()["slurm"]["partition"]  # where the fillers run


def occupy_all_nodes_but_one():
    """Take every GPU of every compute node but the first with a job of root's
    (outside the portal, as another team's work would), so a test of a full
    node sees a full cluster. Returns ``(free_node, total_gpus)``; cancel with
    ``release_nodes()``."""
    return occupy_nodes(leave_free=1)


def occupy_nodes(leave_free=0):
    """Take every free GPU of every compute node of the default partition
    ([slurm] partition, the profiles') but the first ``leave_free`` with a
    job of root's, one a node (root's jobs are held to no QOS limit; a GPU
    another job holds stays held). Returns ``(first node, total_gpus)`` of
    that partition; cancel with ``release_nodes()``."""
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-p", PARTITION, "-O", "NodeList:24,Gres:40,GresUsed:60"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip

    def count(gres):  # "gpu:4", "gpu:v100-sxm2:1(IDX:0)"
        return int(gres.split("(")[0].split(":")[-1])

    rows = [line.split() for line in out.splitlines()]
    nodes = [(name, count(gres)) for name, gres, _ in rows]
    free = {name: count(gres) - count(used) for name, gres, used in rows}
    for name, _ in nodes[leave_free:]:
        gpus = free[name]
        if not gpus:
            continue
        subprocess.run(
            ["sbatch", "-J", FILLER, "-p", PARTITION, "-w", name, f"--gres=gpu:{gpus}", "-t", "30",
             "-o", "/dev/null", "--wrap", "sleep 1800"],
            check=True, capture_output=True,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while squeue("-n", FILLER, "-t", "PENDING,CONFIGURING", "-o", "%i"):
        if time.monotonic() > deadline:
            release_nodes()  # none left behind for the next test
            raise AssertionError(f"the filler jobs did not start: {squeue('-o', '%i %u %T %r')}")
        time.sleep(0.2)
    return nodes[0][0], sum(gpus for _, gpus in nodes)


def release_nodes():
    subprocess.run(["scancel", "--name", FILLER], check=False)
