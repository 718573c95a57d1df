"""Password guessing through the real hub and slapd: one name's wrong
passwords are slowed, then refused with HTTP 429 (the right one too), while
other users log in at once. The test hub's throttle has the default count and
a short lockout (tests/support/testhub.py LOGIN_THROTTLE), so every name these
tests lock out is free again seconds later."""

import re
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.hubclient import HubClient
from tests.support.testhub import LOGIN_THROTTLE, STATE

THROTTLE = tomllib.loads(LOGIN_THROTTLE)["ldap"]
ALLOWED = THROTTLE["login_failures_allowed"]
LOCKOUT = THROTTLE["login_lockout_seconds"]
# the delays before the lockout: DELAY, 2 DELAY, 4 DELAY ... after each failure
DELAYS = sum(THROTTLE["login_failure_delay_seconds"] * 2**k for k in range(ALLOWED - 1))
HUB_LOG = STATE / "jupyterhub.log"
REFUSAL = re.compile(r"Too many failed logins for (\S+): try again in (\d+) (s|min)\b")


def timed_login(hub, name, password):
    """(response, start, end) of one login through the login form."""
    start = time.monotonic()
    r = HubClient(hub).login(name, password)
    return r, start, time.monotonic()


def log_in_when_free(hub, name, password):
    """Log ``name`` in once its lockout is over (which clears its count)."""
    deadline = time.monotonic() + LOCKOUT + 30
    while (r := HubClient(hub).login(name, password)).status_code == 429:
        assert time.monotonic() < deadline, f"{name} is still locked out"
        time.sleep(min(int(r.headers["Retry-After"]), 5))
    assert r.status_code == 302, f"login of {name} answered {r.status_code}"


@pytest.fixture
def bob(hub, accounts):
    """bob's password, with no failed login counted for him; at the end he is
    logged in again once his lockout is over, so later tests find him as before."""
    password = accounts["bob"]["password"]
    log_in_when_free(hub, "bob", password)
    yield password
    log_in_when_free(hub, "bob", password)


def test_guessing_a_password_is_slowed_then_refused_for_that_name_only(hub, accounts, bob):
    alice = accounts["alice"]["password"]
    log_in_when_free(hub, "alice", alice)  # nothing counted for her
    guesses = [timed_login(hub, "bob", f"wrong-{i}") for i in range(30)]
    statuses = [r.status_code for r, _, _ in guesses]
    assert statuses[:ALLOWED] == [403] * ALLOWED
    took = guesses[-1][2] - guesses[ALLOWED][1]
    assert statuses[ALLOWED:] == [429] * (30 - ALLOWED), f"{took:.1f} s, lockout {LOCKOUT} s"
    # slowed: each failure held bob's next attempt for the growing delay
    assert guesses[ALLOWED - 1][2] - guesses[0][1] >= DELAYS
    # refused at once, with when to try again, on the login page (no error page, no 500)
    for r, start, end in guesses[ALLOWED:]:
        assert end - start < 1, f"a refusal took {end - start:.2f} s"
        name, number, unit = REFUSAL.search(r.text).groups()
        assert name == "bob" and 0 < int(number) * (60 if unit == "min" else 1) <= LOCKOUT + 59
        assert 0 < int(r.headers["Retry-After"]) <= LOCKOUT
        assert 'name="password"' in r.text and "Traceback" not in r.text

    # alice is not slowed: she logs in at once with her password
    r, start, end = timed_login(hub, "alice", alice)
    assert r.status_code == 302
    assert end - start < 1, f"alice's login took {end - start:.2f} s"

    # bob's own password is refused while he is locked out
    r, _, _ = timed_login(hub, "bob", bob)
    assert r.status_code == 429
    assert REFUSAL.search(r.text).group(1) == "bob"


def test_guesses_sent_at_once_get_no_more_tries_than_one_by_one(hub):
    name = "nosuch-burst"  # any name is counted, whether or not it has an account
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda i: HubClient(hub).login(name, f"guess-{i}"), range(20)))
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [403] * ALLOWED + [429] * (20 - ALLOWED)


def test_a_guesser_claiming_other_addresses_is_refused_and_logged(hub):
    """X-Real-Ip, which any client may send, changes the address the hub logs,
    not the count: the log names the claimed address and the real peer."""
    name = "nosuch-spoof"
    log_start = HUB_LOG.stat().st_size
    statuses = []
    for i in range(ALLOWED + 3):
        client = HubClient(hub)
        client.session.headers["X-Real-Ip"] = f"203.0.113.{i + 1}"
        statuses.append(client.login(name, "guess").status_code)
    assert statuses == [403] * ALLOWED + [429] * 3
    with open(HUB_LOG) as f:
        f.seek(log_start)
        log = f.read()
    failures = re.findall(rf"Failed login for {name} from (\S+) \(via (\S+)\): (\d+) of", log)
    assert [(claimed, count) for claimed, _, count in failures] == [
        (f"203.0.113.{i + 1}", str(i + 1)) for i in range(ALLOWED)
    ], log[-3000:]
    peers = {peer for _, peer, _ in failures}  # the proxy's address, as the hub sees it
    assert len(peers) == 1 and not peers.pop().startswith("203.0.113.")
    lockouts = re.findall(rf"Logins for {name} refused for .* the last from (\S+)", log)
    assert lockouts == [f"203.0.113.{ALLOWED}"]  # logged once, when it started
