"""Slurm's commands in a folder of their own ([slurm] bin_dir), on the real
cluster: a second test hub of its own, whose bin_dir is a folder this test
makes (ALT_BIN) of wrappers that log their name and their user, then run
the real command. A session spawns, is extended and stops through that hub:
sbatch and scancel ran through the wrappers as the user (the sudoers rule
names that folder's commands alone), squeue and scontrol as the hub's
account, and the root helper's scontrol and sacctmgr as root, from the
folder the hub registered; the session's script is told the folder and has
it first on its PATH (the session's own squeue from it is unit-tested: the
sessions run the portal package installed in [envs] jupyter). A
folder without Slurm's commands stops the hub's start, naming the fix."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from portal import settings as site_settings
from portal.helper import extend as extendhelper
from portal.slurm import commands
from tests.support.hubclient import HubClient, Portal
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
ALT_ROOT = Path(f"/opt/slurm-alt-{PORT}")
ALT_BIN = ALT_ROOT / "bin"
CALLS = ALT_ROOT / "log" / "calls.log"  # "COMMAND USER" a line, one per run
ALT_PORT = PORT + 40
ALT_STATE = Path(f"/var/lib/portal/test-hub-slurm-alt-{PORT}")
ALT_JOB = f"{JOB_NAME}-alt"
ALT_SETTINGS = Path(f"/var/lib/portal/test-settings-slurm-alt-{PORT}.toml")
SUDOERS = Path("/etc/sudoers.d/portal")

WRAPPER = """#!/bin/sh
# A test's stand-in for Slurm's {name}: logs its name and user, runs the real one.
printf '%s %s\\n' {name} "$(id -un)" >>{calls}
exec /usr/bin/{name} "$@"
"""


def alt_settings(bin_dir):
    return (
        hub_settings(ALT_PORT, ALT_STATE, ALT_JOB)
        + f'bin_dir = "{bin_dir}"\npoll_interval = 2.0\ncluster_interval = 2.0\n'
        + PYTORCH_PROFILE
    )


def calls():
    return CALLS.read_text().splitlines() if CALLS.exists() else []


@pytest.fixture(scope="module")
def alt_hub(cluster, accounts):
    """The second hub, on ALT_PORT, its Slurm commands ALT_BIN's wrappers;
    the sudoers rules as they were before, and the folder and the hub's
    registration gone, at the end."""
    for folder, mode in ((ALT_ROOT, 0o755), (ALT_BIN, 0o755), (CALLS.parent, 0o755)):
        folder.mkdir(mode=mode, exist_ok=True)
        os.chmod(folder, mode)
    for name in commands.COMMANDS:
        (ALT_BIN / name).write_text(WRAPPER.format(name=name, calls=CALLS))
        os.chmod(ALT_BIN / name, 0o755)
    CALLS.write_text("")
    os.chmod(CALLS, 0o666)  # every user's wrapper writes it
    rules = SUDOERS.read_bytes()
    env = {**os.environ, "PORTAL_CONFIG": str(write_settings(ALT_SETTINGS, alt_settings(ALT_BIN)))}
    deploy("hub.sh", "stop", env=env)
    fresh_state(ALT_STATE)
    try:
        started = deploy("hub.sh", "start", env=env, check=False)
        assert started.returncode == 0, started.stderr
        yield public_url(ALT_PORT)
    finally:
        deploy("hub.sh", "stop", env=env, check=False)
        subprocess.run(["scancel", "--name", ALT_JOB], check=False)
        SUDOERS.with_suffix(".restore").write_bytes(rules)
        os.chmod(SUDOERS.with_suffix(".restore"), 0o440)
        os.replace(SUDOERS.with_suffix(".restore"), SUDOERS)
        Path(extendhelper.REGISTRY, f"{ALT_JOB}.json").unlink(missing_ok=True)
        shutil.rmtree(ALT_ROOT, ignore_errors=True)


def test_a_session_spawns_extends_and_stops_with_slurm_in_another_folder(alt_hub, accounts):
    assert f"Cmnd_Alias PORTAL_SLURM = {ALT_BIN}/sbatch, {ALT_BIN}/scancel" in (SUDOERS.read_text())
    alice = HubClient(alt_hub)
    assert alice.login("alice", accounts["alice"]["password"]).status_code == 302
    r = alice.api("POST", "/users/alice/server", json={"profile": "pytorch", "gpus": 1, "hours": 2})
    assert r.status_code in (201, 202), r.text
    try:
        model = alice.wait_ready("alice")
        ((job_id,),) = squeue("-n", ALT_JOB, "-u", "alice", "-o", "%i")
        assert scontrol_job(job_id)["TimeLimit"] == "02:00:00"
        # the session is told the folder (its squeue of the time left) and
        # has it first on its PATH, in the script sbatch was given
        script = subprocess.run(
            ["scontrol", "write", "batch_script", job_id, "-"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert f"export PORTAL_SLURM_BIN_DIR={ALT_BIN}\n" in script
        assert f"export PATH={ALT_BIN}:/usr/local/bin:/usr/bin:/bin\n" in script
        assert model["servers"][""]["ready"]

        r = Portal(alice).send("POST", "api/sessions/alice/extend", json={"hours": 1})
        assert r.status_code == 200 and r.json()["time_limit"] == "03:00:00", r.text
        assert scontrol_job(job_id)["TimeLimit"] == "03:00:00"
    finally:
        alice.api("DELETE", "/users/alice/server")
        alice.wait_stopped("alice")
    deadline = time.monotonic() + 30  # scancel'led: gone once it has completed
    while squeue("-n", ALT_JOB, "-u", "alice", "-o", "%i"):
        assert time.monotonic() < deadline, squeue("-n", ALT_JOB, "-o", "%i %T")
        time.sleep(0.5)
    ran = set(calls())
    # as alice through sudo; as the hub's account; as root by the helper
    for call in ("sbatch alice", "scancel alice", f"squeue {HUB_USER}", f"sinfo {HUB_USER}",
                 f"scontrol {HUB_USER}", "scontrol root", "sacctmgr root"):  # fmt: skip
        assert call in ran, (call, sorted(ran))


def test_a_folder_without_slurm_s_commands_stops_the_start(alt_hub):
    """After the hub of the test above: its deploy/hub.sh start with a folder
    that has no Slurm stops before it writes a rule, naming the fix."""
    missing = ALT_ROOT / "nothing"
    missing.mkdir(mode=0o755, exist_ok=True)
    env = {**os.environ, "PORTAL_CONFIG": str(write_settings(ALT_SETTINGS, alt_settings(missing)))}
    rules = SUDOERS.read_text()
    started = deploy("hub.sh", "restart", env=env, check=False)
    assert started.returncode != 0
    assert (
        "sbatch, scancel, squeue, sinfo, scontrol, sacct, sacctmgr, sshare "
        f"not found in {missing}: "
        "set [slurm] bin_dir to the folder of Slurm's commands"
    ) in started.stderr, started.stderr
    assert SUDOERS.read_text() == rules
