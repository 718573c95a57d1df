"""The session's end and time left (portal.session.jobend), without Slurm:
squeue's output read as UTC, one squeue for many tabs, failures as reasons;
and the hub's side, PortalSpawner.warn_minutes exported to the session."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from batchspawner import SlurmSpawner
from traitlets.config import Config

from portal.session import jobend
from portal.session.jobend import (
    DEFAULT_WARN_MINUTES,
    FRESH_AGE,
    JobEnd,
    extend_url,
    parse_end,
    session_model,
    squeue_end,
    warn_minutes,
)
from portal.slurm import commands
from portal.slurm.parse import SlurmError
from spawners.spawner import PortalSpawner
from tests.unit.test_spawner_lifecycle import spawner

END = datetime(2026, 11, 23, 18, 23, 5, tzinfo=UTC)


def test_squeue_end_is_read_as_utc():
    assert parse_end("2026-11-23T18:23:05\n", "42") == (END, "")


@pytest.mark.parametrize(
    "output, reason",
    [
        ("", "Slurm no longer lists job 42: it has ended"),
        ("Unknown", "Slurm gives job 42 no end time (Unknown)"),
        ("N/A", "Slurm gives job 42 no end time (N/A)"),
    ],
)
def test_no_end_time_says_why(output, reason):
    assert parse_end(output, "42") == (None, reason)


class Squeue:
    """Stands in for portal.slurm.commands.run: records the command lines."""

    def __init__(self, answer="2026-11-23T18:23:05", error=None):
        self.answer, self.error, self.calls = answer, error, []

    async def __call__(self, argv, *, input=None, env=None, timeout=20, with_stderr=False):
        self.calls.append((argv, env, timeout))
        if self.error:
            raise self.error
        return self.answer


async def test_squeue_runs_for_the_job_in_utc_with_a_minimal_environment(monkeypatch):
    squeue = Squeue()
    monkeypatch.setattr(commands, "run", squeue)
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "secret")
    assert await squeue_end("42", timeout=7) == (END, "")
    ((argv, env, timeout),) = squeue.calls
    assert argv == ["/usr/bin/squeue", "--noheader", "--jobs", "42", "--format", "%e"]
    assert env == {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
    }
    assert timeout == 7


@pytest.mark.parametrize(
    "error, reason",
    [
        (SlurmError("squeue gave no answer within 10 s"), "squeue gave no answer within 10 s"),
        (
            SlurmError("squeue failed: slurm_load_jobs error: Invalid job id specified"),
            "squeue failed: slurm_load_jobs error: Invalid job id specified",
        ),
        (FileNotFoundError(2, "No such file or directory"), "squeue could not run"),
    ],
)
async def test_a_failed_squeue_is_a_reason_not_an_error(monkeypatch, error, reason):
    monkeypatch.setattr(commands, "run", Squeue(error=error))
    end, why = await squeue_end("42")
    assert end is None and why.startswith(reason)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Reads:
    """A read of the end that takes a while and counts its calls."""

    def __init__(self, *results):
        self.results = list(results)
        self.count = 0

    async def __call__(self, job_id, timeout):
        self.count += 1
        await asyncio.sleep(0.05)
        return self.results[min(self.count, len(self.results)) - 1]


async def test_many_tabs_cost_one_squeue_per_max_age():
    clock, reads = Clock(), Reads((END, ""), (END + timedelta(hours=1), ""))
    job = JobEnd("42", max_age=20, read=reads, clock=clock)
    # ten tabs at once: one read, which all wait for
    results = await asyncio.gather(*(job.get() for _ in range(10)))
    assert reads.count == 1 and set(results) == {(END, "")}
    clock.now += 19
    assert await job.get() == (END, "") and reads.count == 1
    # the session was extended: the next read after max_age sees it
    clock.now += 1
    assert await job.get() == (END + timedelta(hours=1), "") and reads.count == 2


async def test_a_fresh_request_takes_only_a_recent_read():
    clock, reads = Clock(), Reads((END, ""), (END + timedelta(hours=1), ""))
    job = JobEnd("42", max_age=20, read=reads, clock=clock)
    await job.get()
    clock.now += FRESH_AGE - 0.5
    assert await job.get(max_age=FRESH_AGE) == (END, "") and reads.count == 1
    clock.now += 1
    assert await job.get(max_age=FRESH_AGE) == (END + timedelta(hours=1), "")
    assert reads.count == 2


async def test_a_failed_read_is_kept_as_long_as_a_good_one(caplog):
    clock, reads = Clock(), Reads((None, "squeue gave no answer within 10 s"), (END, ""))
    job = JobEnd("42", max_age=20, read=reads, clock=clock)
    assert await job.get() == (None, "squeue gave no answer within 10 s")
    assert "No end time of job 42 from Slurm: squeue gave no answer" in caplog.text
    assert await job.get() == (None, "squeue gave no answer within 10 s") and reads.count == 1
    clock.now += 20
    assert await job.get() == (END, "")


async def test_a_request_that_goes_away_does_not_cancel_the_read():
    reads = Reads((END, ""))
    job = JobEnd("42", read=reads, clock=Clock())
    first = asyncio.ensure_future(job.get())
    second = asyncio.ensure_future(job.get())
    await asyncio.sleep(0.01)
    first.cancel()
    assert await second == (END, "") and reads.count == 1


async def test_outside_a_slurm_job_nothing_is_run():
    reads = Reads((END, ""))
    assert await JobEnd("", read=reads).get() == (
        None,
        "This server does not run in a Slurm job",
    )
    assert reads.count == 0


def test_the_model_counts_seconds_left_from_now():
    now = END - timedelta(minutes=59, seconds=30)
    model = session_model("42", END, "", 15, "/hub/home", now=now)
    assert model == {
        "job_id": "42",
        "end": "2026-11-23T18:23:05+00:00",
        "seconds_left": 3570,
        "warn_minutes": 15,
        "extend_url": "/hub/home",
    }
    ended = session_model("42", END, "", 15, "/hub/home", now=END + timedelta(minutes=1))
    assert ended["seconds_left"] == 0


def test_the_model_without_an_end_says_why():
    model = session_model("42", None, "squeue failed: boom", 15, "/hub/home")
    assert model["end"] is None and model["seconds_left"] is None
    assert model["reason"] == "squeue failed: boom"
    assert session_model("", None, "no job", 15, "/hub/home")["job_id"] is None


@pytest.mark.parametrize(
    "value, minutes",
    [("30", 30), ("0", 0), ("", DEFAULT_WARN_MINUTES), ("-5", 15), ("ten", 15), ("٣", 15)],
)
def test_warn_minutes_from_the_session_environment(value, minutes):
    assert warn_minutes({jobend.WARN_ENV: value}) == minutes
    assert warn_minutes({}) == DEFAULT_WARN_MINUTES


@pytest.mark.parametrize(
    "environ, url",
    [
        ({}, "/hub/home"),
        ({"JUPYTERHUB_BASE_URL": "/"}, "/hub/home"),
        ({"JUPYTERHUB_BASE_URL": "/portal/"}, "/portal/hub/home"),
        (
            {"JUPYTERHUB_BASE_URL": "/", "JUPYTERHUB_HOST": "https://hub.example.org"},
            "https://hub.example.org/hub/home",
        ),
    ],
)
def test_extend_url_is_the_hubs_home(environ, url):
    assert extend_url(environ) == url


def test_the_hub_exports_warn_minutes_to_the_session(monkeypatch):
    monkeypatch.setattr(SlurmSpawner, "get_env", lambda self: {})
    s = spawner("unit-warn")
    assert s.warn_minutes == 15  # deploy/portal.toml [slurm] warn_minutes
    assert PortalSpawner.get_env(s)["PORTAL_WARN_MINUTES"] == "15"

    c = Config()
    c.PortalSpawner.warn_minutes = 90
    c.PortalSpawner.uid_min = 0
    s = PortalSpawner(config=c)
    assert PortalSpawner.get_env(s)["PORTAL_WARN_MINUTES"] == "90"
