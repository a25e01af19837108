"""What one open page is still to be sent on its event stream, batched.

At 10,000 devices the broker carries ~170 status and health messages a second. Sent one event each, a
browser that stops reading for a few seconds falls thousands of events behind. Here the rows changed
are kept by device (a row changed twice is sent once, as it is now) and sent with the new health
points as one `devices` event a batch (every `BATCH_S`), so what waits for a page is bounded by the
number of devices, not by time. Events, approvals and the link state keep their own events, in
order; a page that lets `MAX_WAITING` of those pile up is too far behind and its stream ends (it
reconnects and starts again from a snapshot).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from edgeclaw.fleetpage.window import Update

BATCH_S = 0.25
MAX_WAITING = 2000  # events (not rows) waiting for one page
MAX_POINTS = 2000  # health points in one batch; the oldest go first (the charts refetch on open)


class PageOutbox:
    """One page's waiting updates: rows by device, points, and the other events in order."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.gone: set[str] = set()
        self.points: list[dict[str, Any]] = []
        self.others: list[Update] = []
        self.ready = asyncio.Event()
        self.behind = False  # too far behind: its stream ends

    def add(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "device":
            self.rows[data["device"]] = data
            self.gone.discard(data["device"])
        elif kind == "gone":
            self.rows.pop(data["device"], None)
            self.gone.add(data["device"])
        elif kind == "health":
            self.points.append(data)
            if len(self.points) > MAX_POINTS:
                del self.points[: len(self.points) - MAX_POINTS]
        elif len(self.others) >= MAX_WAITING:
            self.behind = True
        else:
            self.others.append((kind, data))
        self.ready.set()

    def drain(self, counts: dict[str, int]) -> bytes:
        """Everything waiting, as the stream's bytes; the outbox empty again."""
        chunks = [sse(kind, data) for kind, data in self.others]
        if self.rows or self.gone or self.points:
            batch = {
                "rows": list(self.rows.values()),
                "gone": sorted(self.gone),
                "points": self.points,
                "counts": counts,
            }
            chunks.append(sse("devices", batch))
        self.rows, self.gone, self.points, self.others = {}, set(), [], []
        self.ready.clear()
        return b"".join(chunks)


def sse(kind: str, data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
