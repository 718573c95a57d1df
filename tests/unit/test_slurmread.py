"""The read helper portal-slurm-read (portal/helper/slurmread.py): which
command lines it runs (every read of its jobs the hub makes, word for
word) and which it refuses (anything else); how the hub routes its reads
([slurm] private_data) and how it reads Slurm's PrivateData."""

import asyncio
from datetime import datetime
from types import SimpleNamespace

import pytest

from portal import check, usage
from portal.core import usernames
from portal.helper import extend, slurmread
from portal.helper.slurmread import Refused, main, read, shape_of
from portal.settings import SettingsError
from portal.slurm import commands, parse

SESSION, NOTEBOOK = "portal-jupyter", "portal-jupyter-notebook"
NAMES = {SESSION, NOTEBOOK}
BIN_DIR = "/opt/slurm/bin"


@pytest.fixture
def through_helper(monkeypatch):
    """The hub's account (not root) with [slurm] private_data = "helper":
    every command line ``commands.run`` was given, Slurm answering ""."""
    ran = []

    async def fake_run(argv, **kwargs):
        ran.append(argv)
        return ""

    monkeypatch.setattr(commands, "run", fake_run)
    monkeypatch.setattr(commands.os, "geteuid", lambda: 1000)
    commands.use_private_data("helper")
    yield ran
    commands.use_private_data("direct")


def hub_reads():
    """Every read of its jobs the hub and the admin service make."""
    since, until = datetime(2026, 1, 1), datetime(2026, 1, 2, 12, 30)

    async def every_read():
        await commands.queue(SESSION, 5)
        await commands.running_limit("7", "J.Smith", SESSION, 5)
        await commands.gpu_indices("7", ["n1"], 5)
        await commands.end_reason("7", SESSION, 5)
        await commands.notebook_tasks(["7", "12"], NOTEBOOK, 5)
        await usage.accounted(SESSION, since, until)
        await usage.accounted(SESSION, since, until, user="alice")
        await commands.shares(5)
        try:
            await commands.wall_caps("7", SESSION, 5)
        except parse.SlurmError:
            pass  # squeue's answer is "" here: the read is made, the rest is not

    asyncio.run(every_read())


def test_every_read_of_the_hub_s_jobs_goes_through_the_helper_and_fits_a_shape(through_helper):
    hub_reads()
    assert len(through_helper) == 10
    shapes = []
    for argv in through_helper:
        assert argv[:4] == ["sudo", "-n", "--", slurmread.INSTALLED_AT], argv
        shapes.append(shape_of(argv[4:], NAMES))
    assert sorted(shapes) == sorted(slurmread.SHAPES), shapes


def test_the_other_reads_and_root_s_run_as_they_are(through_helper, monkeypatch):
    async def others():
        await commands.partitions(5)
        await commands.qos_usage(5)
        await commands.qos_gpu_limits(5)
        await commands.default_qos("alice", "gpu", 5)
        await commands.slurm_uids("alice", 5)
        await commands.associations(5)
        await commands.default_accounts(5)
        await commands.qos_limits(5)
        await commands.reservations(5)
        await commands.partition_policies(5)

    asyncio.run(others())
    assert not [argv for argv in through_helper if argv[0] == "sudo"]
    monkeypatch.setattr(commands.os, "geteuid", lambda: 0)  # root sees every job
    asyncio.run(commands.queue(SESSION, 5))
    assert through_helper[-1][0] == commands.command("squeue")


def test_direct_reads_run_as_the_hub_s_account(through_helper):
    commands.use_private_data("direct")
    asyncio.run(commands.queue(SESSION, 5))
    assert through_helper == [[commands.command("squeue"), "--noheader", "--name", SESSION,
                               "--format", commands.SQUEUE_FORMAT]]  # fmt: skip


@pytest.mark.parametrize(
    ("config", "hidden"),
    [
        ("PrivateData             = jobs,usage\n", True),
        ("PrivateData = usage\nSlurmDBD configuration:\nPrivateData = jobs\n", True),
        ("PrivateData             = usage\n", False),
        ("PrivateData             = none\n", False),
        ("ClusterName = x\n", False),
    ],
)
def test_auto_reads_through_the_helper_when_private_data_names_jobs(
    through_helper, monkeypatch, config, hidden
):
    asked = []

    async def fake_run(argv, **kwargs):
        asked.append(argv[1:])
        return config if argv[1:] == ["show", "config"] else ""

    monkeypatch.setattr(commands, "run", fake_run)
    commands.use_private_data("auto")
    assert asyncio.run(commands.reads_through_helper(5)) is hidden
    assert asyncio.run(commands.reads_through_helper(5)) is hidden
    assert asked == [["show", "config"], ["show", "config"]]  # scontrol's, sacctmgr's; once


