"""The fleet page's history in SQLite: batched writes, downsampling, retention, kept across a restart."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from edgeclaw.fleetpage.history import HEALTH_SLOT_S, HistoryStore, open_history


class Clock:
    def __init__(self) -> None:
        self.now = 100_000.0

    def __call__(self) -> float:
        return self.now


async def test_what_is_added_is_written_in_one_batch_and_read_back_newest_first(tmp_path: Path):
    store = HistoryStore(tmp_path / "h.sqlite3", retention_s=3600, clock=Clock())
    for n in range(5):
        store.add("events", "a", {"ts": 99_000.0 + n, "tool": "i2c", "n": n})
    store.add("answers", "b", {"ts": 99_000.0, "ok": True, "broadcast": "hardware_info"})
    assert await store.records("events") == []  # not written before the flush
    await store.flush()
    events = await store.records("events", limit=3)
    assert [e["n"] for e in events] == [4, 3, 2] and events[0]["device"] == "a"
    assert [e["n"] for e in await store.records("events", before=99_002.0)] == [1, 0]
    assert (await store.records("answers", device="b"))[0]["broadcast"] == "hardware_info"
    assert await store.records("answers", device="a") == []
    with pytest.raises(ValueError, match="kind must be one of"):
        await store.records("passwords")
    journal = sqlite3.connect(tmp_path / "h.sqlite3").execute("PRAGMA journal_mode").fetchone()[0]
    assert journal == "wal"
    store.close()


async def test_health_is_kept_one_point_a_slot_and_old_rows_go(tmp_path: Path):
    clock = Clock()
    store = HistoryStore(tmp_path / "h.sqlite3", retention_s=3600, clock=clock)
    for n in range(100):  # a report a second for 100 s
        store.add_health("a", [clock.now - 100 + n, 40.0 + n, 0.1, 20.0])
    await store.flush()
    points = await store.health("a", 0)
    assert len(points) == 100 / HEALTH_SLOT_S and points[0] == [clock.now - 100, 40.0, 0.1, 20.0]
    store.add("events", "a", {"ts": clock.now - 10})
    await store.flush()
    clock.now += 3600 - 50  # the first half of those points is now past the retention
    await store.flush()
    assert len(await store.health("a", 0)) == 5
    assert len(await store.records("events")) == 1
    store.close()


async def test_history_outlives_the_store(tmp_path: Path):
    path = tmp_path / "state" / "h.sqlite3"
    store = HistoryStore(path, retention_s=3600, clock=Clock())
    store.add("approvals", "a", {"ts": 99_999.0, "id": "q1", "tool": "exec"})
    await store.flush()
    store.close()
    again = HistoryStore(path, retention_s=3600, clock=Clock())
    assert [q["id"] for q in await again.records("approvals")] == ["q1"]
    again.close()


def test_postgresql_is_refused_as_not_implemented(tmp_path: Path):
    with pytest.raises(ValueError, match="not implemented: PostgreSQL"):
        open_history("postgresql", tmp_path / "h", 3600)
    assert open_history("off", tmp_path / "h", 3600) is None
    assert not (tmp_path / "h").exists()
