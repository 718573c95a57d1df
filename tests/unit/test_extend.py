"""Extending a session's time limit without Slurm: the arithmetic and its
messages (portal.core.timelimit), the operation (portal.extend) with Slurm's
two commands replaced, its audit in the profile store, and what the session
card offers. The real scontrol is exercised by tests/integration/test_extend.py."""

import dataclasses
import doctest
import os
import pwd
import subprocess
import sys
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
from traitlets.config import Config

import portal.core.timelimit
from portal.core.timelimit import ExtendError, extended_limit, hours_left, parse_hours
from portal.extend import SessionExtender, may_extend
from portal.slurm import commands
from portal.slurm.model import Job, format_duration
from portal.slurm.parse import max_time_minutes
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


class FakeSlurm:
    """squeue and scontrol update for one running job of alice's."""

    def __init__(self, limit=120, error=None):
        self.limit, self.error, self.updates = limit, error, []
        self.caps = {"partition gpu": 7 * 1440, "QOS portal": 1440}
        self.calls = 0

    async def wall_caps(self, job_id, timeout):
        self.calls += 1
        return self.caps

    async def running_limit(self, job_id, user, job_name, timeout):
        self.calls += 1
        if job_id != "77" or user != "alice" or job_name != "unit-extend":
            return None
        return self.limit, datetime(2026, 11, 23, 20) + timedelta(minutes=self.limit)

    async def set_time_limit(self, job_id, minutes, timeout):
        if self.error:
            raise commands.SlurmError(f"scontrol failed: {self.error}")
        self.updates.append((job_id, minutes))
        self.limit = minutes


@pytest.fixture
def store(tmp_path):
    s = ProfileStore(default_url(tmp_path))
    s.upgrade()
    s.seed(SEED)
    return s


@pytest.fixture
def slurm(monkeypatch):
    fake = FakeSlurm()
    monkeypatch.setattr(commands, "running_limit", fake.running_limit)
    monkeypatch.setattr(commands, "set_time_limit", fake.set_time_limit)
    monkeypatch.setattr(commands, "wall_caps", fake.wall_caps)
    return fake


async def test_an_extension_sets_the_limit_and_is_audited(store, slurm):
    extender = SessionExtender(store, "unit-extend")
    result = await extender.extend("alice", "77", "pytorch", 3, "alice")
    assert slurm.updates == [("77", 300)]
    assert result["time_limit"] == "05:00:00" and result["previous_time_limit"] == "02:00:00"
    assert result["hours_left"] == 19 and result["end"] == "2026-11-24T01:00:00"
    [audit] = store.extensions()
    assert {k: audit[k] for k in ("actor", "user", "job_id", "profile")} == {
        "actor": "alice", "user": "alice", "job_id": "77", "profile": "pytorch",
    }  # fmt: skip
    assert (audit["from_limit"], audit["to_limit"]) == ("02:00:00", "05:00:00")
    # an admin's, newest first; by user
    await extender.extend("alice", "77", "pytorch", 1, "carol")
    assert [e["actor"] for e in store.extensions()] == ["carol", "alice"]
    assert store.extensions(user="bob") == []


@pytest.mark.parametrize(
    "job_id, profile, hours, status, error",
    [
        ("77", "vision", 3, 400, "at most 2 more"),
        ("78", "vision", 1, 404, "alice has no running session"),
        ("", "vision", 1, 404, "no running session"),
        ("77", "gone", 1, 409, "no longer exists"),
    ],
)
async def test_a_refused_extension_changes_nothing(
    store, slurm, job_id, profile, hours, status, error
):
    with pytest.raises(ExtendError, match=error) as e:
        await SessionExtender(store, "unit-extend").extend("alice", job_id, profile, hours, "alice")
    assert e.value.status == status
    assert slurm.updates == [] and store.extensions() == []


async def test_slurms_own_caps_hold_though_the_hub_is_an_operator(store, slurm):
    """An operator's scontrol update passes the QOS's MaxWall and the
    partition's MaxTime: the extension checks them itself."""
    current = store.get("pytorch")
    store.update(dataclasses.replace(current, max_hours=168), current.revision, "carol")
    slurm.caps["QOS portal"] = 240
    extender = SessionExtender(store, "unit-extend")
    with pytest.raises(
        ExtendError, match=r"5 h in all is more than Slurm's QOS portal allows \(4 h\)"
    ):
        await extender.extend("alice", "77", "pytorch", 3, "alice")
    slurm.caps["QOS portal"] = None  # no cap there: the partition's holds
    slurm.caps["partition gpu"] = 180
    with pytest.raises(ExtendError, match="partition gpu allows"):
        await extender.extend("alice", "77", "pytorch", 3, "alice")
    assert slurm.updates == [] and store.extensions() == []


async def test_without_operator_rights_the_message_says_what_to_grant(store, slurm):
    slurm.error = "Invalid user id for job 77"
    with pytest.raises(ExtendError, match="adminlevel=Operator") as e:
        await SessionExtender(store, "unit-extend").extend("alice", "77", "pytorch", 1, "alice")
    assert e.value.status == 502 and store.extensions() == []


async def test_the_card_offers_what_the_profile_still_allows(store):
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
