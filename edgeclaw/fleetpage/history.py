"""The fleet page's history on disk: health points, events and broadcast answers in SQLite, so a restarted
page still draws the last hour and lists what happened.

One file (`[fleet_page] history_file`, default `fleet-page-history.db` in the state directory, WAL). What
the window takes is queued here and written in batches by a thread every `FLUSH_S` (the event loop never
waits on the disk); rows older than `retention_s` are deleted at start and every hour. At start the page
reads back what its window holds in memory: each device's points of the last `history_s` (handed to the
device's row when its retained status arrives) and the newest events.

Only what verified (or came from a device that signs nothing, marked so) reaches the window, so only that
is stored; nothing a forger sent outlives the page's memory either.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("edgeclaw.fleetpage")

FLUSH_S = 1.0
PRUNE_EVERY_S = 3600.0
SCHEMA = """
CREATE TABLE IF NOT EXISTS points (device TEXT NOT NULL, ts REAL NOT NULL, figures TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS points_by_device ON points (device, ts);
CREATE TABLE IF NOT EXISTS events (ts REAL NOT NULL, device TEXT NOT NULL, event TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_ts ON events (ts);
CREATE TABLE IF NOT EXISTS answers (ts REAL NOT NULL, device TEXT NOT NULL, tool TEXT NOT NULL,
    answer TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS answers_by_ts ON answers (ts);
"""
TABLES = ("points", "events", "answers")


class FleetHistory:
    """The history file: `record_*` queue rows (from the event loop), `run` writes them."""

    def __init__(self, path: Path, retention_s: float, clock: Any = time.time) -> None:
        self.path = path
        self.retention_s = retention_s
        self.clock = clock
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._lock = threading.Lock()  # the connection, between the writer thread and reads
        self._queued: dict[str, list[tuple[Any, ...]]] = {table: [] for table in TABLES}
        self._queue_lock = threading.Lock()  # rows queued on the event loop, taken by the writer thread
        self._pruned_at = 0.0
        self.prune()

    # -- what the window and the page record ----------------------------------------------
    def _queue(self, table: str, row: tuple[Any, ...]) -> None:
        with self._queue_lock:
            self._queued[table].append(row)

    def record_point(self, device: str, point: list[float | None]) -> None:
        self._queue("points", (device, point[0], json.dumps(point[1:])))

    def record_event(self, event: dict[str, Any]) -> None:
        ts = event.get("ts") if isinstance(event.get("ts"), int | float) else self.clock()
        self._queue("events", (ts, str(event.get("device", "")), json.dumps(event)))

    def record_answers(self, tool: str, answers: list[dict[str, Any]]) -> None:
        now = self.clock()
        for answer in answers:
            self._queue("answers", (now, str(answer.get("device", "")), tool, json.dumps(answer)))

    # -- reading back at start ---------------------------------------------------------------
    def points_since(self, since: float) -> dict[str, list[list[float | None]]]:
        """Each device's points from `since` on, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT device, ts, figures FROM points WHERE ts >= ? ORDER BY device, ts", (since,)
            ).fetchall()
        out: dict[str, list[list[float | None]]] = {}
        for device, ts, figures in rows:
            out.setdefault(device, []).append([ts, *json.loads(figures)])
        return out

    def recent_events(self, limit: int) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT event FROM events ORDER BY ts DESC LIMIT ?", (limit,)).fetchall()
        return [json.loads(event) for (event,) in reversed(rows)]

    def recent_answers(self, limit: int) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT ts, tool, answer FROM answers ORDER BY ts DESC LIMIT ?", (limit,)
            ).fetchall()
        return [{"ts": ts, "tool": tool, **json.loads(answer)} for ts, tool, answer in rows]

    # -- writing -------------------------------------------------------------------------------
    def flush(self) -> int:
        """Write what is queued (one transaction); how many rows."""
        with self._queue_lock:
            batch = {table: rows for table, rows in self._queued.items() if rows}
            self._queued = {table: [] for table in TABLES}
        if not batch:
            return 0
        columns = {"points": 3, "events": 3, "answers": 4}
        with self._lock:
            self._db.execute("BEGIN")
            try:
                for table, rows in batch.items():
                    marks = ", ".join("?" * columns[table])
                    self._db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
                self._db.execute("COMMIT")
            except sqlite3.Error:
                self._db.execute("ROLLBACK")
                raise
        return sum(len(rows) for rows in batch.values())

    def prune(self) -> None:
        cutoff = self.clock() - self.retention_s
        with self._lock:
            for table in TABLES:
                self._db.execute(f"DELETE FROM {table} WHERE ts < ?", (cutoff,))
        self._pruned_at = self.clock()

    async def run(self) -> None:
        """Flush every FLUSH_S in a thread (and prune every hour) until cancelled; then a last flush."""
        try:
            while True:
                await asyncio.sleep(FLUSH_S)
                try:
                    await asyncio.to_thread(self.flush)
                    if self.clock() - self._pruned_at >= PRUNE_EVERY_S:
                        await asyncio.to_thread(self.prune)
                except sqlite3.Error as e:
                    log.error("fleet page history: cannot write %s: %s", self.path, e)
        finally:
            self.close()

    def close(self) -> None:
        try:
            self.flush()
        except sqlite3.Error as e:
            log.error("fleet page history: the last rows are lost: %s", e)
        with self._lock:
            self._db.close()
