"""Extending a session's time limit without Slurm: the arithmetic and its
messages (portal.core.timelimit), what the session card offers, and whether
Slurm lets the hub extend at all (portal.extend.ExtensionCheck, with Slurm's
command runner replaced, in this unit test only, by a stand-in that answers
as slurmctld would). The operation itself (portal.extend: squeue, Slurm's
caps, scontrol, the audit) is tested against the real Slurm by
tests/integration/test_extend.py."""

import asyncio
import doctest
import logging
import os
import pwd
import subprocess
import sys
import time
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
from traitlets.config import Config

import portal.core.timelimit
import portal.extend
from portal import hub_config
from portal.core.timelimit import ExtendError, extended_limit, hours_left, parse_hours
from portal.extend import RECHECK_SECONDS, ExtensionCheck, SessionExtender, may_extend
from portal.slurm import commands
from portal.slurm.model import Job, format_duration
from portal.slurm.parse import SlurmError, max_time_minutes
from portal.store import ProfileStore, default_url
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
    assert max_time_minutes(format_duration(minutes)) == minutes


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


def test_installing_the_card_handler_routes_it_and_the_home_page():
    code = "\n".join(
        [
            "from jupyterhub import handlers",
            "from spawners import session_handlers as h",
            "before = list(handlers.default_handlers)",
            "h.install(None); h.install(None)",  # idempotent
            "routes = {r: c.__name__ for r, c, *_ in handlers.default_handlers}",
            "print(routes[h.ROUTE], routes['/home'], len(handlers.default_handlers) - len(before))",
        ]
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    # the card's two routes: extend, and its GPU figures
    assert run.stdout.split() == ["SessionExtendHandler", "PortalHomeHandler", "2"]


class Slurmctld:
    """Answers ``scontrol show assoc_mgr users=portal flags=users`` as slurmctld
    would, with ``record``: ``(name, level)``, None (no such user) or a
    SlurmError (no answer); and
    refuses any other command: the check changes nothing."""

    def __init__(self, record):
        self.record = record
        self.calls = []

    async def __call__(self, argv, *, input=None, env=None, timeout=20, with_stderr=False):
        self.calls.append(argv)
        assert argv == ["scontrol", "show", "assoc_mgr", "users=portal", "flags=users"], argv
        if isinstance(self.record, Exception):
            raise self.record
        text = "Current Association Manager state\n\n"
        if self.record is None:
            return text + "No users currently cached in Slurm."
        name, level = self.record
        record = f"UserName={name} DefAccount=portal DefWckey=(null) AdminLevel={level}"
        return text + "User Records\n\n" + record


@pytest.fixture
def slurmctld(monkeypatch):
    ctld = Slurmctld(("portal(998)", "Operator"))
    monkeypatch.setattr(commands, "run", ctld)
    return ctld


def older(check, seconds=RECHECK_SECONDS):
    check.checked_at -= seconds


@pytest.mark.parametrize(
    "record, fix",
    [
        (("portal(998)", "Operator"), None),
        (("portal(998)", "Administrator"), None),
        (("portal(4294967294)", "Operator"), "scontrol reconfigure"),
        (("portal(998)", "None"), "sacctmgr -i modify user portal set adminlevel=Operator"),
        (("portal(998)", "Not Set"), "sacctmgr -i modify user portal set adminlevel=Operator"),
        (None, "deploy/slurm.sh sync-users"),
    ],
)
async def test_extensions_need_slurm_to_know_the_hubs_uid_as_an_operator(slurmctld, record, fix):
    slurmctld.record = record
    problem = await ExtensionCheck("portal", 5).verdict()
    assert (problem.fix if problem else None) == fix
    assert not problem or f"an admin fixes it with `{fix}`" in str(problem)


async def test_a_slurm_error_is_no_verdict_and_is_asked_again(slurmctld):
    slurmctld.record = SlurmError("scontrol failed: Unable to contact slurm controller")
    check = ExtensionCheck("portal", 5)
    problem = await check.verdict()
    assert problem is not None and problem.fix == ""
    assert "Unable to contact slurm controller" in problem.reason
    assert problem.reason.endswith("try again later")
    slurmctld.record = ("portal(998)", "Operator")
    older(check)
    assert await check.verdict() is None


async def test_a_no_is_asked_again_at_most_every_minute_a_yes_is_kept(slurmctld):
    slurmctld.record = ("portal(4294967294)", "Operator")
    check = ExtensionCheck("portal", 5)
    assert (await check.verdict()).fix == "scontrol reconfigure"
    slurmctld.record = ("portal(998)", "Operator")  # the admin's scontrol reconfigure
    assert (await check.verdict()).fix == "scontrol reconfigure"
    assert len(slurmctld.calls) == 1
    older(check, RECHECK_SECONDS - 5)
    assert await check.verdict() is not None and len(slurmctld.calls) == 1
    older(check, 5)
    assert await check.verdict() is None and len(slurmctld.calls) == 2
    older(check, 10 * RECHECK_SECONDS)
    assert await check.verdict() is None and len(slurmctld.calls) == 2
    # callers at once share one question
    fresh = ExtensionCheck("portal", 5)
    assert await asyncio.gather(fresh.verdict(), fresh.verdict()) == [None, None]
    assert len(slurmctld.calls) == 3


async def test_a_page_shows_the_last_no_and_has_it_asked_again(slurmctld):
    check = ExtensionCheck("portal", 5)
    assert check.last_verdict() is None and slurmctld.calls == []  # never asked: no verdict
    slurmctld.record = None
    await check.refresh()
    assert check.last_verdict().fix == "deploy/slurm.sh sync-users"
    slurmctld.record = ("portal(998)", "Operator")  # the admin's sync-users
    older(check)
    assert check.last_verdict().fix == "deploy/slurm.sh sync-users"  # this page: as it was
    await check._inflight
    assert check.last_verdict() is None and len(slurmctld.calls) == 2


async def test_the_start_logs_what_to_fix_once(slurmctld, caplog):
    slurmctld.record = ("portal(4294967294)", "Operator")
    check = ExtensionCheck("portal", 5)
    with caplog.at_level(logging.INFO, logger="portal.extend"):
        await check.at_start()
        older(check)
        await check.verdict()  # asked again: not logged again
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        "Session extensions are unavailable: Slurm does not know the uid of the hub's "
        "account portal. To fix it, run as root on the login node: scontrol reconfigure"
    ]
    caplog.clear()
    slurmctld.record = ("portal(998)", "Operator")
    with caplog.at_level(logging.INFO, logger="portal.extend"):
        older(check)
        assert await check.verdict() is None
    assert "available again" in caplog.text


