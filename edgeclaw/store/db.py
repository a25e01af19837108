"""One SQLite database for all durable state: sessions, approvals, outbox, custom tools, ...

stdlib sqlite3 in WAL mode: readers never block the writer, and a crash
mid-write loses at most the transaction in flight. Each feature declares its
own tables as named migrations; a migration runs once per database and is
recorded, so upgrading the daemon upgrades the file in place.

Calls are short and local, so they run on the event loop's thread; the
connection is opened with check_same_thread=False so a worker thread may use
it too, serialised by a lock.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeclaw.errors import BackendError

DB_FILENAME = "edgeclaw.db"


@dataclass(frozen=True)
class Migration:
    """A named, ordered schema change. `name` must stay the same forever once shipped."""

    name: str
    statements: Sequence[str]


class Database:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            if str(path) != ":memory:":
                # Sessions, approvals and the outbox are nobody else's business: owner-only modes,
                # whatever the umask. SQLite gives the -wal and -shm files the database file's mode.
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        except OSError as e:
            raise BackendError(
                f"cannot open the state database {self.path}: cannot create {self.path.parent}: "
                f"{e.strerror or e}"
            ) from None
        try:
            self._conn = sqlite3.connect(
                str(path), check_same_thread=False, isolation_level=None, timeout=5.0
            )
        except sqlite3.Error as e:
            raise BackendError(f"cannot open the state database {self.path}: {e}") from None
        try:
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL is durable across application crashes in WAL mode; only a power cut can lose
            # the last transactions, which is the usual trade-off on SD cards.
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations"
                " (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
            )
        except sqlite3.Error as e:
            self._conn.close()  # e.g. "file is not a database": do not keep the handle open
            raise BackendError(f"cannot open the state database {self.path}: {e}") from None

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> Database:
        return cls(state_dir / DB_FILENAME)

    def migrate(self, migrations: Iterable[Migration]) -> list[str]:
        """Apply the migrations not yet applied, in order, one transaction each; returns their names."""
        applied: list[str] = []
        with self._lock:
            done = {row[0] for row in self._conn.execute("SELECT name FROM schema_migrations")}
            for m in migrations:
                if m.name in done:
                    continue
                with self.transaction() as conn:
                    for statement in m.statements:
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                        (m.name, time.time()),
                    )
                applied.append(m.name)
        return applied

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE … COMMIT, rolled back on any exception."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            else:
                self._conn.execute("COMMIT")

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._conn.execute(sql, params)

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
