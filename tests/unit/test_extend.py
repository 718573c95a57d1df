"""Extending a session's time limit without Slurm: the arithmetic and its
messages (portal.core.timelimit), what the session card offers, whether the
hub can extend at all (portal.extend.ExtensionCheck: the root helper
installed and registered, sudo's rule), and how the hub runs the helper and
passes on its refusal, with the command runner and the files replaced, in
this unit test only, by stand-ins that answer as sudo, Slurm and the helper
would. The operation itself (portal.extend: squeue, Slurm's caps, the
helper behind sudo, the audit) is tested against the real Slurm by
tests/integration/test_extend.py; the helper's own checks by
tests/unit/test_extendhelper.py."""

import asyncio
import doctest
import logging
import os
import pwd
import time
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
from traitlets.config import Config

import portal.core.timelimit
import portal.extend
from portal.core.durations import slurm_time
from portal.core.timelimit import ExtendError, extended_limit, hours_left, parse_hours
from portal.extend import RECHECK_SECONDS, ExtensionCheck, SessionExtender, may_extend
from portal.slurm import commands
from portal.slurm.model import Job
from portal.slurm.parse import SlurmError, max_time_minutes
from portal.store import ProfileStore, default_url
from spawners import hub_config
from spawners.poller import Snapshot
from spawners.spawner import PortalSpawner

SEED = [
    {"name": "pytorch", "display_name": "PyTorch", "environment": "pytorch", "partition": "gpu"},
    {
        "name": "vision",
        "display_name": "Vision team",
        "environment": "pytorch",
        "partition": "gpu",
        "default_hours": 2,
        "max_hours": 4,
    },
]


def test_the_examples_hold():
    assert doctest.testmod(portal.core.timelimit).failed == 0
    assert doctest.testmod(portal.extend).failed == 0


@pytest.mark.parametrize("value", ["x", "1.5", 1.5, "0", 0, "-1", True, None, "²", "", "1e3"])
def test_hours_must_be_a_whole_number_of_one_or_more(value):
    with pytest.raises(ExtendError, match="whole number of hours") as e:
        parse_hours(value)
    assert e.value.status == 400 and e.value.field == "hours"


def test_hours_as_text_or_numbers():
    assert [parse_hours(v) for v in ("3", " 2 ", 1, 24)] == [3, 2, 1, 24]


def test_the_total_never_passes_the_profile():
    assert extended_limit(120, 3, 24, "PyTorch") == 300
    assert extended_limit(120, 2, 4, "Vision team") == 240  # exactly the limit
    with pytest.raises(ExtendError) as e:
        extended_limit(120, 3, 4, "Vision team")
    assert str(e.value) == (
        "3 more hours would make 5 h; profile Vision team allows 4 h: at most 2 more"
    )
    with pytest.raises(ExtendError, match="has 4 h already: it cannot be extended"):
        extended_limit(240, 1, 4, "Vision team")
    # a limit of part hours (set by hand): whole hours only, never past the profile
    assert hours_left(150, 4) == 1 and extended_limit(150, 1, 4, "V") == 210


@pytest.mark.parametrize("minutes", [30, 60, 300, 1439, 1440, 1500, 7 * 1440])
def test_limits_written_as_slurm_reads_them(minutes):
    assert max_time_minutes(slurm_time(minutes)) == minutes


def test_owner_or_admin():
    assert may_extend("alice", "alice", False)
    assert may_extend("carol", "alice", True)
    assert not may_extend("bob", "alice", False)


@pytest.fixture
def store(tmp_path):
    s = ProfileStore(default_url(tmp_path))
    s.upgrade()
    s.seed(SEED)
    return s


def card_spawner(store):
    """A spawner whose session (job 77, profile vision: 4 h at most) has run
    30 min of its 2 h, as the shared poll sees it."""
    c = Config()
    c.PortalSpawner.job_name = "unit-extend-card"
    c.PortalSpawner.uid_min = 0  # this test runs as whoever runs it
    c.PortalSpawner.profile_source = lambda: store.profiles()
    me = pwd.getpwuid(os.getuid()).pw_name
    s = PortalSpawner(config=c, user=SimpleNamespace(name=me, url=f"/user/{me}/"))
    s.load_user_options({"profile": "vision", "gpus": 1, "hours": 2})
    s.job_id = "77"
    end = datetime.now() + timedelta(minutes=90)
    job = Job("77", me, "RUNNING", ("n1",), "", None, end, "gpu:1", "gpu", time_limit=120)
    s.poller.snapshot = Snapshot(jobs={"77": job}, started=1.0, ok=True)
    return s


