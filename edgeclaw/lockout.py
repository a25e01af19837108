"""Wrong entries counted, and a lock-out after too many: one rule for every login form.

The serial console's PIN gate (`channels.console.login`) and the fleet page's
form (`fleetpage.access`) both count wrong entries and, after `max_failures`
of them, refuse everything for `lockout_s` without looking at what was typed.
When the lock-out ends, the count starts afresh. Every wrong entry also costs
`failure_delay_s`, taken under the one lock that checks run under, so
parallel guesses cannot overlap it.

Counts are kept per key. The console counts for the whole device (no key): a
second cable must not buy a second set of guesses. The HTTP endpoints count
per source address: a guesser locks only its own address out, and a right
password or token from another address still gets in (a count for everyone
would let any guesser lock the owner out). Each key checks under its own lock
(`checking_for`), so one source's slow wrong entries do not hold up another's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

ALL = ""  # the key of a count kept for every source together


class LoginLockout:
    """Wrong entries per key; after `max_failures` of them the key is locked for `lockout_s`."""

    def __init__(
        self,
        *,
        max_failures: int = 5,
        lockout_s: float = 300.0,
        failure_delay_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures
        self.lockout_s = lockout_s
        self.failure_delay_s = failure_delay_s
        self.clock = clock
        self._failures: dict[str, int] = {}
        self._locked_until: dict[str, float] = {}
        # One check at a time: parallel guesses must not slip past the count.
        self.checking = asyncio.Lock()
        self._checking: dict[str, asyncio.Lock] = {ALL: self.checking}

    def checking_for(self, key: str) -> asyncio.Lock:
        """The lock checks for `key` run under (for ALL, `checking`)."""
        lock = self._checking.get(key)
        if lock is None:
            if len(self._checking) > 4096:  # forget idle keys' locks; a held one stays
                for old in [k for k, v in self._checking.items() if k != ALL and not v.locked()]:
                    del self._checking[old]
            lock = self._checking[key] = asyncio.Lock()
        return lock

    def failures(self, key: str = ALL) -> int:
        return self._failures.get(key, 0)

    def locked_for(self, key: str = ALL) -> float:
        """Seconds of lock-out left for `key` (0 when open). An expired lock-out starts a fresh count."""
        until = self._locked_until.get(key)
        if until is None:
            return 0.0
        left = until - self.clock()
        if left > 0:
            return left
        del self._locked_until[key]
        self._failures.pop(key, None)
        return 0.0

    def succeeded(self, key: str = ALL) -> None:
        """A right entry: the count of wrong ones starts again."""
        self._failures.pop(key, None)

    def failed(self, key: str = ALL) -> int:
        """Count a wrong entry; returns the count so far, which locks `key` when it reaches the limit."""
        count = self._failures[key] = self._failures.get(key, 0) + 1
        if count >= self.max_failures:
            self._locked_until[key] = self.clock() + self.lockout_s
        return count

    def tries_left(self, key: str = ALL) -> int:
        """Wrong entries still allowed before `key` is locked out."""
        return max(0, self.max_failures - self.failures(key))

    async def slow_down(self) -> None:
        """The cost of a wrong entry; awaited under `checking`, so checks in parallel cannot overlap it."""
        if self.failure_delay_s > 0:
            await asyncio.sleep(self.failure_delay_s)
