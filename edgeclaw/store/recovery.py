"""Is the file at the state database's path a sound edgeclaw database? If not, set it aside.

Checked before the daemon uses it (`examine`), cheaply: SQLite's header,
`PRAGMA application_id` (edgeclaw's, `db.APPLICATION_ID`; 0 with edgeclaw's
`schema_migrations` table is a file from before the id was stamped),
`PRAGMA user_version` (not newer than this daemon reads) and
`PRAGMA quick_check`, and that the tables it had when last opened are still
there (a dropped table is never made again: its schema change is recorded as
done). A file that fails is moved aside under a timestamped
name, with its -wal and -shm files (`move_aside`), and kept for whoever
wants to look at it; the daemon then starts from the last good backup
(`store.backup`) or, without one, from a fresh database. A 0-byte or
missing file where a database existed before (a backup or the identity
file `edgeclaw.db.id` says so) counts as damage, not as a first start.

A file written by a newer edgeclaw is not damage: it is refused, untouched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass
from edgeclaw.store.db import APPLICATION_ID, FORMAT_VERSION

SQLITE_HEADER = b"SQLite format 3\x00"
SIDE_FILES = ("-wal", "-shm", "-journal")
Kind = Literal["damaged", "foreign"]


@dataclass(frozen=True)
class Problem:
    """Why a file cannot be used as the state database."""

    kind: Kind
    detail: str

    def __str__(self) -> str:
        return self.detail


class NewerFormat(BackendError):
    """The database was written by a newer edgeclaw: left as it is, and not used."""


class CannotCheck(BackendError):
    """The file could not be checked (an I/O error, a full disk, a permission): not a verdict on it.

    Nothing is moved on this account: a sound database on a full disk is not damaged.
    """


# What SQLite says about a file that is not, or no longer, a database. Anything else it says
# (I/O errors, a full disk, a locked or unopenable file) is about the machine, not the file.
_DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


def examine(path: Path, tables: Iterable[str] = ()) -> Problem | None:
    """What is wrong with the existing, non-empty file at `path` (None: a sound edgeclaw database).

    `tables`: tables the database is known to have had (`StateStore` records them); one missing
    is damage too, since the schema changes that made it are recorded as done and would not make
    it again. Opens the file read-only: a doctor run next to a running daemon changes nothing.
    Raises `NewerFormat` for a database of a newer format.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as e:
        raise CannotCheck(f"cannot read the state database {path}: {e.strerror or e}") from None
    if head != SQLITE_HEADER:
        return Problem("damaged", "not an SQLite database (its first bytes are not SQLite's header)")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error as e:
        raise CannotCheck(f"cannot open the state database {path} to check it: {e}") from None
    try:
        return _examine(conn, path) or _missing_tables(conn, tables)
    except sqlite3.Error as e:
        if getattr(e, "sqlite_errorcode", None) in _DAMAGE_CODES:
            return Problem("damaged", f"damaged (SQLite: {e})")
        raise CannotCheck(f"cannot check the state database {path}: {e}") from None
    finally:
        conn.close()


def _examine(conn: sqlite3.Connection, path: Path) -> Problem | None:
    app = int(conn.execute("PRAGMA application_id").fetchone()[0])
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if app not in (0, APPLICATION_ID):
        return Problem("foreign", f"another application's SQLite database (application_id {app:#010x})")
    if app == 0:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        tables = [r[0] for r in rows]
        if tables and "schema_migrations" not in tables:
            shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
            return Problem("foreign", f"an SQLite database that is not edgeclaw's (tables: {shown})")
    if version > FORMAT_VERSION:
        raise NewerFormat(
            f"the state database {path} has format {version}, written by a newer edgeclaw; this one "
            f"reads format {FORMAT_VERSION} at most. Run the newer edgeclaw, or move the file away "
            "to start afresh"
        )
    try:
        findings = [r[0] for r in conn.execute("PRAGMA quick_check(5)")]
    except sqlite3.Error as e:
        # Some damage stops the check itself rather than being listed by it: the same finding.
        if getattr(e, "sqlite_errorcode", None) not in _DAMAGE_CODES:
            raise
        findings = [str(e)]
    if findings != ["ok"]:
        said = "; ".join(" ".join(str(f).split()) for f in findings)  # one line: SQLite's have newlines
        return Problem("damaged", f"damaged (quick_check: {said})")
    return None


# The database's own tables (SQLite's internal ones left out).
TABLES_SQL = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"


def _missing_tables(conn: sqlite3.Connection, tables: Iterable[str]) -> Problem | None:
    expected = set(tables)
    if not expected:
        return None
    missing = sorted(expected - {r[0] for r in conn.execute(TABLES_SQL)})
    if not missing:
        return None
    shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
    return Problem("damaged", f"damaged (tables it had are missing: {shown})")


def move_aside(path: Path, kind: Kind) -> list[Path]:
    """Rename the database and its side files to `NAME.KIND-TIMESTAMP[...]`; returns the new names."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = path.with_name(f"{path.name}.{kind}-{stamp}")
    n = 1
    while any(Path(f"{base}{side}").exists() for side in ("", *SIDE_FILES)):
        base = path.with_name(f"{path.name}.{kind}-{stamp}-{n}")
        n += 1
    moved = []
    for side in ("", *SIDE_FILES):
        source = Path(f"{path}{side}")
        if source.exists():
            target = Path(f"{base}{side}")
            os.rename(source, target)
            moved.append(target)
    return moved


def set_aside_files(path: Path) -> list[Path]:
    """Database files moved aside earlier (damaged or foreign), newest first."""
    found = [
        p
        for p in path.parent.glob(f"{path.name}.*-*")
        if p.name.startswith((f"{path.name}.damaged-", f"{path.name}.foreign-"))
        and not p.name.endswith(SIDE_FILES)
    ]
    return sorted(found, key=lambda p: p.stat().st_mtime if p.exists() else 0, reverse=True)


def restore(backup: Path, path: Path) -> None:
    """Put a copy of `backup` in place at `path` (the backup itself is kept), atomically."""
    tmp = path.with_name(f"{path.name}.restore-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as out, open(backup, "rb") as src:
            shutil.copyfileobj(src, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
