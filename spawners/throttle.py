"""Failed logins counted per user name: slowed, then refused for a while.

Pure (the standard library only, the clock injected), so it is tested without
a hub; ``spawners.auth`` asks it before each LDAP bind and tells it the result.
The counts live in the memory of the hub's process: a hub restart forgets them.
"""

import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field


@dataclass
class _Record:
    failures: deque = field(default_factory=deque)  # clock times, oldest first
    in_progress: int = 0
    locked_until: float = 0.0


class LoginThrottle:
    """Failed logins of each key (a normalized user name) in a sliding window.

    After the k-th failure within ``window`` seconds (k below ``allowed``),
    the key's next attempt waits until ``delay * 2 ** (k - 1)`` seconds after
    that failure (at most ``lockout``). The ``allowed``-th failure locks the
    key out for ``lockout`` seconds; then its count starts again. A success
    forgets the key. Attempts in progress count against ``allowed`` until they
    end, so concurrent guesses get no more tries than serial ones.
    ``allowed`` 0: nothing is counted, nothing refused.

    >>> throttle = LoginThrottle(allowed=2, window=600, lockout=300, delay=1, clock=lambda: 0.0)
    >>> throttle.failed("alice"), throttle.delay_for("alice"), throttle.refused_for("alice")
    (1, 1.0, 0)
    >>> throttle.failed("alice"), throttle.refused_for("alice"), throttle.refused_for("bob")
    (2, 300.0, 0)
    """

    def __init__(self, allowed, window, lockout, delay=0.0, clock=time.monotonic):
        self.allowed = allowed
        self.window = window
        self.lockout = lockout
        self.delay = delay
        self.clock = clock
        # least recently active first, so the expired are dropped from the front
        self._records = OrderedDict()

    def __len__(self):
        """How many keys are remembered: those with nothing left are dropped as time passes."""
        self._expire(self.clock())
        return len(self._records)

    def refused_for(self, key):
        """Seconds for which attempts of ``key`` are refused; 0: it may try.

        While locked out, what is left of the lockout. While the attempts in
        progress would use up what is allowed, the lockout they would start.
        """
        now = self.clock()
        record = self._record(key, now)
        if record is None:
            return 0
        if record.locked_until > now:
            return record.locked_until - now
        if len(record.failures) + record.in_progress >= self.allowed:
            return float(self.lockout)
        return 0

    def delay_for(self, key):
        """Seconds the next attempt of ``key`` waits before it is checked; 0: none."""
        now = self.clock()
        record = self._record(key, now)
        if record is None or not record.failures:
            return 0
        wait = min(self.delay * 2 ** (len(record.failures) - 1), self.lockout)
        return max(record.failures[-1] + wait - now, 0)

    def begin(self, key):
        """An attempt of ``key`` starts: it counts as a failure until it ends."""
        if self.allowed:
            self._touch(key, self.clock()).in_progress += 1

    def failed(self, key):
        """An attempt of ``key`` failed: how many failures of ``key`` the window
        holds now, this one included. ``allowed``: this one starts a lockout.
        0: not counted, as it was begun before a lockout that has started since.
        """
        if not self.allowed:
            return 0
        now = self.clock()
        record = self._touch(key, now)
        record.in_progress = max(record.in_progress - 1, 0)
        if record.locked_until > now:
            return 0  # neither adds to the lockout nor extends it
        record.failures.append(now)
        count = len(record.failures)
        if count >= self.allowed:
            record.failures.clear()
            record.locked_until = now + self.lockout
        return count

    def succeeded(self, key):
        """An attempt of ``key`` succeeded: its failures and any lockout are forgotten."""
        self._records.pop(key, None)

    def abandoned(self, key):
        """An attempt of ``key`` ended without an answer (the directory failed): not counted."""
        record = self._records.get(key)
        if record is not None:
            record.in_progress = max(record.in_progress - 1, 0)

    def _record(self, key, now):
        self._expire(now)
        record = self._records.get(key) if self.allowed else None
        if record is not None:
            self._forget_old_failures(record, now)
        return record

    def _touch(self, key, now):
        record = self._record(key, now) or _Record()
        self._records.pop(key, None)
        self._records[key] = record  # now the most recently active
        return record

    def _forget_old_failures(self, record, now):
        while record.failures and record.failures[0] <= now - self.window:
            record.failures.popleft()

    def _expire(self, now):
        """Forget the keys with nothing left to remember, least recently active
        first; the first that still has something stops it, as those behind it
        were active later."""
        while self._records:
            key, record = next(iter(self._records.items()))
            self._forget_old_failures(record, now)
            if record.failures or record.in_progress or record.locked_until > now:
                return
            del self._records[key]
