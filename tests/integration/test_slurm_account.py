"""The first-start bug, on the real slurmctld: a user Slurm heard of before
its Unix account existed is held without a uid, and the hub's start check
says so with the command that fixes it; after `scontrol reconfigure` it
holds the uid. The hub's own account has its uid after `make up`."""

import logging
import subprocess
import uuid

from portal import settings as site_settings
from spawners import hub_config

SETTINGS = site_settings.load()


def run(*argv):
    return subprocess.run(argv, capture_output=True, text=True, check=True)


async def test_the_hubs_account_is_known_by_its_uid(cluster):
    assert await hub_config.slurm_account_problem(SETTINGS, logging.getLogger("test")) == ""


async def test_an_account_made_after_slurm_heard_of_it_is_found_and_fixed(cluster):
    name = f"probe{uuid.uuid4().hex[:6]}"
    settings = {**SETTINGS, "hub": {**SETTINGS["hub"], "user": name}}
    log = logging.getLogger("test")
    run("sacctmgr", "-i", "add", "user", name, "account=portal")
    try:
        run("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name)
        problem = await hub_config.slurm_account_problem(settings, log)
        assert "without a uid" in problem and "scontrol reconfigure" in problem
        run("scontrol", "reconfigure")
        assert await hub_config.slurm_account_problem(settings, log) == ""
    finally:
        subprocess.run(["sacctmgr", "-i", "remove", "user", name], capture_output=True)
        subprocess.run(["userdel", name], capture_output=True)
