"""Slurm's PrivateData=jobs,usage on the real cluster: the hub's account
then sees no other user's job itself; the hub reads its sessions through
the root helper portal-slurm-read ([slurm] private_data = "auto"), and a
session stays running while the hub polls it, and ends when stopped.
Without the helper ("direct") the shared poll's squeue lists none of the
sessions. And the hub's account can cancel or change no job that is not
the portal's: not by itself, not through any form sudo lets it run, not
through the read helper.

PrivateData is set in the demo's slurm.conf and slurmdbd.conf for this
module alone (``scontrol reconfigure``, ``sacctmgr reconfigure``) and put
back at its end, with the sudoers file and the helpers as they were; a
hub of its own (on PORT+50, its own job name) runs the sessions. Run it
under the tests' lock (``flock -o /tmp/portal-it.lock``)."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from portal import settings as site_settings
from portal.helper import extend as extendhelper
from portal.helper import slurmread
from tests.support import REPO
from tests.support.hubclient import HubClient
from tests.support.hubsettings import (
    PYTORCH_PROFILE,
    fresh_state,
    hub_settings,
    public_url,
    write_settings,
)
from tests.support.jobs import scontrol_job, squeue
from tests.support.testhub import JOB_NAME, PORT, deploy

HUB_USER = site_settings.load()["hub"]["user"]
SLURM = site_settings.load()["slurm"]
PD_PORT = PORT + 50
PD_STATE = Path(f"/var/lib/portal/test-hub-private-{PORT}")
PD_JOB = f"{JOB_NAME}-private"
PD_SETTINGS = Path(f"/var/lib/portal/test-settings-private-{PORT}.toml")
POLL = 2.0
SLURM_CONF, DBD_CONF = Path("/etc/slurm/slurm.conf"), Path("/etc/slurm/slurmdbd.conf")
SUDOERS = Path("/etc/sudoers.d/portal")
SQUEUE, SCANCEL, SCONTROL = (f"{SLURM['bin_dir']}/{c}" for c in ("squeue", "scancel", "scontrol"))
OTHER_NAME = f"{JOB_NAME}-other-work"  # a user's own job, not the portal's


def pd_settings(mode):
    return (
        hub_settings(PD_PORT, PD_STATE, PD_JOB)
        + f'private_data = "{mode}"\npoll_interval = {POLL}\ncluster_interval = {POLL}\n'
        + PYTORCH_PROFILE
    )


def hub_log_size():
    log = PD_STATE / "jupyterhub.log"
    return log.stat().st_size if log.exists() else 0


def hub_log_since(offset):
    """What the private hub logged after ``offset`` (its log is kept across starts)."""
    with open(PD_STATE / "jupyterhub.log", "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def as_hub(*argv):
    """``argv`` as the hub's account, with its groups and a clean environment."""
    return subprocess.run(
        ["setpriv", f"--reuid={HUB_USER}", f"--regid={HUB_USER}", "--init-groups", *argv],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        timeout=60,
    )  # fmt: skip


def reconfigure(expected):
    subprocess.run(["scontrol", "reconfigure"], check=True, capture_output=True)
    subprocess.run(["sacctmgr", "-i", "reconfigure"], check=False, capture_output=True)
    deadline = time.monotonic() + 30
    while True:
        config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True)
        line = [x for x in config.stdout.splitlines() if x.startswith("PrivateData")]
        if line and line[0].split("=", 1)[1].strip() == expected:
            return
        assert time.monotonic() < deadline, line
        time.sleep(0.5)


@pytest.fixture(scope="module")
def private_data(cluster):
    """PrivateData=jobs,usage in slurm.conf and slurmdbd.conf; then the
    files, the sudoers rules and the helpers as they were before."""
    saved = {p: p.read_bytes() for p in (SLURM_CONF, DBD_CONF, SUDOERS) if p.exists()}
    helpers = {
        p: (p.read_bytes() if p.exists() else None)
        for p in map(Path, (extendhelper.INSTALLED_AT, slurmread.INSTALLED_AT))
    }
    try:
        for conf in (SLURM_CONF, DBD_CONF):
            conf.write_bytes(saved[conf] + b"PrivateData=jobs,usage\n")
        reconfigure("jobs,usage")
        yield
    finally:
        for path, data in saved.items():
            path.with_suffix(".restore").write_bytes(data)
            shutil.copymode(path, path.with_suffix(".restore"))
            os.replace(path.with_suffix(".restore"), path)
        reconfigure("none")
        for path, data in helpers.items():
            if data is None:
                path.unlink(missing_ok=True)
            elif path.read_bytes() != data:
                path.write_bytes(data)


