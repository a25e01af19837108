"""Per-session sliding-window rate limit for tool calls.

A runaway model loop, or a backend hammering `tool/call`, is stopped at the
registry before it reaches a bus or a shell. Calls refused before this step
(unknown tool, bad arguments, policy) do not count, since nothing ran; dry
runs are refused when the window is full but take no slot.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class SlidingWindowLimiter:
    """At most `limit` calls per `window_s` seconds per key. `limit == 0` disables the limit."""

    def __init__(self, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._calls: dict[str, deque[float]] = {}
        self._since_sweep = 0

    def _window(self, key: str, now: float) -> deque[float]:
        calls = self._calls.get(key)
        if calls is None:
            calls = self._calls[key] = deque()
        # `calls[0] + window <= now`, not `calls[0] <= now - window`: the same test as the wait
        # below, so a call kept in a full window always means a wait > 0. With the other form
        # rounding could make the wait 0.0, which reads as "go" while nothing was recorded.
        window = self.window_s
        while calls and calls[0] + window <= now:
            calls.popleft()
        return calls

    def retry_after(self, key: str) -> float:
        """0 when a call may go now, else the seconds until the oldest call leaves the window."""
        if self.limit <= 0:
            return 0.0
        now = self._clock()
        calls = self._window(key, now)
        if len(calls) < self.limit:
            return 0.0
        return calls[0] + self.window_s - now

    def acquire(self, key: str) -> float:
        """Record a call if allowed; returns 0 when recorded, else the seconds to wait (nothing recorded)."""
        if self.limit <= 0:
            return 0.0
        now = self._clock()
        calls = self._window(key, now)
        if len(calls) >= self.limit:
            return calls[0] + self.window_s - now
        calls.append(now)
        self._since_sweep += 1
        if self._since_sweep >= 1024:
            self._sweep(now)
        return 0.0

    def remaining(self, key: str) -> int | None:
        """Calls left in the window for `key`; None when unlimited."""
        if self.limit <= 0:
            return None
        return max(0, self.limit - len(self._window(key, self._clock())))

    def _sweep(self, now: float) -> None:
        # Sessions come and go; drop the idle ones so the table stays small on a long-lived daemon.
        self._since_sweep = 0
        window = self.window_s
        for key in [k for k, calls in self._calls.items() if not calls or calls[-1] + window <= now]:
            del self._calls[key]
