"""The fleet page's history in SQLite: batched writes, downsampling, retention, kept across a restart."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from edgeclaw.fleetpage.history import HEALTH_SLOT_S, HistoryStore, open_history
from tests.postgres_support import postgres  # noqa: F401  (a fixture)


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


def test_postgresql_needs_its_dsn_and_off_keeps_nothing(tmp_path: Path):
    with pytest.raises(ValueError, match="needs history_dsn"):
        open_history("postgresql", tmp_path / "h", 3600)
    assert open_history("off", tmp_path / "h", 3600) is None
    assert not (tmp_path / "h").exists()


async def test_postgresql_keeps_the_same_history_with_the_same_queries(tmp_path: Path, postgres: str):  # noqa: F811
    clock = Clock()
    store = open_history("postgresql", tmp_path / "unused", 3600, postgres)
    assert store is not None
    store.clock = clock
    store.add_health("a", [clock.now - 20, 41.5, 0.25, 30.0])
    store.add("events", "a", {"ts": clock.now - 5, "tool": "i2c"})
    store.add("answers", "b", {"ts": clock.now - 4, "ok": True})
    await store.flush()
    store.close()
    again = open_history("postgresql", tmp_path / "unused", 3600, postgres)  # a restart
    assert again is not None
    again.clock = clock
    assert await again.health("a", 0) == [[clock.now - 20, 41.5, 0.25, 30.0]]  # 64-bit time stamps
    assert [e["tool"] for e in await again.records("events", device="a")] == ["i2c"]
    assert [e["device"] for e in await again.records("answers")] == ["b"]
    clock.now += 3600  # past the retention
    await again.flush()
    assert await again.health("a", 0) == [] and await again.records("events") == []
    again.close()
    assert not (tmp_path / "unused").exists()
    with pytest.raises(ValueError, match="cannot use the PostgreSQL database"):
        open_history(
            "postgresql", tmp_path / "x", 3600, postgres.replace("dbname=postgres", "dbname=nothing")
        )


# -- each row once ----------------------------------------------------------------------------
def _written_twice(store: HistoryStore, other: HistoryStore, now: float) -> None:
    """The same messages given to two stores (two pages on one database, or one message delivered
    again after a reconnect): health in one slot, an event, a broadcast answer, an approval."""
    for s, verified in ((store, True), (other, False)):  # one page has the device's key, one not yet
        s.add_health("a", [now - 20, 41.0, 0.2, 30.0])
        s.add("events", "a", {"kind": "tool", "tool": "i2c", "verified": verified})  # no ts: each clock
        s.add("answers", "a", {"ok": True, "broadcast": "hardware_info", "ts": now}, ref="fp-1")
        s.add("approvals", "a", {"id": "q1", "tool": "exec", "ts": now - 3})
    store.add_health("a", [now - 15, 42.0, 0.2, 30.0])  # the same slot, seen by the other page only
    other.add_health("a", [now - 18, 43.0, 0.2, 30.0])


async def _counted(store: HistoryStore) -> dict[str, int]:
    counts = {kind: len(await store.records(kind)) for kind in ("events", "answers", "approvals")}
    return {**counts, "health": len(await store.health("a", 0))}


async def test_a_message_written_twice_is_one_row(tmp_path: Path):
    clock, later = Clock(), Clock()
    later.now += 0.5
    store = HistoryStore(tmp_path / "h.sqlite3", retention_s=3600, clock=clock)
    other = HistoryStore(tmp_path / "h.sqlite3", retention_s=3600, clock=later)
    _written_twice(store, other, clock.now)
    await store.flush()
    await other.flush()
    assert await _counted(store) == {"events": 1, "answers": 1, "approvals": 1, "health": 1}
    # Another answer to another broadcast, and a new point in the next slot, are rows of their own.
    store.add("answers", "a", {"ok": True, "ts": clock.now}, ref="fp-2")
    store.add_health("a", [clock.now - 5, 44.0, 0.2, 30.0])
    await store.flush()
    assert await _counted(other) == {"events": 1, "answers": 2, "approvals": 1, "health": 2}
    store.close()
    other.close()


OLD_SCHEMA = """
CREATE TABLE health (device TEXT NOT NULL, ts {real} NOT NULL, cpu_temp_c {real}, load_1m {real}, mem_used_pct {real})
CREATE INDEX health_device_ts ON health (device, ts)
CREATE INDEX health_ts ON health (ts)
CREATE TABLE records (kind TEXT NOT NULL, device TEXT NOT NULL, ts {real} NOT NULL, body TEXT NOT NULL)
CREATE INDEX records_kind_ts ON records (kind, ts)
CREATE INDEX records_device ON records (kind, device, ts)
INSERT INTO health VALUES ('a', 99900.5, 40.0, 0.1, 20.0)
INSERT INTO health VALUES ('a', 99911.0, 41.0, 0.1, 20.0)
INSERT INTO health VALUES ('a', 99919.0, 42.0, 0.1, 20.0)
INSERT INTO records VALUES ('events', 'a', 99950.0, '{{"tool":"i2c","ts":99950.0}}')
INSERT INTO records VALUES ('events', 'a', 99950.0, '{{"tool":"i2c","ts":99950.0}}')
INSERT INTO records VALUES ('answers', 'b', 99960.0, '{{"ok":true}}')
"""  # noqa: E501  (what a page made before the unique keys, with a message written twice)


async def _kept_across_the_migration(store: HistoryStore) -> None:
    store.clock = Clock()
    # The first point of a slot is kept, and a second of the same slot (the old downsampling's slots
    # were not aligned) is not; the duplicated event is one now.
    assert [p[0] for p in await store.health("a", 0)] == [99900.5, 99911.0]
    assert [e["tool"] for e in await store.records("events")] == ["i2c"]
    assert [e["device"] for e in await store.records("answers")] == ["b"]
    store.add("events", "a", {"tool": "i2c", "ts": 99950.0})  # the same event again: still one
    store.add_health("a", [99915.0, 45.0, 0.1, 20.0])
    await store.flush()
    assert len(await store.records("events")) == 1 and len(await store.health("a", 0)) == 2


async def test_a_database_kept_before_the_unique_keys_keeps_its_history(tmp_path: Path):
    path = tmp_path / "h.sqlite3"
    db = sqlite3.connect(path)
    for statement in OLD_SCHEMA.format(real="REAL").strip().splitlines():
        db.execute(statement)
    db.commit()
    db.close()
    store = HistoryStore(path, retention_s=3600, clock=Clock())
    await _kept_across_the_migration(store)
    store.close()
    again = HistoryStore(path, retention_s=3600, clock=Clock())  # a second start: nothing to move
    assert len(await again.records("events")) == 1
    again.close()


async def test_postgresql_moves_an_old_database_to_the_unique_keys(tmp_path: Path, postgres: str):  # noqa: F811
    import psycopg

    with psycopg.connect(postgres, autocommit=True) as db:
        for statement in OLD_SCHEMA.format(real="DOUBLE PRECISION").strip().splitlines():
            db.execute(statement)
    store = open_history("postgresql", tmp_path / "unused", 3600, postgres)
    assert store is not None
    await _kept_across_the_migration(store)
    other = open_history("postgresql", tmp_path / "unused", 3600, postgres)  # a second page
    assert other is not None
    other.clock = Clock()
    other.clock.now += 0.5
    _written_twice(store, other, Clock().now)
    await store.flush()
    await other.flush()
    assert await _counted(other) == {"events": 2, "answers": 2, "approvals": 1, "health": 3}
    store.close()
    other.close()