async def test_the_card_offers_what_the_profile_still_allows(store):
    s = card_spawner(store)
    job = s.poller.job("77")
    info = s.session_info()
    assert (info["time_limit"], info["max_hours"], info["extend_hours"]) == ("2 h", 4, 2)
    assert info["time_left"].startswith("1 h 2")  # about 1 h 29 min
    # extended to the profile's 4 h (as the next poll sees it): nothing more
    s.poller.snapshot = Snapshot(
        jobs={"77": Job(**{**job.__dict__, "time_limit": 240})}, started=2.0, ok=True
    )
    assert (s.session_info()["time_limit"], s.session_info()["extend_hours"]) == ("4 h", 0)


HELPER = "/usr/local/libexec/portal/portal-extend"
ROOTS = SimpleNamespace(st_uid=0, st_mode=0o100755)  # the helper as deploy/hub.sh installs it


class Sudo:
    """Answers ``sudo -n -l HELPER 1 60 60`` as sudo would, with ``answer``:
    True (a rule lets the account: exit 0), False (none does: exit 1, as
    sudo does silently) or a SlurmError (no answer); and refuses any other
    command: the check runs nothing. ``installed`` (the helper's stat, None:
    missing) and ``registered`` stand in for the files deploy/hub.sh writes."""

    def __init__(self, answer=True):
        self.answer = answer
        self.installed = ROOTS
        self.registered = True
        self.calls = []

    async def __call__(self, argv, *, input=None, env=None, timeout=20, with_stderr=False):
        self.calls.append(argv)
        assert argv == ["sudo", "-n", "-l", HELPER, "1", "60", "60"], argv
        assert env is None  # the runner's MINIMAL_ENV, nothing of the hub's
        if isinstance(self.answer, Exception):
            raise self.answer
        if not self.answer:
            raise SlurmError("sudo failed: exit status 1", 1)
        return f"{HELPER} 1 60 60"


@pytest.fixture
def sudo(monkeypatch):
    stand_in = Sudo()
    monkeypatch.setattr(commands, "run", stand_in)
    monkeypatch.setattr(portal.extend, "installed_helper", lambda: stand_in.installed)
    monkeypatch.setattr(portal.extend, "registered", lambda job_name: stand_in.registered)
    return stand_in


def older(check, seconds=RECHECK_SECONDS):
    check.checked_at -= seconds


FIX = "deploy/hub.sh start"


@pytest.mark.parametrize(
    "installed, registered, answer, reason",
    [
        (ROOTS, True, True, None),
        (None, True, True, f"the extension helper {HELPER} is not installed"),
        (
            SimpleNamespace(st_uid=999, st_mode=0o100755),
            True,
            True,
            f"the extension helper {HELPER} is not root's alone, or not executable "
            "(owner uid 999, mode 755)",
        ),
        (
            SimpleNamespace(st_uid=0, st_mode=0o100775),
            True,
            True,
            f"the extension helper {HELPER} is not root's alone, or not executable "
            "(owner uid 0, mode 775)",
        ),
        (
            ROOTS,
            False,
            True,
            "this hub's sessions (portal-jupyter) are not registered with the extension "
            "helper (/etc/portal/extend.d/portal-jupyter.json)",
        ),
        (ROOTS, True, False, f"sudo does not let the hub's account portal run {HELPER}"),
    ],
)
async def test_extensions_need_the_helper_root_s_registered_and_allowed_by_sudo(
    sudo, installed, registered, answer, reason
):
    sudo.installed, sudo.registered, sudo.answer = installed, registered, answer
    problem = await ExtensionCheck("portal", 5, "portal-jupyter").verdict()
    assert (problem.reason if problem else None) == reason
    assert not problem or str(problem) == f"{reason}; an admin fixes it with `{FIX}`"
    # sudo is asked only of a helper installed as it should be
    assert len(sudo.calls) == (1 if installed is ROOTS and registered else 0)


