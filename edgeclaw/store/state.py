"""The state database's life: checked before use, recovered when damaged, backed up, given a reserve.

`StateStore.open` is the one way the daemon opens `edgeclaw.db`. It

1. makes the disk reserve (`store.reserve`) when there is room for it;
2. checks the file (`store.recovery.examine`); a damaged or foreign file, or
   a 0-byte or missing one where a database existed before (the identity
   file `edgeclaw.db.id` or a backup says so), is moved aside and kept, and
   the last good backup (`store.backup`) is put in its place, else a fresh
   database; this is logged as an error and kept in `health` for `status`,
   `doctor` and the audit event the daemon sends;
3. opens it (`store.db.Database`) and stamps its identity.

The daemon calls `backup` on a timer and at a clean stop (`close`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import time
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass
from edgeclaw.store.backup import BackupFailed, backup_path, write_backup
from edgeclaw.store.db import APPLICATION_ID, DB_FILENAME, Database
from edgeclaw.store.recovery import TABLES_SQL, CannotCheck, Problem, examine, move_aside, restore
from edgeclaw.store.reserve import RESERVE_SUFFIX, DiskReserve, free_bytes

log = logging.getLogger("edgeclaw.store.state")

IDENTITY_SUFFIX = ".id"
# Less free space than this counts as a full disk when a check fails: SQLite needs a 32 KiB -shm file.
FULL_BELOW_BYTES = 256 * 1024
Outcome = Literal["ok", "created", "restored", "replaced"]


def _iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


@dataclass(frozen=True)
class StateHealth:
    """What opening the state database found and did.

    `outcome`: "ok" (used as found), "created" (first start), "restored" (the
    file was set aside and the last good backup put in its place) or
    "replaced" (set aside, no usable backup: started empty).
    """

    database: Path
    outcome: Outcome
    problem: str = ""
    kind: str = ""  # "damaged" | "foreign" when there was a problem
    moved_to: tuple[Path, ...] = ()
    restored_from: Path | None = None
    backup_taken: float | None = None  # when the restored backup was written
    checked_at: float = field(default_factory=time.time)

    @property
    def recovered(self) -> bool:
        return self.outcome in ("restored", "replaced")

    def summary(self) -> str:
        if not self.recovered:
            return f"{self.database}: {'created' if self.outcome == 'created' else 'ok'}"
        moved = ", ".join(str(p) for p in self.moved_to) or "nothing to move"
        if self.outcome == "restored":
            then = _iso(self.backup_taken) or "unknown time"
            after = f"started from the backup {self.restored_from} (taken {then}); later changes are lost"
        else:
            after = "started with an empty database: sessions, custom tools and the request ledger are gone"
        return f"the state database {self.database} was {self.problem}: moved aside ({moved}); {after}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "database": str(self.database),
            "outcome": self.outcome,
            "problem": self.problem or None,
            "kind": self.kind or None,
            "moved_to": [str(p) for p in self.moved_to],
            "restored_from": str(self.restored_from) if self.restored_from else None,
            "backup_taken": _iso(self.backup_taken),
            "checked_at": _iso(self.checked_at),
        }


class StateStore:
    def __init__(self, state_dir: Path, *, reserve_bytes: int = 0, backup_interval_s: float = 0.0) -> None:
        self.path = state_dir / DB_FILENAME
        self.backup_file = backup_path(self.path)
        self.identity_file = self.path.with_name(self.path.name + IDENTITY_SUFFIX)
        self.reserve = DiskReserve(self.path.with_name(self.path.name + RESERVE_SUFFIX), reserve_bytes)
        self.backup_interval_s = backup_interval_s
        self.backup_on_close = False  # the daemon sets it: a `tool call` leaves backups alone
        self.health: StateHealth | None = None
        self.last_backup: float | None = None
        self.backup_error = ""
        self._db: Database | None = None

    @property
    def opened(self) -> bool:
        return self._db is not None

    # -- opening -------------------------------------------------------------------------------

    def open(self) -> Database:
        """Check, recover if need be, open; idempotent. Raises BackendError when it cannot."""
        if self._db is not None:
            return self._db
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            why = e.strerror or e
            raise BackendError(
                f"cannot open the state database {self.path}: cannot create {self.path.parent}: {why}"
            ) from None
        self.reserve.ensure()
        try:
            health = self._check_and_recover()
        except CannotCheck as e:
            # Checking needs a little room (SQLite's -shm file): on a full disk, the reserve's.
            if not self._disk_full():
                raise
            if not self.reserve.release():
                free = free_bytes(self.path.parent)
                raise BackendError(
                    f"no space left on device: {e} ({free} bytes free on {self.path.parent}); "
                    "free some space there and start again"
                ) from None
            health = self._check_and_recover()
        db = Database(self.path, reserve=self.reserve)
        try:
            app, _ = db.identity()
            if app != APPLICATION_ID:  # fresh, or from before the identity was stamped
                db.stamp()
            tables = self._tables(db)
            if health.recovered or not self.identity_file.exists() or tables != self._recorded_tables():
                self._write_identity(health, tables)
        except BaseException:
            db.close()
            raise
        self.health = health
        self._db = db
        if self.backup_file.exists():
            self.last_backup = self.backup_file.stat().st_mtime
        return db

    def _check_and_recover(self) -> StateHealth:
        existed_before = self.identity_file.exists() or self.backup_file.exists()
        try:
            size: int | None = self.path.stat().st_size
        except FileNotFoundError:
            size = None
        except OSError as e:
            raise BackendError(f"cannot read the state database {self.path}: {e.strerror}") from None
        problem: Problem | None
        if not size:
            if not existed_before:
                return StateHealth(self.path, "created")
            what = "missing" if size is None else "truncated to 0 bytes"
            problem = Problem("damaged", f"{what} although a database existed before")
        else:
            # NewerFormat propagates: such a file is left alone.
            problem = examine(self.path, self._expected_tables())
            if problem is None:
                return StateHealth(self.path, "ok")
        try:
            moved = tuple(move_aside(self.path, "damaged" if problem.kind == "damaged" else "foreign"))
        except OSError as e:
            raise BackendError(
                f"the state database {self.path} is {problem} and cannot be moved aside: {e.strerror}"
            ) from None
        health = self._restore_backup(problem, moved)
        log.error("%s", health.summary())
        return health

    def _restore_backup(self, problem: Problem, moved: tuple[Path, ...]) -> StateHealth:
        plain = StateHealth(self.path, "replaced", str(problem), problem.kind, moved)
        if not self.backup_file.exists():
            return plain
        try:
            bad = examine(self.backup_file)
        except BackendError as e:
            bad = Problem("damaged", str(e))
        if bad is not None:
            log.error("the backup %s cannot be used either: %s", self.backup_file, bad)
            return plain
        taken = self.backup_file.stat().st_mtime
        try:
            restore(self.backup_file, self.path)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                # Starting empty would fail as well; the next start finds the file missing and
                # restores the backup then (the damaged one stays set aside).
                raise BackendError(
                    f"the state database {self.path} was {problem} and was moved aside "
                    f"({', '.join(str(p) for p in moved)}), but there is no space left on device to "
                    f"restore the backup {self.backup_file}: free some space and start again"
                ) from None
            log.error("cannot restore the backup %s: %s", self.backup_file, e.strerror or e)
            return plain
        return StateHealth(self.path, "restored", str(problem), problem.kind, moved, self.backup_file, taken)

    def _disk_full(self) -> bool:
        free = free_bytes(self.path.parent)
        return free is not None and free < FULL_BELOW_BYTES

    def _write_identity(self, health: StateHealth | None, tables: list[str] | None) -> None:
        """The identity file: proof, outside the database, that one existed (a 0-byte file is then
        damage), the tables it had (one dropped is damage too), and a record of the last recovery
        for `doctor`."""
        record: dict[str, Any] = {"application_id": APPLICATION_ID, "database": self.path.name}
        with contextlib.suppress(OSError, ValueError):
            record.update(json.loads(self.identity_file.read_text(encoding="utf-8")))
        record.setdefault("created", _iso(time.time()))
        if health is not None and health.recovered:
            record["last_recovery"] = health.as_dict()
        if tables is not None:
            record["tables"] = tables
        tmp = self.identity_file.with_name(f"{self.identity_file.name}.tmp-{os.getpid()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.identity_file)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            log.warning("cannot write %s: %s", self.identity_file, e.strerror or e)

    def _recorded_tables(self) -> list[str]:
        """The tables the database had when last opened, backed up or closed (the identity file's)."""
        try:
            record = json.loads(self.identity_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        tables = record.get("tables") if isinstance(record, dict) else None
        return sorted(t for t in tables if isinstance(t, str)) if isinstance(tables, list) else []

    def _expected_tables(self) -> list[str]:
        """What the database must have: the recorded tables or, where none are recorded (an identity
        file from before tables were, or none at all), the backup's; the live database is never
        older than its backup, and no schema change drops a table."""
        recorded = self._recorded_tables()
        if recorded or not self.backup_file.exists():
            return recorded
        try:
            conn = sqlite3.connect(f"file:{self.backup_file}?mode=ro", uri=True, timeout=5.0)
        except sqlite3.Error:
            return []
        try:
            return sorted(row[0] for row in conn.execute(TABLES_SQL))
        except sqlite3.Error:
            return []  # a damaged backup is examined, and refused, when it is needed
        finally:
            conn.close()

    @staticmethod
    def _tables(db: Database) -> list[str] | None:
        try:
            return sorted(row[0] for row in db.query(TABLES_SQL))
        except sqlite3.Error as e:
            log.warning("cannot list the state database's tables: %s", e)
            return None

    def _note_tables(self) -> None:
        """Record the tables as they are now (schema changes make them as stores are first used)."""
        if self._db is None:
            return
        tables = self._tables(self._db)
        if tables is not None and tables != self._recorded_tables():
            self._write_identity(None, tables)

    def last_recovery(self) -> dict[str, Any] | None:
        """The last recovery recorded in the identity file (None when there was none)."""
        try:
            record = json.loads(self.identity_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        found = record.get("last_recovery") if isinstance(record, dict) else None
        return found if isinstance(found, dict) else None

    # -- upkeep --------------------------------------------------------------------------------

    def backup_due(self, now: float | None = None) -> bool:
        if self.backup_interval_s <= 0 or self._db is None:
            return False
        if self.last_backup is None:
            return True
        return (time.time() if now is None else now) - self.last_backup >= self.backup_interval_s

    def backup(self) -> bool:
        """Write the backup now (blocking: run it in a thread); False, logged, when it failed."""
        if self._db is None:
            return False
        try:
            size = write_backup(self.path, self.backup_file)
        except BackupFailed as e:
            self.backup_error = str(e)
            log.error("%s", e)
            return False
        self.last_backup = time.time()
        self.backup_error = ""
        self._note_tables()
        log.info("state database backed up to %s (%d bytes)", self.backup_file, size)
        return True

    def close(self) -> None:
        """Back up (when the daemon asked for it) and close. The store stays closed."""
        if self._db is None:
            return
        if self.backup_on_close and self.backup_interval_s > 0:
            self.backup()
        else:
            self._note_tables()
        self._db.close()

    def snapshot(self) -> dict[str, Any]:
        """For `edgeclaw status`: what opening found, backups, the reserve and the disk."""
        out: dict[str, Any] = (
            self.health.as_dict() if self.health else {"database": str(self.path), "outcome": "not opened"}
        )
        out["backup"] = {
            "path": str(self.backup_file),
            "taken": _iso(self.last_backup),
            "interval_s": self.backup_interval_s,
            "error": self.backup_error or None,
        }
        out["last_recovery"] = self.last_recovery()  # by this process or an earlier one
        out["reserve"] = self.reserve.as_dict()
        out["disk_free_bytes"] = free_bytes(self.path.parent)
        full = self._db.last_full if self._db is not None else None
        out["last_disk_full"] = {"at": _iso(full[0]), "what": full[1]} if full else None
        return out
