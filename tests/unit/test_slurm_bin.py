"""Slurm's commands' folder ([slurm] bin_dir): every command line of
portal.slurm names its command there, the session is told it, the job's PATH
has it, and the hub refuses to start when one of Slurm's commands is not
there. The same against the real cluster, a hub and the root helper:
tests/integration/test_slurm_folder.py."""

import asyncio
import os
from datetime import datetime

import pytest
from traitlets.config import Config

from portal import health
from portal.core.slice import make_slice
from portal.session import jobend
from portal.settings import SettingsError, defaults, merge
from portal.slurm import commands
from portal.slurm.commands import COMMANDS, command, job_path, missing_commands, sbatch_argv
from spawners import hub_config

FOLDER = "/opt/slurm/bin"
LIMITS = {"partition": "gpu", "max_gpus": 4, "cores_per_gpu": 8, "mem_per_gpu_gb": 48,
          "max_hours": 24}  # fmt: skip


@pytest.fixture
def folder(monkeypatch):
    """The hub's folder is FOLDER for this test (what ``use_bin_dir`` sets)."""
    monkeypatch.setattr(commands, "BIN_DIR", FOLDER)
    return FOLDER


@pytest.fixture
def ran(monkeypatch):
    """Every command line ``commands.run`` was given (none runs)."""
    argvs = []

    async def fake_run(argv, **kwargs):  # Slurm's runner, faked in this unit test only
        argvs.append(argv)
        return ""

    monkeypatch.setattr(commands, "run", fake_run)
    return argvs


def test_the_default_is_debian_s_folder():
    assert defaults()["slurm"]["bin_dir"] == "/usr/bin" == commands.BIN_DIR
    assert command("sbatch") == "/usr/bin/sbatch"


def test_sbatch_is_the_folder_s(folder):
    job_slice = make_slice(1, 2, **LIMITS)
    assert sbatch_argv(job_slice, job_name="portal-jupyter")[0] == "/opt/slurm/bin/sbatch"
    assert sbatch_argv(job_slice, test_only=True)[0] == "/opt/slurm/bin/sbatch"
    assert commands.as_user("ada", [command("scancel"), "7"]) == [
        "sudo", "-n", "-u", "ada", "--", "/opt/slurm/bin/scancel", "7"
    ]  # fmt: skip


def test_every_command_the_hub_and_the_service_run_is_the_folder_s(folder, ran):
    since, until = datetime(2026, 1, 1), datetime(2026, 1, 2)

    async def every_command():
        await commands.queue("portal-jupyter", 5)
        await commands.partitions(5)
        await commands.qos_usage(5)
        await commands.qos_gpu_limits(5)
        await commands.end_reason("7", "portal-jupyter", 5)
        await commands.job_fields("7", 5)
        await commands.running_limit("7", "ada", "portal-jupyter", 5)
        await commands.slurm_uids("ada", 5)
        await commands.cancel("ada", "7", "portal-jupyter", 5)
        await commands.listed(["7"], 5)
        await commands.notebook_tasks(["7"], "portal-jupyter-notebook", 5)
        await commands.cancel_as_root(["7"], 5)
        await commands.accounted_jobs(["portal-jupyter"], since, until, "JobID")
        await commands.ping(5)
        await commands.clusters(5)
        await commands.default_qos("ada", "gpu", 5)
        await commands.site_catalog(5)  # six commands
        await commands.expected_start(make_slice(1, 2, **LIMITS), 5)
        await commands.gpu_indices("7", ["n1"], 5)

    asyncio.run(every_command())
    named = [argv[argv.index("--") + 1] if argv[0] == "sudo" else argv[0] for argv in ran]
    assert len(named) == 25 and all(os.path.dirname(n) == FOLDER for n in named), named
    assert {os.path.basename(n) for n in named} <= set(COMMANDS)


def test_health_asks_slurm_from_its_settings_folder(ran, tmp_path):
    settings = merge(defaults(), {"slurm": {"bin_dir": str(tmp_path)}})
    part = asyncio.run(health.slurmctld(settings))
    assert not part.ok and part.detail.startswith("sbatch, scancel, squeue, sinfo, scontrol")
    assert ran == []
    asyncio.run(health.slurmdbd(settings))
    assert ran == [[f"{tmp_path}/sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster"]]


def test_the_session_s_squeue_is_the_folder_it_was_told(ran, monkeypatch):
    monkeypatch.setenv("PORTAL_SLURM_BIN_DIR", FOLDER)
    asyncio.run(jobend.squeue_end("42"))
    assert ran[0][0] == "/opt/slurm/bin/squeue"


def test_the_job_s_path_has_the_folder_first():
    assert job_path(FOLDER) == "/opt/slurm/bin:/usr/local/bin:/usr/bin:/bin"
    assert job_path("/usr/bin") == "/usr/local/bin:/usr/bin:/bin"


def slurm_folder(path, names=COMMANDS):
    path.mkdir(exist_ok=True)
    for name in names:
        (path / name).write_text("#!/bin/sh\n")
        (path / name).chmod(0o755)
    return str(path)


def test_a_missing_command_is_named_with_the_setting(tmp_path):
    assert missing_commands(slurm_folder(tmp_path / "all")) == ""
    some = slurm_folder(tmp_path / "some", [n for n in COMMANDS if n != "sbatch"])
    assert missing_commands(some) == (
        f"sbatch not found in {some}: set [slurm] bin_dir to the folder of Slurm's commands"
    )
    (tmp_path / "some" / "sbatch").write_text("not executable")
    assert missing_commands(some).startswith("sbatch not found in")
    assert missing_commands("opt/slurm/bin") == (
        "[slurm] bin_dir must be an absolute folder, not 'opt/slurm/bin'"
    )


def test_the_hub_refuses_to_start_without_slurm_s_commands(tmp_path, monkeypatch):
    monkeypatch.setattr(commands, "BIN_DIR", commands.BIN_DIR)  # put back after the test
    c = Config()
    with pytest.raises(SettingsError) as refused:
        hub_config.configure_slurm_commands(c, "/opt/slurm/bin")
    assert str(refused.value) == (
        "sbatch, scancel, squeue, sinfo, scontrol, sacct, sacctmgr, sshare "
        "not found in /opt/slurm/bin: "
        "set [slurm] bin_dir to the folder of Slurm's commands"
    )
    assert commands.BIN_DIR == "/usr/bin"
    # a folder that has them: the hub's commands and the sessions' are its
    there = slurm_folder(tmp_path / "bin")
    hub_config.configure_slurm_commands(c, there)
    assert commands.BIN_DIR == there and c.PortalSpawner.slurm_bin_dir == there
    assert c.PortalSpawner.job_path == f"{there}:/usr/local/bin:/usr/bin:/bin"
