"""The state database's backup: one last good copy, `edgeclaw.db.backup`, made with `VACUUM INTO`.

Written through a separate read connection (WAL: the daemon keeps writing
meanwhile) into a temporary file that is fsync'd and then renamed over the
previous backup, so a backup is always either the old copy or a complete new
one. The live database is checked (`PRAGMA quick_check`) first: a damaged
database never replaces a good backup.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from edgeclaw.errors import BackendError

BACKUP_SUFFIX = ".backup"


class BackupFailed(BackendError):
    """No new backup was written; the previous one (if any) is unchanged."""


def backup_path(database: Path) -> Path:
    return database.with_name(database.name + BACKUP_SUFFIX)


def write_backup(database: Path, target: Path) -> int:
    """Copy `database` to `target` atomically; returns the backup's size in bytes."""
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        # VACUUM INTO accepts an empty file: made first, so the copy is owner-only from the start.
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        conn = sqlite3.connect(str(database), timeout=5.0)
        try:
            findings = [r[0] for r in conn.execute("PRAGMA quick_check(3)")]
            if findings != ["ok"]:
                raise BackupFailed(
                    f"the state database {database} failed its check, so it was not backed up: "
                    + "; ".join(" ".join(str(f).split()) for f in findings)
                )
            conn.execute("VACUUM INTO ?", (str(tmp),))
        finally:
            conn.close()
        fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        os.replace(tmp, target)
        with contextlib.suppress(OSError):
            dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return size
    except (OSError, sqlite3.Error) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise BackupFailed(f"cannot back up the state database to {target}: {reason}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
