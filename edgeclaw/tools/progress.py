"""A call's progress on its way to the caller, held to a pace: at most one update per interval.

A tool that passes on progress from elsewhere (an MCP server's notifications) does not choose how
often it comes, and the caller's client should not be flooded by a chatty source. The newest
update inside an interval is held and delivered when the interval ends, so the last figure before
a pause is not lost; an update that does not go beyond the one before it is dropped (MCP requires
progress to increase, and a figure going back tells the person nothing). Progress is best effort:
a sink that fails is logged, never the call's failure.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

from edgeclaw.tools.base import ProgressSink

log = logging.getLogger("edgeclaw.tools")

# At most four updates a second per call: enough for a progress bar, not a flood.
MIN_INTERVAL_S = 0.25
MAX_MESSAGE_CHARS = 200

_Update = tuple[float, float | None, str]


class PacedProgress:
    """A `ProgressSink` that forwards to `sink` at most once per `min_interval_s`, in order.

    `close()` when the call ends: what is still held is dropped (the call's answer says the rest),
    and nothing more is forwarded.
    """

    def __init__(self, sink: ProgressSink, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self._sink = sink
        self._interval = min_interval_s
        self._sent_at: float | None = None
        self._newest: float | None = None  # the newest figure accepted (forwarded or held)
        self._held: _Update | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def __call__(self, progress: float, total: float | None, message: str) -> None:
        if self._closed or not math.isfinite(progress):
            return
        if self._newest is not None and progress <= self._newest:
            return
        self._newest = progress
        known_total = total if total is not None and math.isfinite(total) else None
        update = (progress, known_total, message[:MAX_MESSAGE_CHARS])
        now = time.monotonic()
        if self._sent_at is None or now - self._sent_at >= self._interval:
            self._forward(update, now)
            return
        self._held = update  # a newer one replaces it: only the latest figure matters
        if self._timer is None:
            delay = self._sent_at + self._interval - now
            self._timer = asyncio.get_running_loop().call_later(delay, self._release)

    def _release(self) -> None:
        self._timer = None
        if self._held is not None and not self._closed:
            update, self._held = self._held, None
            self._forward(update, time.monotonic())

    def _forward(self, update: _Update, now: float) -> None:
        self._sent_at = now
        try:
            self._sink(*update)
        except Exception:
            log.exception("passing on a call's progress failed")

    def close(self) -> None:
        self._closed = True
        self._held = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