@pytest.mark.parametrize(
    ("config", "usage_hidden"),
    [
        ("PrivateData             = jobs,usage\n", True),
        ("PrivateData = none\nSlurmDBD configuration:\nPrivateData = usage\n", True),
        ("PrivateData             = jobs\n", False),
    ],
)
def test_auto_reads_sshare_through_the_helper_when_private_data_names_usage(
    through_helper, monkeypatch, config, usage_hidden
):
    async def fake_run(argv, **kwargs):
        through_helper.append(argv)
        return config if argv[1:] == ["show", "config"] else ""

    monkeypatch.setattr(commands, "run", fake_run)
    commands.use_private_data("auto")
    asyncio.run(commands.shares(5))
    assert (through_helper[-1][0] == "sudo") is usage_hidden
    assert through_helper[-1][-5:] == ["-a", "-n", "-P", "-o", parse.SHARE_FIELDS]
    assert through_helper[-1][-6].endswith("sshare")


def test_auto_reads_through_the_helper_while_slurm_does_not_say(through_helper, monkeypatch):
    async def down(argv, **kwargs):
        raise parse.SlurmError("scontrol failed: Unable to contact slurm controller")

    monkeypatch.setattr(commands, "run", down)
    commands.use_private_data("auto")
    assert asyncio.run(commands.reads_through_helper(5)) is True


def test_a_site_that_turns_private_data_on_is_read_through_the_helper_after_a_recheck(
    through_helper, monkeypatch, caplog
):
    """The shared poll's catalog read asks again: no hub restart."""
    config = ["PrivateData = none\n"]

    async def fake_run(argv, **kwargs):
        return config[0] if argv[1:] == ["show", "config"] else ""

    monkeypatch.setattr(commands, "run", fake_run)
    commands.use_private_data("auto")
    assert asyncio.run(commands.reads_through_helper(5, "usage")) is False
    config[0] = "PrivateData = jobs,usage\n"
    assert asyncio.run(commands.reads_through_helper(5, "usage")) is False  # asked once
    assert asyncio.run(commands.recheck_private_data(5)) == {"jobs", "usage"}
    assert asyncio.run(commands.reads_through_helper(5, "usage")) is True
    assert "PrivateData now hides jobs, usage: the portal reads through portal-slurm-read" in (
        caplog.text
    )
    commands.use_private_data("helper")
    assert asyncio.run(commands.recheck_private_data(5)) is None  # the setting says


def test_a_wrong_private_data_setting_is_refused_naming_it():
    with pytest.raises(SettingsError, match=r"\[slurm\] private_data must be one of auto, helper"):
        commands.use_private_data("yes")


def test_the_helper_s_formats_and_patterns_are_the_hub_s():
    assert slurmread.QUEUE_FORMAT == commands.SQUEUE_FORMAT
    assert slurmread.TASK_FIELDS == parse.SACCT_TASK_FIELDS
    assert slurmread.USAGE_FIELDS == usage.FIELDS
    assert slurmread.SHARE_FIELDS == parse.SHARE_FIELDS
    assert slurmread.PATTERNS["USER"].pattern == usernames.SAFE
    hub = SimpleNamespace(job_name=SESSION)
    assert slurmread.job_names([hub]).keys() == NAMES | {SESSION + check.JOB_SUFFIX}


