"""The fleet page's history, kept across restarts: health points, events, broadcast answers, approvals.

What the broker carries is gone once seen; the page keeps it here so a restarted page still draws
the last hour's charts and lists yesterday's events. SQLite (stdlib sqlite3, WAL) in the state
directory by default; the schema and the queries are plain SQL so another database can sit behind
the same small layer: `history_store = "postgresql"` with `history_dsn` (psycopg 3, the same schema
with 64-bit floats, the same queries).

Writes never block the event loop: `add_*` only appends to a list, and `flush` (every
`FLUSH_S`, from `run`) writes the lot in one transaction in a worker thread. Health is kept
downsampled: at most one point a device in each slot of `HEALTH_SLOT_S` (slots aligned on the clock,
so every page writing to one database picks the same slots). Rows older than the retention are
deleted as the writes go.

Each row is written once, however often it arrives: a health point is keyed by its device and slot,
a record by its kind, device and `ref` (a broadcast answer: the broadcast's request id; anything
else: the digest of its body), and every insert is `ON CONFLICT DO NOTHING`. So two pages writing
the same message (two pages on one broker without a shared subscription group), or one message
sent again (QoS 1 is at least once: a device resends what was not acknowledged before a reconnect),
leave one row. A database made before these keys is
moved over to them when the page opens it (its rows kept; duplicates kept once).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("edgeclaw.fleetpage")

FLUSH_S = 1.0
HEALTH_SLOT_S = 10.0  # one point a device per slot: 360 points an hour
MAX_PENDING = 100_000  # rows waiting for a write; past that the oldest are dropped (and logged)
MAX_LIST = 1000  # rows one read returns at most
KINDS = ("events", "answers", "approvals")  # what `records` lists, besides health
VERDICTS = ("verified", "trust")  # what a page adds to a record: its own judgement of the message
SCHEMA_LOCK = 0x65646765  # the PostgreSQL advisory lock held while the schema is set up

# One schema for both databases ({real}: SQLite's REAL, PostgreSQL's DOUBLE PRECISION: time stamps
# need its 64 bits), one statement a line.
SCHEMA = """
CREATE TABLE IF NOT EXISTS health (device TEXT NOT NULL, ts {real} NOT NULL, cpu_temp_c {real}, load_1m {real}, mem_used_pct {real}, slot BIGINT NOT NULL, UNIQUE (device, slot))
CREATE INDEX IF NOT EXISTS health_device_ts ON health (device, ts)
CREATE INDEX IF NOT EXISTS health_ts ON health (ts)
CREATE TABLE IF NOT EXISTS records (kind TEXT NOT NULL, device TEXT NOT NULL, ts {real} NOT NULL, body TEXT NOT NULL, ref TEXT NOT NULL, UNIQUE (kind, device, ref))
CREATE INDEX IF NOT EXISTS records_kind_ts ON records (kind, ts)
CREATE INDEX IF NOT EXISTS records_device ON records (kind, device, ts)
"""  # noqa: E501
# The tables as they were before the unique keys: renamed aside (their indexes dropped, the names are
# the new tables'), copied into the new ones (a duplicate kept once), then dropped. {slot}: the
# database's way to write floor(ts / HEALTH_SLOT_S) as an integer.
MIGRATION = """
ALTER TABLE health RENAME TO health_unkeyed
ALTER TABLE records RENAME TO records_unkeyed
DROP INDEX IF EXISTS health_device_ts
DROP INDEX IF EXISTS health_ts
DROP INDEX IF EXISTS records_kind_ts
DROP INDEX IF EXISTS records_device
{schema}
INSERT INTO health (device, ts, cpu_temp_c, load_1m, mem_used_pct, slot) SELECT device, ts, cpu_temp_c, load_1m, mem_used_pct, {slot} FROM health_unkeyed WHERE true ON CONFLICT DO NOTHING
INSERT INTO records (kind, device, ts, body, ref) SELECT kind, device, ts, body, md5(body) FROM records_unkeyed WHERE true ON CONFLICT DO NOTHING
DROP TABLE health_unkeyed
DROP TABLE records_unkeyed
"""  # noqa: E501
INSERT_HEALTH = (
    "INSERT INTO health (device, ts, cpu_temp_c, load_1m, mem_used_pct, slot) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT DO NOTHING"
)
INSERT_RECORD = (
    "INSERT INTO records (kind, device, ts, body, ref) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)


def _md5(text: str) -> str:
    """A record's `ref` when it names none: the digest of its body (identity, not security)."""
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def _set_up(db: Any, real: str, slot: str) -> None:
    """The schema, with an older database's tables moved over to it first (in one transaction)."""
    schema = SCHEMA.format(real=real).strip()
    if _answers(db, "SELECT 1 FROM health LIMIT 0") and not _answers(db, "SELECT slot FROM health LIMIT 0"):
        log.warning("fleet page history: adding the unique keys to the tables kept so far")
        db.execute("BEGIN")
        try:
            for statement in MIGRATION.format(schema=schema, slot=slot).strip().splitlines():
                db.execute(statement)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return
    for statement in schema.splitlines():
        db.execute(statement)