@pytest.fixture(scope="module")
def private_hub(private_data, accounts):
    """The hub of its own, [slurm] private_data = "auto", started under
    PrivateData; stopped, its jobs cancelled and its registration gone at
    the end."""
    env = {**os.environ, "PORTAL_CONFIG": str(write_settings(PD_SETTINGS, pd_settings("auto")))}
    deploy("hub.sh", "stop", env=env)
    fresh_state(PD_STATE)
    try:
        offset = hub_log_size()
        started = deploy("hub.sh", "start", env=env, check=False)
        assert started.returncode == 0, started.stderr
        yield public_url(PD_PORT), offset
    finally:
        deploy("hub.sh", "stop", env=env, check=False)
        cancel_private_jobs()
        Path(extendhelper.REGISTRY, f"{PD_JOB}.json").unlink(missing_ok=True)


def cancel_private_jobs():
    """scancel, as root, the private hub's jobs (scancel takes one --name)."""
    for name in (PD_JOB, f"{PD_JOB}-notebook"):
        subprocess.run(["scancel", "--name", name], check=False)


@pytest.fixture
def other_job(private_data):
    """alice's own job (sbatch as alice, under a name that is not the
    portal's), running: its id; cancelled at the end."""
    submitted = subprocess.run(
        ["sudo", "-n", "-u", "alice", f"{SLURM['bin_dir']}/sbatch", "--parsable",
         "-J", OTHER_NAME, "-p", SLURM["partition"], "--gres=gpu:1", "--cpus-per-task=1",
         "--mem=1G", "-t", "60", "-o", "/dev/null", "--wrap", "sleep 900"],
        capture_output=True, text=True, check=True, cwd="/",
    )  # fmt: skip
    job_id = submitted.stdout.strip().split(";")[0]
    try:
        wait_state(job_id, "RUNNING")
        yield job_id
    finally:
        subprocess.run(["scancel", job_id], check=False)


def wait_state(job_id, state, timeout=60):
    deadline = time.monotonic() + timeout
    while squeue("-j", job_id, "-o", "%T") != [[state]]:
        assert time.monotonic() < deadline, squeue("-j", job_id, "-o", "%T %r")
        time.sleep(0.5)


def hub_queue(mode):
    """The shared poll's squeue (``commands.queue``) of the private hub's
    sessions, as the hub's account reads it with [slurm] private_data
    ``mode``: ``{job_id: state}``."""
    code = (
        "import asyncio, sys\n"
        "from portal.slurm import commands\n"
        f"commands.use_bin_dir({SLURM['bin_dir']!r})\n"
        f"commands.use_private_data({mode!r})\n"
        f"jobs = asyncio.run(commands.queue({PD_JOB!r}, 30))\n"
        "print(' '.join(f'{i}={j.state}' for i, j in sorted(jobs.items())))\n"
    )
    done = as_hub("env", f"PYTHONPATH={REPO}", "/opt/portal/envs/hub/bin/python", "-c", code)
    assert done.returncode == 0, done.stderr
    return dict(pair.split("=") for pair in done.stdout.split())


def test_the_hub_s_account_sees_no_user_s_job_itself_under_private_data(other_job):
    """What the mechanism is for: Slurm hides alice's job from the hub's account."""
    assert as_hub(SQUEUE, "-h", "-o", "%i", "-u", "alice").stdout.split() == []
    shown = as_hub(SCONTROL, "show", "job", other_job)
    assert shown.returncode != 0 and "Invalid job id" in shown.stderr, shown
    assert squeue("-j", other_job, "-o", "%T") == [["RUNNING"]]  # root sees it


