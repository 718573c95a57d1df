"""The activity rule that the session reports to the hub's idle culler, and
its reporter, with the server's view, the kernels and the GPUs given by the
test (the real ones: tests/integration/test_idle_culling.py)."""

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from portal.session.activity import (
    ActivityReporter,
    busy_reasons,
    isoformat,
    last_activity,
)

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
HOUR_AGO = NOW - timedelta(hours=1)


@pytest.mark.parametrize(
    "kernels, gpus, expected",
    [
        ([], [], HOUR_AGO),  # nothing: the server's own last activity
        (["idle", "idle"], [None, 4], HOUR_AGO),  # idle kernels, a GPU below the threshold
        (["idle", "busy"], [], NOW),  # a kernel executing, even silently
        (["starting"], [], HOUR_AGO),
        ([], [11], NOW),  # one of the job's GPUs above 10 %
        ([], [10], HOUR_AGO),  # at the threshold is not above it
        ([], [None], HOUR_AGO),  # a GPU whose utilisation NVML cannot read (MIG)
    ],
)
def test_a_session_is_active_while_a_kernel_or_one_of_its_gpus_is_busy(kernels, gpus, expected):
    assert last_activity(NOW, HOUR_AGO, kernels, gpus, 10) == expected


def test_the_last_busy_time_is_remembered_after_the_kernel_goes_idle():
    busy_at = NOW - timedelta(minutes=5)
    # the kernel was busy 5 minutes ago, the server saw nothing for an hour
    assert last_activity(NOW, HOUR_AGO, ["idle"], [], 10, previous=busy_at) == busy_at
    # a later request to the server wins
    assert last_activity(NOW, NOW - timedelta(minutes=1), [], [], 10, previous=busy_at) == (
        NOW - timedelta(minutes=1)
    )


def test_busy_reasons_say_what_keeps_the_session_active():
    assert busy_reasons(["busy", "busy", "idle"], [80, 3], 10) == [
        "2 kernels busy",
        "GPU utilisation 80% (above 10%)",
    ]
    assert busy_reasons(["idle"], [3], 10) == []


def test_activity_goes_to_the_hub_in_its_api_s_form():
    assert isoformat(NOW) == "2026-11-23T12:00:00Z"


def fake_server(kernels, last=HOUR_AGO):
    kernel_manager = SimpleNamespace(list_kernels=lambda: [{"execution_state": s} for s in kernels])
    web_app = SimpleNamespace(last_activity=lambda: last)
    return SimpleNamespace(kernel_manager=kernel_manager, web_app=web_app)


HUB_ENV = {
    "JUPYTERHUB_API_URL": "http://10.200.0.1:8081/hub/api",
    "JUPYTERHUB_USER": "alice",
    "JUPYTERHUB_API_TOKEN": "t0k",
    "JUPYTERHUB_SERVER_NAME": "",
}


def test_the_reporter_is_set_up_from_what_the_hub_and_the_spawner_export():
    env = {
        **HUB_ENV,
        "PORTAL_ACTIVITY_SECONDS": "5",
        "PORTAL_GPU_BUSY_PERCENT": "20",
    }
    reporter = ActivityReporter.from_environ(fake_server([]), dict, environ=env)
    assert reporter.activity_url == "http://10.200.0.1:8081/hub/api/users/alice/activity"
    assert (reporter.interval, reporter.gpu_busy_percent) == (5, 20)
    # no hub, or reports turned off: no reporter
    assert ActivityReporter.from_environ(fake_server([]), dict, environ={}) is None
    off = {**HUB_ENV, "PORTAL_ACTIVITY_SECONDS": "0"}
    assert ActivityReporter.from_environ(fake_server([]), dict, environ=off) is None


async def test_the_reporter_samples_kernels_and_only_the_jobs_gpus(monkeypatch):
    kernels = ["busy"]
    gpus = {"gpus": [], "reason": "No NVIDIA driver on n1 (NVML: NVML Shared Library Not Found)"}
    reporter = ActivityReporter.from_environ(fake_server(kernels), lambda: gpus, environ=HUB_ENV)
    assert await reporter.sample(NOW) == NOW  # a silent busy kernel
    kernels[0] = "idle"
    later = NOW + timedelta(minutes=10)
    # idle for 10 minutes since the kernel was last seen busy: its real last activity
    assert await reporter.sample(later) == NOW
    gpus = {"gpus": [{"index": 2, "utilization": 95}], "reason": ""}
    reporter.read_gpus = lambda: gpus
    assert await reporter.sample(later) == later
    assert reporter.reasons == ["GPU utilisation 95% (above 10%)"]


async def test_the_reporter_posts_only_later_activity(monkeypatch):
    posted = []

    class Client:
        async def fetch(self, request):
            posted.append((request.url, request.headers["Authorization"], request.body))

    monkeypatch.setattr("portal.session.activity.AsyncHTTPClient", Client)
    kernels = ["busy"]
    reporter = ActivityReporter.from_environ(
        fake_server(kernels), lambda: {"gpus": [], "reason": ""}, environ=HUB_ENV
    )
    assert await reporter.report()
    url, auth, body = posted[0]
    assert url.endswith("/users/alice/activity") and auth == "token t0k"
    assert b'"servers": {"": {"last_activity": "' in body
    kernels[0] = "idle"
    assert not await reporter.report()  # nothing later than the last report
    assert len(posted) == 1
    reporter.start()
    await asyncio.sleep(0)
    reporter.stop()


async def test_the_first_report_follows_one_interval_after_the_start(monkeypatch):
    """Not at the server's start, when the hub checks that it answers (the
    hub set the session's activity at its spawn)."""
    posted = []

    class Client:
        async def fetch(self, request):
            posted.append(request.url)

    monkeypatch.setattr("portal.session.activity.AsyncHTTPClient", Client)
    env = {**HUB_ENV, "PORTAL_ACTIVITY_SECONDS": "0.2"}
    reporter = ActivityReporter.from_environ(
        fake_server(["busy"]), lambda: {"gpus": [], "reason": ""}, environ=env
    )
    reporter.start()
    try:
        await asyncio.sleep(0.1)
        assert posted == []
        await asyncio.sleep(0.2)
        assert len(posted) == 1
    finally:
        reporter.stop()
