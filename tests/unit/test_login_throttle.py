"""The login throttle (spawners.throttle) against a fake clock: delays that
grow, a lockout that ends, one name's failures never touching another's."""

import doctest

import pytest

import spawners.throttle
from portal.core.durations import describe_wait
from spawners.throttle import LoginThrottle


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture
def clock():
    return Clock()


def throttle_of(clock, allowed=5, window=600, lockout=300, delay=1):
    return LoginThrottle(allowed=allowed, window=window, lockout=lockout, delay=delay, clock=clock)


def fail(throttle, name, times=1):
    """``times`` attempts of ``name`` that were allowed to start, and failed."""
    counts = []
    for _ in range(times):
        assert throttle.refused_for(name) == 0
        throttle.begin(name)
        counts.append(throttle.failed(name))
    return counts


def test_the_delay_doubles_with_each_failure_and_runs_from_the_failure(clock):
    throttle = throttle_of(clock)
    assert throttle.delay_for("alice") == 0
    waits = []
    for _ in range(4):
        fail(throttle, "alice")
        waits.append(throttle.delay_for("alice"))
    assert waits == [1, 2, 4, 8]
    clock.advance(5)
    assert throttle.delay_for("alice") == 3  # 8 s after the 4th failure
    clock.advance(3)
    assert throttle.delay_for("alice") == 0
    assert throttle.refused_for("alice") == 0  # delayed, never refused before the lockout


def test_the_allowed_failures_lock_the_name_out_then_it_starts_again(clock):
    throttle = throttle_of(clock)
    assert fail(throttle, "alice", 5) == [1, 2, 3, 4, 5]
    assert throttle.refused_for("alice") == 300
    clock.advance(70)
    assert throttle.refused_for("alice") == 230
    assert describe_wait(throttle.refused_for("alice")) == "4 min"
    clock.advance(230)
    assert throttle.refused_for("alice") == 0
    # a fresh count: the next failure delays, it does not lock out again
    assert fail(throttle, "alice") == [1]
    assert throttle.delay_for("alice") == 1


def test_other_names_are_not_slowed(clock):
    throttle = throttle_of(clock)
    fail(throttle, "bob", 5)
    assert throttle.refused_for("bob") == 300
    assert throttle.refused_for("alice") == 0
    assert throttle.delay_for("alice") == 0


def test_a_success_clears_the_count(clock):
    throttle = throttle_of(clock)
    fail(throttle, "alice", 4)
    throttle.begin("alice")
    throttle.succeeded("alice")
    assert throttle.delay_for("alice") == 0
    assert fail(throttle, "alice", 4) == [1, 2, 3, 4]  # four more before a lockout
    assert throttle.refused_for("alice") == 0


def test_failures_older_than_the_window_are_forgotten(clock):
    throttle = throttle_of(clock, window=600)
    fail(throttle, "alice", 3)
    clock.advance(400)
    fail(throttle, "alice")
    clock.advance(201)  # the first three are 601 s old
    assert fail(throttle, "alice") == [2]
    assert throttle.refused_for("alice") == 0


def test_concurrent_attempts_get_no_more_tries_than_serial_ones(clock):
    throttle = throttle_of(clock)
    fail(throttle, "alice", 2)
    started = 0
    for _ in range(20):  # twenty guesses at once: each is checked, then begins
        if throttle.refused_for("alice") == 0:
            throttle.begin("alice")
            started += 1
    assert started == 3
    counts = [throttle.failed("alice") for _ in range(started)]
    assert counts == [3, 4, 5]
    assert throttle.refused_for("alice") == 300


def test_a_failure_begun_before_the_lockout_does_not_extend_it(clock):
    throttle = throttle_of(clock)
    fail(throttle, "alice", 3)
    throttle.begin("alice")
    throttle.begin("alice")
    throttle.begin("alice")  # the last one allowed
    throttle.failed("alice")
    assert throttle.failed("alice") == 5  # the lockout starts
    clock.advance(100)
    assert throttle.failed("alice") == 0  # not counted
    assert throttle.refused_for("alice") == 200


def test_an_abandoned_attempt_is_not_counted(clock):
    throttle = throttle_of(clock)
    fail(throttle, "alice", 4)
    throttle.begin("alice")
    assert throttle.refused_for("alice") == 300  # the one in progress would lock out
    throttle.abandoned("alice")  # the directory did not answer
    assert throttle.refused_for("alice") == 0
    assert throttle.delay_for("alice") == 8


def test_the_delay_is_at_most_the_lockout(clock):
    throttle = throttle_of(clock, allowed=20, lockout=60, delay=1)
    fail(throttle, "alice", 10)
    assert throttle.delay_for("alice") == 60


def test_zero_allowed_counts_nothing(clock):
    throttle = throttle_of(clock, allowed=0)
    for _ in range(50):
        throttle.begin("alice")
        assert throttle.failed("alice") == 0
    assert throttle.refused_for("alice") == 0
    assert throttle.delay_for("alice") == 0
    assert len(throttle) == 0


def test_names_with_nothing_left_are_forgotten(clock):
    throttle = throttle_of(clock, window=600, lockout=300)
    for i in range(1000):
        fail(throttle, f"guess{i}")
    fail(throttle, "alice", 5)
    assert len(throttle) == 1001
    clock.advance(599)
    assert len(throttle) == 1001
    clock.advance(1)  # the guesses' failures are 600 s old; alice's lockout has ended too
    assert len(throttle) == 0
    assert throttle.refused_for("alice") == 0


def test_a_name_in_progress_is_kept(clock):
    throttle = throttle_of(clock)
    throttle.begin("alice")
    clock.advance(10_000)
    assert len(throttle) == 1
    assert throttle.failed("alice") == 1


@pytest.mark.parametrize(
    "seconds, shown",
    [(0.2, "1 s"), (1, "1 s"), (59, "59 s"), (59.5, "1 min"), (60, "1 min"), (61, "2 min"),
     (300, "5 min")],
)  # fmt: skip
def test_describe_wait(seconds, shown):
    assert describe_wait(seconds) == shown


def test_doctests():
    assert doctest.testmod(spawners.throttle).failed == 0