def _answers(db: Any, query: str) -> bool:
    """Whether `query` runs (the table and column it names exist): no error leaves a transaction open
    (both connections are in autocommit here)."""
    try:
        db.execute(query)
    except Exception:  # sqlite3.OperationalError, psycopg.errors.UndefinedTable / UndefinedColumn
        return False
    return True


def sqlite_db(path: Path) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.create_function("md5", 1, _md5, deterministic=True)  # PostgreSQL's, for the migration
    _set_up(db, "REAL", f"CAST(ts / {HEALTH_SLOT_S!r} AS INTEGER)")  # time stamps are positive
    return db


def postgresql_db(dsn: str) -> Any:
    """A PostgreSQL connection (psycopg 3) with the same schema; ValueError when it cannot be had."""
    try:
        import psycopg
    except ImportError:
        raise ValueError(
            "history_store = \"postgresql\" needs psycopg (pip install 'psycopg[binary]')"
        ) from None
    try:
        db = psycopg.connect(dsn, autocommit=True)
        # Several pages may share the database and start at once: one sets the schema up at a time.
        db.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
        try:
            _set_up(db, "DOUBLE PRECISION", f"CAST(FLOOR(ts / {HEALTH_SLOT_S!r}) AS BIGINT)")
        finally:
            db.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))
    except psycopg.Error as e:
        raise ValueError(f"cannot use the PostgreSQL database (history_dsn): {e}") from None
    return PostgresConnection(db)


class PostgresConnection:
    """psycopg's connection taking SQLite's `?` placeholders: the queries stay one set."""

    def __init__(self, db: Any) -> None:
        self.db = db

    def execute(self, query: str, params: Any = ()) -> Any:
        return self.db.execute(query.replace("?", "%s"), params)

    def executemany(self, query: str, rows: list[Any]) -> None:
        if rows:
            self.db.cursor().executemany(query.replace("?", "%s"), rows)

    def close(self) -> None:
        self.db.close()


