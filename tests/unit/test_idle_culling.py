"""Idle culling on the hub's side: the [culling] settings, the culler as a
hub service, a profile's own idle minutes, what the spawner tells the session,
and a stop by the culler as the home page shows it."""

import dataclasses
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from batchspawner import SlurmSpawner
from traitlets.config import Config

import spawners
from portal import settings
from portal.core.durations import describe_seconds
from portal.core.idle import (
    CULLER_SERVICE,
    check_culling,
    check_profile_idle,
    cull_arbiter,
    session_idle_seconds,
)
from portal.core.profiles import Profile, ProfileError, profile_from_dict
from portal.core.slice import make_slice
from spawners.hub_config import configure_culling
from spawners.spawner import PortalSpawner

CULLING = settings.defaults()["culling"]


def test_the_defaults():
    assert CULLING == {
        "enabled": True,
        "idle_minutes": 120.0,
        "every_seconds": 60,
        "gpu_busy_percent": 10,
        "activity_seconds": 60,
    }


def test_a_site_may_write_whole_or_fractional_minutes(tmp_path, monkeypatch):
    site = tmp_path / "portal.toml"
    monkeypatch.setenv("PORTAL_CONFIG", str(site))
    site.write_text("[culling]\nidle_minutes = 60\n")
    assert settings.load()["culling"]["idle_minutes"] == 60.0
    site.write_text("[culling]\nidle_minutes = 0.5\nactivity_seconds = 5\n")
    assert settings.load()["culling"]["idle_minutes"] == 0.5
    site.write_text("[culling]\nidle_minutes = '2h'\n")
    with pytest.raises(settings.SettingsError, match="idle_minutes must be float"):
        settings.load()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"idle_minutes": 0.0}, "less than a second"),
        ({"idle_minutes": 1.0, "activity_seconds": 60}, "activity_seconds .60. must be less"),
        ({"every_seconds": 0}, "every_seconds must be at least 1"),
        ({"gpu_busy_percent": 101}, "between 0 and 100"),
    ],
)
def test_settings_that_cannot_work_are_refused_at_start(change, message):
    with pytest.raises(ValueError, match=message):
        check_culling({**CULLING, **change})
    check_culling(CULLING)


def hub_config(culling, internal_tls=False):
    c = Config()
    c.JupyterHub.services = [{"name": "portal"}]
    c.JupyterHub.load_roles = []
    site = settings.merge(
        settings.defaults(),
        {"culling": culling, "tls": {"internal": internal_tls}, "hub": {"state_dir": "/s"}},
    )
    configure_culling(c, site)
    return c


def test_the_culler_runs_as_a_hub_service_with_the_sites_timeout():
    c = hub_config({"idle_minutes": 90.0, "every_seconds": 30})
    culler = c.JupyterHub.services[1]
    assert culler["name"] == CULLER_SERVICE
    # ended with the hub (SIGTERM when the hub's process ends)
    assert culler["command"][:4] == ["/usr/bin/setpriv", "--pdeathsig", "TERM", "--"]
    assert culler["command"][5:] == [
        "-m",
        "jupyterhub_idle_culler",
        "--timeout=5400",
        "--cull-every=30",
        f"--config={Path(spawners.__file__).parent / 'idle_culler_config.py'}",
    ]
    # with the hub's internal_ssl, it calls the hub with the hub's internal certificate
    c = hub_config({"idle_minutes": 90.0, "every_seconds": 30}, internal_tls=True)
    assert c.JupyterHub.services[1]["command"][10:] == [
        "--ssl-enabled=true",
        "--internal-certs-location=/s/internal-ssl",
    ]
    (role,) = c.JupyterHub.load_roles
    assert role["services"] == [CULLER_SERVICE]
    assert set(role["scopes"]) == {
        "list:users",
        "read:users:activity",
        "read:servers",
        "admin:server_state",  # each session's own idle limit
        "delete:servers",
    }
    assert c.PortalSpawner.idle_timeout == 5400
    assert c.PortalSpawner.activity_interval == 60