def test_a_session_stays_running_while_the_hub_polls_it_and_ends_when_stopped(
    private_hub, accounts
):
    url, offset = private_hub
    alice = HubClient(url)
    assert alice.login("alice", accounts["alice"]["password"]).status_code == 302
    r = alice.api("POST", "/users/alice/server", json={"profile": "pytorch", "gpus": 1, "hours": 1})
    assert r.status_code in (201, 202), r.text
    try:
        alice.wait_ready("alice", timeout=180)
        ((job_id,),) = squeue("-n", PD_JOB, "-u", "alice", "-o", "%i")
        log = hub_log_since(offset)
        assert f"the hub reads its jobs through {slurmread.INSTALLED_AT}" in log
        assert "cannot run" not in log
        # several of the hub's polls (every POLL s): the session and its job stay
        for _ in range(5):
            time.sleep(2 * POLL)
            server = alice.user_model("alice")["servers"].get("")
            assert server and server["ready"], alice.user_model("alice")
            assert squeue("-j", job_id, "-o", "%T") == [["RUNNING"]]
        # the shared poll's own read: through the helper it lists the job;
        # without it (private_data = "direct") it lists nothing
        assert hub_queue("auto") == {job_id: "RUNNING"}
        assert hub_queue("helper") == {job_id: "RUNNING"}
        assert hub_queue("direct") == {}
    finally:
        r = alice.api("DELETE", "/users/alice/server")
        assert r.status_code in (202, 204), r.text
    alice.wait_stopped("alice")
    deadline = time.monotonic() + 30
    while squeue("-n", PD_JOB, "-u", "alice", "-o", "%i"):
        assert time.monotonic() < deadline, squeue("-n", PD_JOB, "-o", "%i %T")
        time.sleep(0.5)
    state = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State"], capture_output=True, text=True
    ).stdout.split()
    assert state and state[0].startswith("CANCELLED"), state


def hub_shares(mode):
    """The users of the catalog's sshare (``commands.shares``) as the hub's
    account reads it with [slurm] private_data ``mode``."""
    code = (
        "import asyncio\n"
        "from portal.slurm import commands\n"
        f"commands.use_bin_dir({SLURM['bin_dir']!r})\n"
        f"commands.use_private_data({mode!r})\n"
        "shares = asyncio.run(commands.shares(30))\n"
        "print(' '.join(sorted({user for _, user in shares if user})))\n"
    )
    done = as_hub("env", f"PYTHONPATH={REPO}", "/opt/portal/envs/hub/bin/python", "-c", code)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_the_catalog_reads_everyone_s_fairshare_through_the_helper_alone(private_hub):
    """PrivateData=usage hides other users' sshare lines from the hub's
    account; the catalog's sshare then goes through the read helper, which
    shows the portal's users' lines (alice's, bob's), not root's."""
    fields = ["-a", "-n", "-P", "-o", slurmread.SHARE_FIELDS]

    def users(output):
        return {line.split("|")[1].strip() for line in output.splitlines() if "|" in line}

    root = subprocess.run(
        [f"{SLURM['bin_dir']}/sshare", *fields], capture_output=True, text=True, check=True
    )
    assert {"alice", "bob", "root"} <= users(root.stdout)
    direct = as_hub(f"{SLURM['bin_dir']}/sshare", *fields)
    assert direct.returncode == 0, direct.stderr
    assert not {"alice", "bob"} & users(direct.stdout)
    assert not {"alice", "bob"} & hub_shares("direct")
    helped = hub_shares("auto")
    assert {"alice", "bob"} <= helped and "root" not in helped, helped
    assert hub_shares("helper") == helped