QUEUE = ["squeue", "--noheader", "--name", SESSION, "--format", commands.SQUEUE_FORMAT]
END = ["sacct", "-j", "7", "--name", SESSION, "-X", "-n", "-P", "-o", "State,ExitCode,Reason"]


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["scancel", "7"], "'scancel' is none of the hub's reads"),
        (["scancel", f"--name={SESSION}", "7"], "'scancel' is none of the hub's reads"),
        (["scontrol", "update", "JobId=7", "TimeLimit=9:00:00"], "word 1 'update' is not 'show'"),
        (["scontrol", "show", "job", "-d", "7", "extra"], "word 5 'extra' is one too many"),
        (["scontrol", "show", "job", "-d", "1;rm"], "word 4 '1;rm' is not a ID"),
        (["scontrol", "show", "job", "-d", "-7"], "word 4 '-7' is not a ID"),
        (["scontrol", "show", "job", "-d"], "ID is missing"),
        (["/usr/bin/squeue", *QUEUE[1:]], "'/usr/bin/squeue' is none of the hub's reads"),
        (["../squeue", *QUEUE[1:]], "'../squeue' is none of the hub's reads"),
        ([*QUEUE[:5], "%i|%u|%T|%N|%r|%S|%e|%b|%P|%l|%o"], "word 5"),
        ([*QUEUE[:5], "%i|%u|%T|%N|%r|%S|%e|%b|%P|%l", "--json"], "one too many"),
        (
            ["squeue", "--noheader", "--name", "other-work", "--format", commands.SQUEUE_FORMAT],
            "word 3 'other-work' is not the name of the portal's jobs",
        ),
        (
            [
                "squeue",
                "--noheader",
                "--name",
                f"{SESSION},other",
                "--format",
                commands.SQUEUE_FORMAT,
            ],
            "is not the name of the portal's jobs",
        ),
        (
            ["squeue", "--noheader", "--name=" + SESSION, "--format", commands.SQUEUE_FORMAT],
            "word 2",
        ),
        ([*END[:9], "State,ExitCode,Reason,Comment"], "word 9"),
        ([*END, "-u", "alice"], "word 10 '-u' is one too many"),
        (
            ["sacct", "-j", "7", "--name", SESSION, "-X", "-n", "-P", "-o", "State", "-u", "x"],
            "word 9 'State'",
        ),
        (
            [
                "sacct",
                "-a",
                "-n",
                "-P",
                "--name",
                SESSION,
                "-S",
                "now",
                "-E",
                "2026-01-01T00:00:00",
                "-o",
                slurmread.USAGE_FIELDS,
            ],
            "word 7 'now' is not a TIME",
        ),
        (
            [
                "sacct",
                "-a",
                "-n",
                "-P",
                "--name",
                SESSION,
                "-S",
                "2026-01-01T00:00:00",
                "-E",
                "2026-01-02T00:00:00",
                "-o",
                slurmread.USAGE_FIELDS,
                "-u",
                "--help",
            ],
            "word 13 '--help' is not a USER",
        ),
        ([], "usage: portal-slurm-read"),
        (["sshare", "-a", "-n", "-P", "-o", "Account,User,RawUsage"], "word 5"),
        (["sshare", "-a", "-n", "-P", "-o", parse.SHARE_FIELDS, "-u", "bob"], "one too many"),
        (["sshare", "-n", "-P"], "word 1"),
    ],
)
def test_a_command_line_of_no_shape_is_refused(argv, why):
    with pytest.raises(Refused, match=None) as refused:
        shape_of(argv, NAMES)
    assert why in str(refused.value), str(refused.value)


class FakeSystem:
    """Slurm and the registrations as the helper sees them (one hub)."""

    registry = "/etc/portal/extend.d"

    def __init__(self, listed=(("7", "20001", SESSION),)):  # root's squeue: id, uid, name
        self.ran = []
        self.listed = listed

    def hubs(self):
        return [SimpleNamespace(job_name=SESSION, bin_dir=BIN_DIR, uid_min=10000, uid_max=60000)]

    def folders(self):
        return [BIN_DIR]

    def uid(self, user):
        return {"alice": 20001, "bob": 20002, "root": 0, "slurm": 64030}.get(user)

    def slurm(self, bin_dir, *argv):
        self.ran.append((bin_dir, list(argv)))
        if argv[0] == "sshare":
            return SSHARE
        if argv[0] == "squeue" and argv[-2] == "-o" and argv[-1].startswith("%i"):
            fields = {"%i": 0, "%U": 1, "%j": 2}
            columns = [fields[f] for f in argv[-1].split("|")]
            return "".join("|".join(job[c] for c in columns) + "\n" for job in self.listed)
        if argv[0] == "squeue" and "-j" in argv and argv[argv.index("-j") + 1] == "99":
            raise extend.Refused("squeue failed: slurm_load_jobs error: Invalid job id specified")
        return "out\n"


def test_a_read_runs_from_the_registered_folder_and_prints_slurm_s_output(capsys):
    system = FakeSystem()
    assert main(QUEUE, system) == 0
    assert capsys.readouterr().out == "out\n"
    assert system.ran == [(BIN_DIR, QUEUE)]


def test_scontrol_shows_a_job_only_when_root_s_squeue_lists_it_under_the_portal_s_names():
    system = FakeSystem()
    assert read(["scontrol", "show", "job", "-d", "7"], system) == "out\n"
    names = f"{SESSION},{SESSION}-check,{NOTEBOOK}"
    assert system.ran[0] == (
        BIN_DIR, ["squeue", "-h", "-j", "7", "--name", names, "-o", "%i|%U|%j"]
    )  # fmt: skip
    other = FakeSystem(listed=())
    with pytest.raises(Refused, match="job 8 is none of the portal's jobs"):
        read(["scontrol", "show", "job", "-d", "8"], other)
    assert [argv[0] for _, argv in other.ran] == ["squeue"]  # scontrol never ran


