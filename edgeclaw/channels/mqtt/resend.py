"""Answers the broker acknowledged lately, kept so they can be published again should it lose them.

A broker acknowledges (PUBACK) a message before it has written it to disk: mosquitto saves its
state every `autosave_interval` seconds (or after that many changes with `autosave_on_changes`).
Killed in between, it comes back from its last save without the answers it had acknowledged since,
queued or on their way to a backend -- and the outbox let go of each on its PUBACK.

So the sender keeps the answers the broker acknowledged in the last `window_s` seconds, at most
`max_messages` of them and `max_bytes` in all (the oldest go first), and when an established
connection is lost it puts them back in the outbox: after the reconnect they are published again.
A caller that had one already gets it twice, byte for byte the same with the same Correlation Data,
as QoS 1 allows. A window at least as long as the broker's save interval leaves nothing it lost.
Past its window an answer is let go even when no other comes (a timer on the event loop), so a
burst of answers is not held until the next one.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from edgeclaw.channels.mqtt.outbox import OutMessage
from edgeclaw.records import dataclass

# What a kept answer costs beside its bytes (the objects holding it), so a flood of tiny answers is
# bounded by `max_bytes` too.
OVERHEAD_BYTES = 256


@dataclass(frozen=True, slots=True)
class Acknowledged:
    at: float  # when its PUBACK came (monotonic)
    message: OutMessage
    size: int


def size_of(message: OutMessage) -> int:
    return len(message.payload) + len(message.topic) + len(message.correlation or b"") + OVERHEAD_BYTES


class RecentAnswers:
    """The answers acknowledged in the last `window_s` seconds, bounded by count and bytes."""

    def __init__(
        self,
        window_s: float,
        max_messages: int,
        max_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._clock = clock
        self._kept: deque[Acknowledged] = deque()
        self.bytes = 0
        self._expiry: asyncio.TimerHandle | None = None

    @property
    def enabled(self) -> bool:
        return self.window_s > 0 and self.max_messages > 0

    def __len__(self) -> int:
        return len(self._kept)

    def add(self, message: OutMessage) -> None:
        """An answer the broker just acknowledged."""
        if not self.enabled:
            return
        now = self._clock()
        size = size_of(message)
        if size > self.max_bytes:
            return  # too big to keep at all
        self._kept.append(Acknowledged(now, message, size))
        self.bytes += size
        self._forget(now)
        if self._expiry is None:
            self._expire_later(self.window_s)

    def take(self) -> list[OutMessage]:
        """The connection is lost: the answers acknowledged within the window, oldest first, to be
        published again. They are forgotten here (once sent again they are kept anew)."""
        self._forget(self._clock())
        taken = [kept.message for kept in self._kept]
        self._kept.clear()
        self.bytes = 0
        return taken

    def _expire_later(self, delay_s: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous caller): the next add or take forgets them
        self._expiry = loop.call_later(max(delay_s, 0.0), self._expire)

    def _expire(self) -> None:
        self._expiry = None
        now = self._clock()
        self._forget(now)
        if self._kept:
            self._expire_later(self._kept[0].at + self.window_s - now)

    def _forget(self, now: float) -> None:
        kept = self._kept
        while kept and (
            kept[0].at < now - self.window_s or len(kept) > self.max_messages or self.bytes > self.max_bytes
        ):
            self.bytes -= kept.popleft().size