async def test_an_unavailable_extension_is_refused_and_changes_nothing(slurmctld, store):
    slurmctld.record = ("portal(4294967294)", "Operator")
    extender = SessionExtender(store, "unit-extend", timeout=5)
    extender.check = ExtensionCheck("portal", 5)
    with pytest.raises(ExtendError) as e:
        await extender.extend("alice", "77", "pytorch", 1, "alice")
    assert e.value.status == 503
    assert str(e.value) == (
        "Extensions are unavailable: Slurm does not know the uid of the hub's account portal; "
        "an admin fixes it with `scontrol reconfigure`"
    )
    assert [argv[:3] for argv in slurmctld.calls] == [["scontrol", "show", "assoc_mgr"]]
    assert store.extensions(user="alice") == []


async def test_the_card_says_why_extensions_are_unavailable(store, monkeypatch):
    s = card_spawner(store)
    check = ExtensionCheck("portal", 5)
    monkeypatch.setattr(ExtensionCheck, "_shared", check)
    assert s.session_info()["extend_unavailable"] == ""  # not asked yet: the form
    check.problem = portal.extend.extension_problem(None, "portal")
    check.checked_at = time.monotonic()
    info = s.session_info()
    assert info["extend_unavailable"] == (
        "Slurm has no user portal (the hub's account); "
        "an admin fixes it with `deploy/slurm.sh sync-users`"
    )
    assert info["extend_hours"] == 2  # what the profile allows stays as it is


async def test_the_hub_asks_as_it_starts(slurmctld, monkeypatch, caplog):
    """jupyterhub_config.py's hook: run in the hub's loop once the config is loaded."""
    slurmctld.record = ("portal(998)", "None")
    check = ExtensionCheck("portal", 5)
    monkeypatch.setattr(ExtensionCheck, "_shared", check)
    with caplog.at_level(logging.ERROR):
        hub_config.check_extensions({"slurm": {"command_timeout": 5}})
        assert slurmctld.calls == []  # not while the config loads
        for _ in range(100):
            if "Session extensions are unavailable" in caplog.text:
                break
            await asyncio.sleep(0.01)
    assert len(slurmctld.calls) == 1 and check.problem.fix.startswith("sacctmgr")
    assert "Session extensions are unavailable: the hub's account portal" in caplog.text