def test_the_culler_loads_the_arbiter_from_its_configuration_file():
    code = (
        "from jupyterhub_idle_culler import IdleCuller\n"
        "app = IdleCuller()\n"
        f"app.load_config_file({str(Path(spawners.__file__).parent / 'idle_culler_config.py')!r})\n"
        "print(app.cull_arbiter_hook.__module__, app.cull_arbiter_hook.__name__)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["portal.core.idle", "cull_arbiter"]


def test_no_culler_when_culling_is_off():
    c = hub_config({"enabled": False})
    assert [s["name"] for s in c.JupyterHub.services] == ["portal"]
    assert c.JupyterHub.load_roles == []
    assert c.PortalSpawner.idle_timeout == 0


def test_a_profile_may_idle_longer_than_the_site_never_shorter():
    base = {"name": "p", "display_name": "P", "environment": "pytorch", "partition": "gpu"}
    assert profile_from_dict(base).idle_minutes == 0
    long = profile_from_dict({**base, "idle_minutes": 480})
    check_profile_idle(long, CULLING)
    with pytest.raises(ProfileError, match="idle_minutes 30 is less than the site's 120") as e:
        check_profile_idle(dataclasses.replace(long, idle_minutes=30), CULLING)
    assert e.value.field == "idle_minutes"
    check_profile_idle(dataclasses.replace(long, idle_minutes=30), {**CULLING, "enabled": False})
    for bad in (-1, "60", True, 10**7):
        with pytest.raises(ProfileError) as e:
            profile_from_dict({**base, "idle_minutes": bad})
        assert e.value.field == "idle_minutes"
    assert session_idle_seconds(7200, 480) == 28800
    assert session_idle_seconds(7200, 0) == session_idle_seconds(7200, 30) == 7200
    assert [describe_seconds(s) for s in (7200, 28800, 5400, 600, 30)] == [
        "2 h",
        "8 h",
        "1 h 30 min",
        "10 min",
        "30 s",
    ]


def spawner(profile_minutes=0):
    c = Config()
    c.PortalSpawner.idle_timeout = 7200
    c.PortalSpawner.gpu_busy_percent = 20
    s = PortalSpawner(config=c, user=SimpleNamespace(name="alice"))
    s.profile = Profile("p", "P", "gpu", "pytorch", idle_minutes=profile_minutes)
    return s


def test_the_session_is_told_its_threshold_and_interval_the_culler_its_limit(monkeypatch):
    monkeypatch.setattr(SlurmSpawner, "get_env", lambda self: {})  # the hub's part
    env = spawner(profile_minutes=240).get_env()
    assert env["PORTAL_ACTIVITY_SECONDS"] == "60"
    assert env["PORTAL_GPU_BUSY_PERCENT"] == "20"
    assert "PORTAL_IDLE_EXTRA_SECONDS" not in env  # the culler holds it to its limit
    # the session's reporter stands in for JupyterHub's own (off), and only
    # while it reports
    assert env["JUPYTERHUB_ACTIVITY_INTERVAL"] == "0"
    quiet = spawner()
    quiet.activity_interval = 0
    assert "JUPYTERHUB_ACTIVITY_INTERVAL" not in quiet.get_env()
    one_gpu = make_slice(1, 2, partition="gpu", max_gpus=4, cores_per_gpu=8,
                         mem_per_gpu_gb=48, max_hours=24)  # fmt: skip
    s = spawner(profile_minutes=240)
    s.job_slice, s.own_idle_limit = one_gpu, True  # as start() sets them
    assert s.get_state()["idle_seconds"] == 14400  # 4 h allowed, the culler's 2 h
    restored = spawner(profile_minutes=240)
    restored.load_state(s.get_state())  # a hub restart keeps the limit
    assert restored.get_state()["idle_seconds"] == 14400
    s = spawner()
    s.job_slice, s.own_idle_limit = one_gpu, True
    assert s.get_state()["idle_seconds"] == 7200
    # a job started before the arbiter shifts its own reports: the culler's timeout only
    older = spawner(profile_minutes=240)
    older.load_state({"slice": dataclasses.asdict(one_gpu), "job_id": "7"})
    assert "idle_seconds" not in older.get_state()


def test_the_culler_holds_each_session_to_its_own_limit():
    idle = timedelta(hours=3)
    server = {"name": "", "state": {"idle_seconds": 14400}}
    assert not cull_arbiter(inactive=idle, inactive_limit=7200, server=server)
    assert cull_arbiter(inactive=idle, inactive_limit=7200, server={"state": {}})
    assert cull_arbiter(inactive=idle, inactive_limit=7200, server={"state": None})
    odd = {"state": {"idle_seconds": "forever"}}  # not a number: the culler's timeout
    assert cull_arbiter(inactive=idle, inactive_limit=7200, server=odd)


async def test_a_stop_by_the_culler_shows_on_the_home_page_and_cancels_the_job():
    s = spawner()
    s.job_id, s.ip = "4242", "n1"
    cancelled = []

    async def cancel():
        cancelled.append(s.job_id)

    s.cancel_batch_job = cancel
    s.stop_reason = "idle"  # spawners.handlers: a DELETE by the culler
    await s.stop(now=True)
    s.clear_state()
    assert cancelled == ["4242"]
    ended = s.ended_info()
    assert ended["why"] == "stopped after 2 h idle"
    assert (ended["job_id"], ended["nodes"], ended["reason"]) == ("4242", ["n1"], "")
    # kept over a hub restart, until the next start
    restored = spawner()
    restored.load_state(s.get_state())
    assert restored.ended_info()["why"] == "stopped after 2 h idle"
    # a user's own stop shows nothing
    s = spawner()
    s.job_id = "4243"
    s.cancel_batch_job = cancel
    await s.stop(now=True)
    s.clear_state()
    assert s.ended_info() is None and s.stop_reason == ""
