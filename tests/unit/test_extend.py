"""Extending a session's time limit without Slurm: the arithmetic and its
messages (portal.core.timelimit) and what the session card offers. The
operation itself (portal.extend: squeue, Slurm's caps, scontrol, the audit) is
tested against the real Slurm by tests/integration/test_extend.py."""

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
from portal.extend import may_extend
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


@pytest.fixture
def store(tmp_path):
    s = ProfileStore(default_url(tmp_path))
    s.upgrade()
    s.seed(SEED)
    return s


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
