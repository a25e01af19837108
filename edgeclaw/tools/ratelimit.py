"""Rate limits for tool calls: a token bucket per caller, under a ceiling per channel.

A runaway model loop, or a backend hammering `tool/call`, is stopped at the
registry before it reaches a bus or a shell. Calls refused before this step
(unknown tool, bad arguments, policy) do not count, since nothing ran; dry
runs are refused when a bucket is empty but take nothing from it.

Who is limited: the caller's identity as the channel can prove it (console port,
MQTT caller key, CLI user; `ToolContext.identity`), never the session name or a
declared MQTT `sender`, which a caller chooses freely (every unsigned MQTT caller
is the one identity mqtt:anonymous). Every caller of a channel also draws from
that channel's shared bucket: many identities cannot multiply its limit.

Why buckets rather than a window: a bucket holds `burst` calls and refills at
`per_minute`, so a steady poller never notices it, a flood is stopped after
the burst, and the flood's lockout lasts seconds (one call comes back every
60/per_minute s) instead of a whole window.

Memory does not depend on how many names callers invent: a full bucket is the
same as no bucket, so only buckets still refilling are kept, at most
`max_tracked` of them (the least recently used go first; a caller dropped that
way starts from a full bucket, which the channel's bucket still bounds).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from edgeclaw.records import dataclass

# Callers whose buckets are still refilling, kept at most (per table). Each costs ~200 bytes.
MAX_TRACKED = 1024
# Identities are caller-supplied text: shown this long at most in a refusal.
MAX_SHOWN_IDENTITY = 64


@dataclass(slots=True)
class _Bucket:
    """One caller's token bucket."""

    tokens: float
    stamp: float  # when `tokens` was last brought up to date


@dataclass(frozen=True, slots=True)
class Throttled:
    """A refused call: how long until a call may go, and a message for the caller."""

    wait_s: float
    message: str


class _Buckets:
    """One table of buckets with the same size and refill rate, keyed by name."""

    def __init__(self, burst: int, per_minute: float, clock: Callable[[], float], max_tracked: int) -> None:
        self.burst = burst
        self.per_minute = per_minute
        self._rate = per_minute / 60.0  # tokens per second
        self._clock = clock
        self._max = max_tracked
        self._table: OrderedDict[str, _Bucket] = OrderedDict()  # least recently used first

    @property
    def enabled(self) -> bool:
        return self.burst > 0

    def _level(self, bucket: _Bucket, now: float) -> float:
        return min(float(self.burst), bucket.tokens + max(0.0, now - bucket.stamp) * self._rate)

    def tokens(self, key: str, now: float) -> float:
        bucket = self._table.get(key)
        return float(self.burst) if bucket is None else self._level(bucket, now)

    def wait(self, key: str, now: float) -> float:
        """0 when a call may go now, else the seconds until one token is back."""
        level = self.tokens(key, now)
        if level >= 1.0:
            return 0.0
        # Never 0.0 for an empty bucket: a wait of 0 reads as "go" while nothing was taken.
        return max((1.0 - level) / self._rate, 1e-3)

    def take(self, key: str, now: float) -> None:
        bucket = self._table.get(key)
        if bucket is None:
            bucket = self._table[key] = _Bucket(float(self.burst), now)
        else:
            bucket.tokens = self._level(bucket, now)
            bucket.stamp = now
            self._table.move_to_end(key)
        bucket.tokens -= 1.0
        self._expire(now)

    def _expire(self, now: float) -> None:
        # Drop the refilled buckets at the old end (they equal a fresh one), then anything over the cap.
        table = self._table
        while table:
            key, oldest = next(iter(table.items()))
            if len(table) <= self._max and self._level(oldest, now) < self.burst:
                break
            del table[key]

    def __len__(self) -> int:
        return len(self._table)


class RateLimiter:
    """Token buckets per caller identity (`burst`, `per_minute`) and per channel (`channel_*`).

    `burst == 0` disables every limit; `channel_burst == 0` disables just the channels' ceiling.
    """

    def __init__(
        self,
        burst: int = 60,
        per_minute: float = 30.0,
        channel_burst: int = 300,
        channel_per_minute: float = 600.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_tracked: int = MAX_TRACKED,
    ) -> None:
        for name, value in (("per_minute", per_minute), ("channel_per_minute", channel_per_minute)):
            if value <= 0:
                raise ValueError(f"{name} must be > 0 (a bucket that never refills locks callers out)")
        self._clock = clock
        self.callers = _Buckets(burst, per_minute, clock, max_tracked)
        self.channels = _Buckets(channel_burst if burst > 0 else 0, channel_per_minute, clock, max_tracked)

    @property
    def enabled(self) -> bool:
        return self.callers.enabled

    def describe(self) -> str:
        """The limits in words, for `session_status` and documentation of a refusal."""
        if not self.enabled:
            return "unlimited"
        text = f"{self.callers.burst} calls at once, then {self.callers.per_minute:g} per minute per caller"
        if self.channels.enabled:
            text += (
                f"; {self.channels.burst} at once, then {self.channels.per_minute:g} per minute "
                "for all callers of a channel together"
            )
        return text

    def _throttled(self, identity: str, channel: str, now: float) -> Throttled | None:
        if not self.enabled:
            return None
        wait = self.callers.wait(identity, now)
        if wait:
            shown = identity if len(identity) <= MAX_SHOWN_IDENTITY else identity[:MAX_SHOWN_IDENTITY] + "…"
            c = self.callers
            return Throttled(
                wait,
                f"rate limit: caller {shown!r} may make {c.burst} tool calls at once, then "
                f"{c.per_minute:g} per minute; try again in {_seconds(wait)}",
            )
        if self.channels.enabled:
            wait = self.channels.wait(channel, now)
            if wait:
                c = self.channels
                return Throttled(
                    wait,
                    f"rate limit: all {channel} callers together may make {c.burst} tool calls at once, "
                    f"then {c.per_minute:g} per minute; try again in {_seconds(wait)}",
                )
        return None

    def check(self, identity: str, channel: str) -> Throttled | None:
        """Would a call be refused now? Takes nothing (dry runs)."""
        return self._throttled(identity, channel, self._clock())

    def acquire(self, identity: str, channel: str) -> Throttled | None:
        """Take a call from both buckets if both have one; None when taken, else why not (nothing taken)."""
        now = self._clock()
        refused = self._throttled(identity, channel, now)
        if refused is None and self.enabled:
            self.callers.take(identity, now)
            if self.channels.enabled:
                self.channels.take(channel, now)
        return refused

    def remaining(self, identity: str, channel: str) -> int | None:
        """Calls this caller could make right now; None when unlimited."""
        if not self.enabled:
            return None
        now = self._clock()
        left = self.callers.tokens(identity, now)
        if self.channels.enabled:
            left = min(left, self.channels.tokens(channel, now))
        return int(left)


def _seconds(wait: float) -> str:
    """A wait as a person reads it: whole seconds, rounded up, at least 1."""
    return f"{max(1, int(-(-wait // 1)))} s"