class HistoryStore:
    """The history in SQLite (or PostgreSQL), written in batches off the event loop."""

    def __init__(
        self, path: Path, *, retention_s: float, clock: Callable[[], float] = time.time, db: Any = None
    ) -> None:
        self.path = path
        self.retention_s = retention_s
        self.clock = clock
        # One connection, used by one worker thread at a time (the lock below), never at once.
        self._db = db if db is not None else sqlite_db(path)
        self._lock = asyncio.Lock()
        self._health: list[tuple[str, float, float | None, float | None, float | None, int]] = []
        self._records: list[tuple[str, str, float, str, str]] = []
        self._slot: dict[str, int] = {}  # each device's last slot written, for the downsampling
        self._dropped = 0

    # -- writes (queued) -------------------------------------------------------------
    def add_health(self, device: str, point: list[float | None]) -> None:
        ts = point[0] or self.clock()
        slot = int(ts // HEALTH_SLOT_S)
        if slot == self._slot.get(device):
            return
        self._slot[device] = slot
        self._queue(self._health, (device, ts, *point[1:4], slot))  # type: ignore[arg-type]

    def add(self, kind: str, device: str, data: dict[str, Any], ref: str = "") -> None:
        """One record; `ref` names what it is (written once per kind and device), else what the
        device said does: its body without the page's own verdict on it, which two pages may not
        share (one has pinned the device's key, the other not yet)."""
        ts = data.get("ts")
        when = float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else self.clock()
        body = json.dumps(data, separators=(",", ":"))
        if not ref:
            said = {k: v for k, v in data.items() if k not in VERDICTS}
            ref = _md5(json.dumps(said, separators=(",", ":")) if len(said) < len(data) else body)
        self._queue(self._records, (kind, device, when, body, ref))

    def _queue(self, rows: list[Any], row: Any) -> None:
        if len(self._health) + len(self._records) >= MAX_PENDING and rows:
            del rows[0]
            self._dropped += 1
        rows.append(row)

    async def flush(self) -> None:
        """What waits, written in one transaction in a worker thread; older rows deleted."""
        health, records = self._health, self._records
        self._health, self._records = [], []
        if self._dropped:
            log.warning("fleet page history: %d rows dropped (the disk did not keep up)", self._dropped)
            self._dropped = 0
        async with self._lock:
            await asyncio.to_thread(self._write, health, records, self.clock() - self.retention_s)

    def _write(self, health: list[Any], records: list[Any], before: float) -> None:
        db = self._db
        db.execute("BEGIN")
        try:
            if health:
                db.executemany(INSERT_HEALTH, health)
            if records:
                db.executemany(INSERT_RECORD, records)
            db.execute("DELETE FROM health WHERE ts < ?", (before,))
            db.execute("DELETE FROM records WHERE ts < ?", (before,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    async def run(self) -> None:
        """Flush every FLUSH_S until cancelled (then once more)."""
        try:
            while True:
                await asyncio.sleep(FLUSH_S)
                try:
                    await self.flush()
                except Exception as e:  # a database's error must not end the writer
                    log.warning("fleet page history not written: %s", e)
        finally:
            await self.flush()

    def close(self) -> None:
        self._db.close()

    # -- reads --------------------------------------------------------------------------
    async def health(self, device: str, since: float) -> list[list[float | None]]:
        """`device`'s points since `since`, oldest first: [ts, cpu_temp_c, load_1m, mem_used_pct]."""
        query = (
            "SELECT ts, cpu_temp_c, load_1m, mem_used_pct FROM health WHERE device = ? AND ts >= ? "
            "ORDER BY ts LIMIT ?"
        )
        rows = await self._read(query, (device, since, 10 * MAX_LIST))
        return [list(r) for r in rows]

    async def records(
        self, kind: str, *, device: str = "", before: float | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The newest `limit` records of `kind` (of `device`, before `before`), newest first."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r:.40}")
        query = "SELECT device, ts, body FROM records WHERE kind = ? AND ts < ?"
        params: list[Any] = [kind, before if before is not None else float("inf")]
        if device:
            query += " AND device = ?"
            params.append(device)
        query += " ORDER BY ts DESC LIMIT ?"
        params.append(min(limit, MAX_LIST))
        rows = await self._read(query, tuple(params))
        return [{**json.loads(body), "device": dev, "ts": ts} for dev, ts, body in rows]

    async def _read(self, query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        async with self._lock:
            return await asyncio.to_thread(lambda: self._db.execute(query, params).fetchall())


def open_history(store: str, path: Path, retention_s: float, dsn: str = "") -> HistoryStore | None:
    """The store `[fleet_page] history_store` names (None for "off"); ValueError for one that cannot be
    had (PostgreSQL without a `history_dsn`, without psycopg, or refusing the connection)."""
    if store == "off":
        return None
    if store == "postgresql":
        if not dsn:
            raise ValueError('history_store = "postgresql" needs history_dsn (e.g. "host=db dbname=fleet")')
        return HistoryStore(path, retention_s=retention_s, db=postgresql_db(dsn))
    return HistoryStore(path, retention_s=retention_s)