def test_the_hub_s_account_can_cancel_or_change_no_job_that_is_not_the_portal_s(
    private_hub, other_job
):
    """alice's own job, under a name that is not the portal's: every way the
    hub's account has fails or leaves it running, its limit as it was."""
    limit = scontrol_job(other_job)["TimeLimit"]
    registered = [PD_JOB, f"{PD_JOB}-notebook"] + [
        name
        for path in Path(extendhelper.REGISTRY).glob("*.json")
        for name in (path.stem, f"{path.stem}-notebook")
    ]
    helper = slurmread.INSTALLED_AT
    update = [SCONTROL, "update", f"JobId={other_job}", "TimeLimit=5:00:00"]

    def sudo_alice(*argv):
        return as_hub("sudo", "-n", "-u", "alice", "--", *argv)

    # by itself: Slurm refuses (or, under PrivateData, does not even show it)
    for argv in ([SCANCEL, other_job], update):
        done = as_hub(*argv)
        assert done.returncode != 0, (argv, done)
    # through sudo as alice: scancel only with a registered name and one id
    refused_by_sudo = [
        [SCANCEL, other_job],
        [SCANCEL, f"--name={OTHER_NAME}", other_job],
        [SCANCEL, f"--name={PD_JOB},{OTHER_NAME}", other_job],
        [SCANCEL, f"--name={PD_JOB}", other_job, "--signal=KILL"],
        [SCANCEL, f"--name={PD_JOB}", "--user=alice", other_job],
        [SCANCEL, "-n", PD_JOB, other_job],
        [SCANCEL, f"--name={PD_JOB}", f"{other_job};id"],
        [SCANCEL, "-u", "alice"],
        [SCONTROL, "update", f"JobId={other_job}", "TimeLimit=5:00:00"],
        [SQUEUE, "-u", "alice"],
    ]
    for argv in refused_by_sudo:
        done = sudo_alice(*argv)
        assert done.returncode == 1 and "a password is required" in done.stderr, (argv, done)
    # what sudo lets through: scancel's own filter leaves a job of another name alone
    for name in registered:
        done = sudo_alice(SCANCEL, f"--name={name}", other_job)
        assert done.returncode == 0, (name, done)
    time.sleep(2)
    assert squeue("-j", other_job, "-o", "%T") == [["RUNNING"]]
    # as root: no scancel, no scontrol; the read helper neither cancels,
    # changes nor shows a job that is not the portal's
    for argv in ([SCANCEL, other_job], update, [helper, "scancel", other_job]):
        done = as_hub("sudo", "-n", "--", *argv)
        assert done.returncode == 1 and "a password is required" in done.stderr, (argv, done)
    for argv, why in (
        (["scontrol", "update", f"JobId={other_job}", "TimeLimit=5:00:00"], "'update' is not"),
        (["scontrol", "show", "job", "-d", other_job], "none of the portal's jobs"),
        (["squeue", "--noheader", "--name", OTHER_NAME, "--format", slurmread.QUEUE_FORMAT],
         "is not the name of the portal's jobs"),
        (["sacct", "-j", other_job, "--name", PD_JOB, "-X", "-n", "-P", "-o", "State,Comment"],
         "is not 'State,ExitCode,Reason'"),
    ):  # fmt: skip
        done = as_hub("sudo", "-n", "--", helper, *argv)
        assert done.returncode == 2 and why in done.stderr, (argv, done)
        assert other_job not in done.stdout
    # the extend helper: not a portal session
    done = as_hub("sudo", "-n", "--", extendhelper.INSTALLED_AT, other_job, "300", "1440")
    assert done.returncode == 1 and "is not a portal session" in done.stderr, done
    assert squeue("-j", other_job, "-o", "%T") == [["RUNNING"]]
    assert scontrol_job(other_job)["TimeLimit"] == limit


def test_without_the_helper_a_starting_session_is_taken_for_ended_while_its_job_runs(
    private_hub, accounts
):
    """The failure the helper prevents, shown: the same hub with [slurm]
    private_data = "direct" sees none of its jobs under PrivateData; a
    session's start fails as if its job had ended while Slurm runs it (the
    hub does not cancel it; the session ends itself when the hub refuses its
    port). (Last in this module: it restarts the hub so.)"""
    env = {**os.environ, "PORTAL_CONFIG": str(write_settings(PD_SETTINGS, pd_settings("direct")))}
    offset = hub_log_size()
    restarted = deploy("hub.sh", "restart", env=env, check=False)
    assert restarted.returncode == 0, restarted.stderr
    try:
        alice = HubClient(private_hub[0])
        assert alice.login("alice", accounts["alice"]["password"]).status_code == 302
        r = alice.api("POST", "/users/alice/server", json={"profile": "pytorch", "gpus": 1})
        assert r.status_code in (201, 202, 500), r.text
        alice.wait_stopped("alice", timeout=120)  # the hub gave the session up
        log = hub_log_since(offset)
        assert "the hub reads its jobs as its own account" in log
        assert "Your Slurm job ended before Jupyter started" in log
        job_id = (
            log.split("Your Slurm job ended before Jupyter started. Its log: ")[1]
            .split(".log")[0]
            .rsplit("-", 1)[1]
        )
        # Slurm ran it all the same: Jupyter starts in the job the hub gave up on
        deadline, started = time.monotonic() + 90, ""
        while "is running at" not in started:
            assert time.monotonic() < deadline, (squeue("-j", job_id), started[-2000:])
            time.sleep(1)
            started = subprocess.run(["cat", f"/home/alice/.portal/logs/jupyter-{job_id}.log"],
                                     capture_output=True, text=True).stdout  # fmt: skip
        log = hub_log_since(offset)
        assert f"Cancelling job {job_id}" not in log
    finally:
        cancel_private_jobs()
