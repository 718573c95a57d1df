"""The hub's check of the proxy's routes (spawners/route_check.py) with a
hub and proxy made here, and what the health check makes of its file
(portal.health.proxy_routes). The real hub and proxy:
tests/reliability/test_health.py."""

import asyncio
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from portal import health
from spawners.route_check import FILE_NAME, RouteCheck


def hub(sessions, routes):
    """A hub whose users run ``sessions`` ({(user, name): ready}) behind ``routes``."""
    users = {}
    for (user, name), ready in sessions.items():
        users.setdefault(user, SimpleNamespace(name=user, spawners={}))
        users[user].spawners[name] = SimpleNamespace(ready=ready)

    async def get_all_routes():
        if isinstance(routes, Exception):
            raise routes
        return {f"/user/{u}/{s}": {"data": {"user": u, "server_name": s}} for u, s in routes} | {
            "/": {"data": {"hub": True}}
        }

    return SimpleNamespace(users=users, proxy=SimpleNamespace(get_all_routes=get_all_routes))


def settings(tmp_path):
    return {"hub": {"state_dir": str(tmp_path)}}


def test_a_mismatch_counts_once_seen_twice_and_health_names_it(tmp_path):
    app = hub({("alice", ""): True, ("bob", ""): True, ("carol", ""): False}, [("alice", "")])
    check = RouteCheck(lambda: app, tmp_path / FILE_NAME, interval=30)
    first = asyncio.run(check.check())
    assert (first["sessions"], first["missing"], first["stale"]) == (2, 0, 0)  # once: a start?
    second = asyncio.run(check.check())
    assert (second["missing"], second["stale"]) == (1, 0)  # bob, still without one
    part = health.proxy_routes(settings(tmp_path))
    assert not part.ok and part.critical
    assert part.detail.startswith("1 running session(s) without a route, 0 route(s) to no")
    assert "bob" not in part.detail and "2" not in part.detail  # no name, nor how many run

    app.users["bob"].spawners[""].ready = False  # bob's session stopped: its route is gone too
    asyncio.run(check.check())
    assert health.proxy_routes(settings(tmp_path)).ok


def test_a_route_to_no_running_session_is_stale(tmp_path):
    app = hub({("alice", ""): True}, [("alice", ""), ("dave", "gpu2")])
    check = RouteCheck(lambda: app, tmp_path / FILE_NAME, interval=30)
    asyncio.run(check.check())
    result = asyncio.run(check.check())
    assert (result["missing"], result["stale"]) == (0, 1)
    assert "1 route(s) to no running session" in health.proxy_routes(settings(tmp_path)).detail


def test_a_proxy_that_does_not_answer_is_down_with_its_error(tmp_path):
    app = hub({("alice", ""): True}, ConnectionRefusedError("127.0.0.1:8001"))
    check = RouteCheck(lambda: app, tmp_path / FILE_NAME, interval=30)
    asyncio.run(check.check())
    part = health.proxy_routes(settings(tmp_path))
    assert not part.ok and "could not be read: 127.0.0.1:8001" in part.detail
    assert oct((tmp_path / FILE_NAME).stat().st_mode & 0o777) == "0o644"


def test_no_check_yet_or_an_old_one_is_down(tmp_path):
    assert health.proxy_routes(settings(tmp_path)).detail == "the hub has not checked them yet"
    old = datetime.now(UTC) - timedelta(seconds=200)
    seen = {"checked_at": old.isoformat(), "interval": 30, "sessions": 0, "missing": 0, "stale": 0}
    (tmp_path / FILE_NAME).write_text(json.dumps(seen))
    part = health.proxy_routes(settings(tmp_path))
    assert not part.ok and part.detail.startswith("the hub's last check is 200 s old (at most 90)")
    (tmp_path / FILE_NAME).write_text("{not json")
    assert not health.proxy_routes(settings(tmp_path)).ok


def test_before_the_hub_runs_nothing_is_written(tmp_path):
    check = RouteCheck(lambda: None, tmp_path / FILE_NAME, interval=30)
    assert asyncio.run(check.check()) is None
    assert not (tmp_path / FILE_NAME).exists()


def test_a_check_only_as_the_hub_starts_is_information_however_old(tmp_path):
    app = hub({("alice", ""): True}, [("alice", "")])
    check = RouteCheck(lambda: app, tmp_path / FILE_NAME, interval=0)
    asyncio.run(check.run())  # one check, then the loop ends
    later = datetime.now(UTC) + timedelta(hours=5)
    part = health.proxy_routes(settings(tmp_path), now=later)
    assert part.ok and not part.critical and "route_check_seconds = 0" in part.detail