@pytest.mark.parametrize(
    "listed",
    [
        ("7", "0", SESSION),  # root's job named as the portal's sessions
        ("7", "999", f"{SESSION}-check"),  # a system account's, below uid_min
        ("7", "60001", SESSION),  # above uid_max
        ("17", "20001", SESSION),  # another job
    ],
)
def test_scontrol_shows_no_job_of_a_user_outside_the_hub_s_uids(listed):
    """Any Slurm user may name a job as the portal's; under PrivateData its
    details (command, folder, comment) stay hidden unless its user is one of
    the hub's (the registration's uid_min..uid_max)."""
    system = FakeSystem(listed=[listed])
    with pytest.raises(Refused, match="job 7 is none of the portal's jobs"):
        read(["scontrol", "show", "job", "-d", "7"], system)
    assert [argv[0] for _, argv in system.ran] == ["squeue"]


SSHARE = """\
root|||cpu=60,gres/gpu=12
 root|root|1.000000|cpu=0,gres/gpu=0
 lab-nlp||0.400000|cpu=60,gres/gpu=12
  lab-nlp|bob|0.333333|cpu=60,gres/gpu=12
  lab-nlp|slurm|0.333333|cpu=0,gres/gpu=0
  lab-nlp|ghost|0.333333|cpu=0,gres/gpu=0
 portal||0.500000|cpu=0,gres/gpu=0
  portal|alice|0.600000|cpu=0,gres/gpu=0
"""


def test_sshare_shows_the_accounts_and_the_portal_s_users_alone(capsys):
    """Under PrivateData=usage the helper runs the catalog's sshare as
    root and prints the accounts' lines and those of the users in the
    registered hub's uids: not root's, a system account's, or a name NSS
    does not know."""
    system = FakeSystem()
    argv = ["sshare", "-a", "-n", "-P", "-o", parse.SHARE_FIELDS]
    assert main(argv, system) == 0
    assert capsys.readouterr().out == (
        "root|||cpu=60,gres/gpu=12\n lab-nlp||0.400000|cpu=60,gres/gpu=12\n"
        "  lab-nlp|bob|0.333333|cpu=60,gres/gpu=12\n portal||0.500000|cpu=0,gres/gpu=0\n"
        "  portal|alice|0.600000|cpu=0,gres/gpu=0\n"
    )
    assert system.ran == [(BIN_DIR, argv)]
    assert sorted(parse.parse_shares(read(argv, system))) == [
        ("lab-nlp", ""), ("lab-nlp", "bob"), ("portal", ""), ("portal", "alice"), ("root", ""),
    ]  # fmt: skip


def test_refusals_and_slurm_s_failures_are_one_line_and_their_exit_status(capsys):
    system = FakeSystem()
    assert main(["scancel", "7"], system) == 2
    assert capsys.readouterr().err == (
        "portal-slurm-read: refused: 'scancel' is none of the hub's reads (squeue, scontrol, "
        "sacct, sshare)\n"
    )
    assert system.ran == []
    argv = ["squeue", "-h", "-j", "99", "-n", SESSION, "-o", "%P|%q"]
    assert main(argv, system) == 1
    assert "Invalid job id" in capsys.readouterr().err


def test_without_a_registered_hub_nothing_runs(capsys):
    system = FakeSystem()
    system.hubs = lambda: []
    assert main(QUEUE, system) == 2
    assert "no hub registered its sessions" in capsys.readouterr().err
    assert system.ran == []


def test_it_runs_as_root_only(capsys, monkeypatch):
    monkeypatch.setattr(slurmread.os, "geteuid", lambda: 1000)
    assert main(QUEUE) == 2
    assert "runs as root only" in capsys.readouterr().err


def test_the_hub_says_at_start_how_it_reads_its_jobs_and_the_fix(monkeypatch):
    from spawners import hub_config

    said = []
    log = SimpleNamespace(info=lambda *a: said.append(a[0] % a[1:]),
                          error=lambda *a: said.append(a[0] % a[1:]))  # fmt: skip
    allowed = {"value": False}

    async def through(timeout):
        return True

    async def may(timeout):
        return allowed["value"]

    monkeypatch.setattr(commands, "reads_through_helper", through)
    monkeypatch.setattr(commands, "may_run_read_helper", may)
    settings = {"slurm": {"command_timeout": 5, "private_data": "auto"}, "hub": {"user": "jhub"}}
    problem = asyncio.run(hub_config.private_data_problem(settings, log))
    assert problem == (
        f"the hub's account jhub cannot run {slurmread.INSTALLED_AT} (sudo has no rule for it), "
        "and Slurm's PrivateData hides its sessions' jobs: run portal setup as root"
    )
    allowed["value"] = True
    assert asyncio.run(hub_config.private_data_problem(settings, log)) == ""
    assert said[-1].startswith(
        f"[slurm] private_data = 'auto': the hub reads its jobs through {slurmread.INSTALLED_AT}"
    )