async def test_a_sudo_that_gives_no_answer_is_no_verdict_and_is_asked_again(sudo):
    sudo.answer = SlurmError("sudo gave no answer within 5 s")
    check = ExtensionCheck("portal", 5)
    problem = await check.verdict()
    assert problem is not None and problem.fix == ""
    assert problem.reason == (
        "sudo did not say whether the hub's account portal may run the extension helper "
        "(sudo gave no answer within 5 s); try again later"
    )
    sudo.answer = True
    older(check)
    assert await check.verdict() is None


async def test_a_no_is_asked_again_at_most_every_minute_a_yes_is_kept(sudo):
    sudo.answer = False
    check = ExtensionCheck("portal", 5)
    assert (await check.verdict()).fix == FIX
    sudo.answer = True  # the admin's deploy/hub.sh start
    assert (await check.verdict()).fix == FIX
    assert len(sudo.calls) == 1
    older(check, RECHECK_SECONDS - 5)
    assert await check.verdict() is not None and len(sudo.calls) == 1
    older(check, 5)
    assert await check.verdict() is None and len(sudo.calls) == 2
    older(check, 10 * RECHECK_SECONDS)
    assert await check.verdict() is None and len(sudo.calls) == 2
    # callers at once share one question
    fresh = ExtensionCheck("portal", 5)
    assert await asyncio.gather(fresh.verdict(), fresh.verdict()) == [None, None]
    assert len(sudo.calls) == 3


async def test_a_page_shows_the_last_no_and_has_it_asked_again(sudo):
    check = ExtensionCheck("portal", 5)
    assert check.last_verdict() is None and sudo.calls == []  # never asked: no verdict
    sudo.installed = None
    await check.refresh()
    assert check.last_verdict().reason.endswith("is not installed")
    sudo.installed = ROOTS  # the admin's deploy/hub.sh start
    older(check)
    assert check.last_verdict().reason.endswith("is not installed")  # this page: as it was
    await check._inflight
    assert check.last_verdict() is None and len(sudo.calls) == 1


async def test_the_start_logs_what_to_fix_once(sudo, caplog):
    sudo.answer = False
    check = ExtensionCheck("portal", 5)
    with caplog.at_level(logging.INFO, logger="portal.extend"):
        await check.at_start()
        older(check)
        await check.verdict()  # asked again: not logged again
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        f"Session extensions are unavailable: sudo does not let the hub's account portal run "
        f"{HELPER}. To fix it, run as root on the login node: {FIX}"
    ]
    caplog.clear()
    sudo.answer = True
    with caplog.at_level(logging.INFO, logger="portal.extend"):
        older(check)
        assert await check.verdict() is None
    assert f"Session extensions are available again: portal may run {HELPER}" in caplog.text


async def test_an_unavailable_extension_is_refused_and_changes_nothing(sudo, store):
    sudo.answer = False
    extender = SessionExtender(store, "unit-extend", timeout=5)
    extender.check = ExtensionCheck("portal", 5, "unit-extend")
    with pytest.raises(ExtendError) as e:
        await extender.extend("alice", "77", "pytorch", 1, "alice")
    assert e.value.status == 503
    assert str(e.value) == (
        f"Extensions are unavailable: sudo does not let the hub's account portal run {HELPER}; "
        f"an admin fixes it with `{FIX}`"
    )
    assert [argv[:3] for argv in sudo.calls] == [["sudo", "-n", "-l"]]  # nothing else ran
    assert store.extensions(user="alice") == []


class Helper:
    """The hub's commands of one extension, answered as Slurm and the root
    helper would: the job (2 h, running), its caps (a day), then the
    helper's answer to ``sudo -n HELPER 77 MINUTES MAX``: ``refusal`` (its
    one line, exit 1), sudo's own refusal, or the new limit."""

    def __init__(self, refusal=None):
        self.refusal = refusal
        self.helper_calls = []
        self.sudo_lists = 0

    async def __call__(self, argv, *, input=None, env=None, timeout=20, with_stderr=False):
        assert env is None
        assert argv[0] == "sudo" or os.path.dirname(argv[0]) == commands.BIN_DIR, argv
        argv = [os.path.basename(argv[0]), *argv[1:]]
        if argv[:3] == ["sudo", "-n", "-l"]:
            self.sudo_lists += 1
            return "allowed"
        if argv[:2] == ["squeue", "-h"] and "%i|%l|%e" in argv:
            return "77|2:00:00|2026-11-23T20:00:00"
        if argv[:2] == ["squeue", "-h"]:
            return "gpu|portal"
        if argv[:3] == ["scontrol", "show", "partition"]:
            return "PartitionName=gpu MaxTime=7-00:00:00"
        if argv[0] == "sacctmgr":
            return "1-00:00:00"
        assert argv[:3] == ["sudo", "-n", "--"], argv
        self.helper_calls.append(argv[3:])
        if self.refusal is not None:
            raise SlurmError(f"portal-extend failed: {self.refusal}", 1)
        return "05:00:00"


