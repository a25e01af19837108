"""One SQLite database for all durable state: sessions, approvals, outbox, custom tools, ...

stdlib sqlite3 in WAL mode: readers never block the writer, and a crash
mid-write loses at most the transaction in flight. Each feature declares its
own tables as named migrations; a migration runs once per database and is
recorded, so upgrading the daemon upgrades the file in place.

Calls are short and local, so they run on the event loop's thread; the
connection is opened with check_same_thread=False so a worker thread may use
it too, serialised by a lock.

The file says what it is: `PRAGMA application_id` is edgeclaw's and
`PRAGMA user_version` the format version (see `store.recovery`, which
checks a file before it is used). A write that meets a full disk gives up
the disk reserve (`store.reserve`) and is tried once more; when the disk is
still full it fails with `StorageFull`, which names what could not be
stored, never with a bare SQLite error.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

if TYPE_CHECKING:
    from edgeclaw.store.reserve import DiskReserve

log = logging.getLogger("edgeclaw.store.db")

DB_FILENAME = "edgeclaw.db"
# "ECLW": PRAGMA application_id of every edgeclaw state database.
APPLICATION_ID = 0x45434C57
# PRAGMA user_version: the file's format. Tables change through migrations; this only changes when
# an older daemon could no longer read the file at all.
FORMAT_VERSION = 1


class StorageFull(BackendError, sqlite3.OperationalError):
    """A write to the state database failed because the disk is full; says what was not stored.

    Also an `sqlite3.OperationalError` (SQLITE_FULL), so code that handles a failing database
    in general handles this case too.
    """

    def __init__(self, what: str, path: Path) -> None:
        from edgeclaw.store.reserve import free_bytes

        self.what = what
        self.path = path
        self.sqlite_errorcode = sqlite3.SQLITE_FULL
        self.sqlite_errorname = "SQLITE_FULL"
        free = free_bytes(path.parent)
        room = f"; {free} bytes free" if free is not None else ""
        super().__init__(
            f"no space left on device: could not store {what} in the state database {path} "
            f"(file system of {path.parent}{room})"
        )


def is_disk_full(e: BaseException) -> bool:
    """SQLITE_FULL: SQLite's word for ENOSPC (and for a database at its size limit)."""
    if not isinstance(e, sqlite3.Error):
        return False
    code = getattr(e, "sqlite_errorcode", None)
    return code == sqlite3.SQLITE_FULL or "database or disk is full" in str(e)


@dataclass(frozen=True)
class Migration:
    """A named, ordered schema change. `name` must stay the same forever once shipped."""

    name: str
    statements: Sequence[str]


T = TypeVar("T")


class Database:
    def __init__(self, path: Path | str, *, reserve: DiskReserve | None = None) -> None:
        self.path = Path(path)
        self.reserve = reserve
        self.last_full: tuple[float, str] | None = None  # (when, what) of the last write a full disk stopped
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
            # Switching to WAL creates the -wal and -shm files: on a full disk this is the first write.
            self._write("the database's journal (opening it)", self._setup)
        except (sqlite3.Error, BackendError) as e:
            self._conn.close()  # e.g. "file is not a database": do not keep the handle open
            if isinstance(e, StorageFull):
                raise
            raise BackendError(f"cannot open the state database {self.path}: {e}") from None

    def _setup(self) -> None:
        self._conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable across application crashes in WAL mode; only a power cut can lose
        # the last transactions, which is the usual trade-off on SD cards.
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        # 256 KiB of page cache, not SQLite's 2 MiB: the file is small and the kernel caches it as
        # well, and on a small board the cache otherwise grows the daemon's memory with each request.
        self._conn.execute("PRAGMA cache_size=-256")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
        )

    def _write(self, what: str, fn: Callable[[], T]) -> T:
        """Run a writing step; on a full disk, release the reserve and try once more."""
        try:
            return fn()
        except sqlite3.Error as e:
            if not is_disk_full(e):
                raise
            if self.reserve is None or not self.reserve.release():
                raise self._full(what) from None
        try:
            return fn()
        except sqlite3.Error as e:
            if is_disk_full(e):
                raise self._full(what) from None
            raise

    def _full(self, what: str) -> StorageFull:
        self.last_full = (time.time(), what)
        log.error("no space left on device: could not store %s in %s", what, self.path)
        return StorageFull(what, self.path)

    # -- identity ---------------------------------------------------------------------------

    def identity(self) -> tuple[int, int]:
        """(PRAGMA application_id, PRAGMA user_version) of the open file."""
        with self._lock:
            app = int(self._conn.execute("PRAGMA application_id").fetchone()[0])
            version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
        return app, version

    def stamp(self) -> None:
        """Mark the file as an edgeclaw state database of this format."""
        with self._lock:
            self._write(
                "the database's identity",
                lambda: (
                    self._conn.execute(f"PRAGMA application_id={APPLICATION_ID}"),
                    self._conn.execute(f"PRAGMA user_version={FORMAT_VERSION}"),
                ),
            )

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
                with self.transaction(f"the schema change {m.name!r}") as conn:
                    for statement in m.statements:
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                        (m.name, time.time()),
                    )
                applied.append(m.name)
        return applied

    @contextmanager
    def transaction(self, what: str = "a change") -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE … COMMIT, rolled back on any exception.

        `what` names the change for the error a full disk gives ("a session
        message"). A COMMIT that meets a full disk is retried once the reserve
        is released (SQLite keeps the transaction open after SQLITE_FULL on
        COMMIT); a statement inside that meets it rolls back, releases the
        reserve for the next write, and raises `StorageFull`.
        """
        with self._lock:
            self._write(what, lambda: self._conn.execute("BEGIN IMMEDIATE"))
            try:
                yield self._conn
            except BaseException as e:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                if is_disk_full(e):
                    if self.reserve is not None:
                        self.reserve.release()  # for the next write; this one is rolled back
                    raise self._full(what) from None
                raise
            try:
                self._write(what, lambda: self._conn.execute("COMMIT"))
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def execute(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, what: str = "a change"
    ) -> sqlite3.Cursor:
        """One statement (its own transaction when none is open); `what` names it for `StorageFull`."""
        with self._lock:
            return self._write(what, lambda: self._conn.execute(sql, params))

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class LazyDatabase:
    """A store's database, brought to the store's migrations on first use.

    Given a callable, it opens the database only then, so commands that never touch the store
    (`edgeclaw tool call read_file`) never create the file. `on_open` runs once, after the
    migrations.
    """

    def __init__(
        self,
        source: Database | Callable[[], Database],
        migrations: Sequence[Migration],
        on_open: Callable[[], None] | None = None,
    ) -> None:
        self._source = source
        self._migrations = migrations
        self._on_open = on_open
        self._db: Database | None = None

    def get(self) -> Database:
        if self._db is None:
            db = self._source if isinstance(self._source, Database) else self._source()
            db.migrate(self._migrations)
            self._db = db
            if self._on_open is not None:
                self._on_open()
        return self._db
