"""The fleet page's history on disk: health points and events a page took from a real broker are read
back by the next page started on the same file, and rows older than the retention are deleted."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from edgeclaw.fleetpage.history import FleetHistory
from edgeclaw.fleetpage.window import FleetWindow
from tests.fleet_support import PREFIX, SignedDevice, page_on_a_broker
from tests.mqtt_support import Caller, poll


async def test_a_restarted_page_draws_the_charts_and_lists_the_events_from_before(tmp_path: Path):
    path = tmp_path / "history.db"
    device = SignedDevice(tmp_path, "greenhouse-07")
    now = time.time()
    first = FleetWindow(PREFIX, history_s=3600, history=FleetHistory(path, retention_s=86400))
    page = page_on_a_broker(tmp_path, first, "page-1", command_secret="command-key")
    async with page as (broker, _), Caller(broker.port, []) as c:
        health = [{"ts": now - 600 + 60 * i, "cpu_temp_c": 40.0 + i} for i in range(5)]
        messages = [
            device.message("status", {"state": "online", "ts": now}),
            *(device.message("health", body) for body in health),
            device.message("events", {"kind": "tool_call", "tool": "i2c", "ts": now}),
        ]
        for topic, payload, sig in messages:
            await c.publish(topic, payload, user=[("sig", sig)], retain=topic.endswith("/status"))

        def points() -> int:
            view = first.devices.get("greenhouse-07")
            return len(view.history) if view is not None else 0

        await poll(lambda: points() == 5, 20, "five points")
        await poll(lambda: len(first.events) == 1, 20, "the event")
    first.history.close()

    # A new page on the same file: the device's row is back from its retained status (fed here as the
    # broker would hand it over), its chart and the event from the file.
    second = FleetWindow(PREFIX, history_s=3600, history=FleetHistory(path, retention_s=86400))
    assert [e.get("tool") for e in second.events] == ["i2c"]
    assert "greenhouse-07" not in second.devices  # rows still come from the broker only
    second.take(*device.message("status", {"state": "online", "ts": now}))
    chart = second.device("greenhouse-07")["history"]
    assert [p[1] for p in chart] == [40.0, 41.0, 42.0, 43.0, 44.0]
    second.history.close()


def test_rows_past_the_retention_are_deleted(tmp_path: Path):
    path = tmp_path / "history.db"
    clock = [1_000_000.0]
    history = FleetHistory(path, retention_s=3600, clock=lambda: clock[0])
    history.record_point("a", [clock[0] - 7200, 1.0, None, None])
    history.record_point("a", [clock[0] - 60, 2.0, None, None])
    history.record_event({"device": "a", "ts": clock[0] - 7200, "kind": "x"})
    assert history.flush() == 3
    history.prune()
    assert history.points_since(0) == {"a": [[clock[0] - 60, 2.0, None, None]]}
    assert history.recent_events(10) == []
    history.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