async def test_the_hub_extends_through_the_root_helper_and_says_why_it_refused(
    sudo, store, monkeypatch
):
    """The hub's side: its own checks pass, then the helper is run with the
    job, the new limit and the profile's most (24 h: 1440 min); its refusal
    reaches the user as its one line, and nothing is audited."""
    helper = Helper(
        "portal-extend: job 77 is COMPLETING, not RUNNING: only a running session is extended"
    )
    monkeypatch.setattr(commands, "run", helper)
    extender = SessionExtender(store, "unit-extend", timeout=5)
    extender.check = ExtensionCheck("portal", 5, "unit-extend")
    with pytest.raises(ExtendError) as e:
        await extender.extend("alice", "77", "pytorch", 3, "alice")
    assert helper.helper_calls == [[HELPER, "77", "300", "1440"]]
    assert e.value.status == 502
    assert str(e.value) == (
        "The time limit was not changed (portal-extend refused: job 77 is COMPLETING, not "
        "RUNNING: only a running session is extended)"
    )
    assert store.extensions(user="alice") == []
    # sudo itself refused (the rule is gone since the check): the check is asked again
    helper.refusal = "sudo: a password is required"
    asked = helper.sudo_lists
    with pytest.raises(ExtendError) as e:
        await extender.extend("alice", "77", "pytorch", 3, "alice")
    assert str(e.value) == (
        "The time limit was not changed (portal-extend failed: sudo: a password is required)"
    )
    assert helper.sudo_lists == asked + 1
    # the vision profile allows 4 h: the helper is told so
    helper.refusal = None
    await extender.extend("alice", "77", "vision", 2, "alice")
    assert helper.helper_calls[-1] == [HELPER, "77", "240", "240"]
    assert [e["to_limit"] for e in store.extensions(user="alice")] == ["04:00:00"]


async def test_the_card_says_why_extensions_are_unavailable(store, monkeypatch):
    s = card_spawner(store)
    check = ExtensionCheck("portal", 5)
    monkeypatch.setattr(ExtensionCheck, "_shared", check)
    assert s.session_info()["extend_unavailable"] == ""  # not asked yet: the form
    check.problem = portal.extend.installation_problem(None, True, "unit-extend-card")
    check.checked_at = time.monotonic()
    info = s.session_info()
    assert info["extend_unavailable"] == (
        f"the extension helper {HELPER} is not installed; an admin fixes it with `{FIX}`"
    )
    assert info["extend_hours"] == 2  # what the profile allows stays as it is


async def test_the_hub_asks_as_it_starts(sudo, monkeypatch, caplog):
    """jupyterhub_config.py's hook: run in the hub's loop once the config is loaded."""
    sudo.registered = False
    monkeypatch.setattr(ExtensionCheck, "_shared", None)
    with caplog.at_level(logging.ERROR):
        hub_config.check_extensions({"slurm": {"command_timeout": 5, "job_name": "site-jobs"}})
        assert sudo.calls == []  # not while the config loads
        for _ in range(100):
            if "Session extensions are unavailable" in caplog.text:
                break
            await asyncio.sleep(0.01)
    check = ExtensionCheck._shared
    assert check.job_name == "site-jobs" and check.problem.fix == FIX
    assert (
        "Session extensions are unavailable: this hub's sessions (site-jobs) are not "
        "registered with the extension helper" in caplog.text
    )
    # the spawner and the service share it, and it keeps the hub's job name
    assert (
        ExtensionCheck.shared(5) is check and ExtensionCheck.shared(5, "x").job_name == "site-jobs"
    )
