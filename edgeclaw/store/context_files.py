"""Context files (SOUL.md, USER.md, ...) in the state database: an agent's own, and each caller's.

A row is (agent id, scope, name): scope "" is the agent's own file (the
template every caller falls back to), any other scope is a caller identity's
own copy. Which scope a read or a write uses is decided above this module
(`tools.memory.routing`), by the agent's type.

A *removed* row is a tombstone: BOOTSTRAP.md written empty, or used up, is
gone for that scope *and* hides the agent's template, so a first-run
conversation never starts over because the template is still there.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable

from edgeclaw.records import dataclass
from edgeclaw.store.db import Database, LazyDatabase, Migration

AGENT_SCOPE = ""  # the agent's own file, the fallback of every caller

MIGRATIONS = [
    Migration(
        "context-files-1",
        [
            """CREATE TABLE context_files (
                agent_id TEXT NOT NULL,
                scope TEXT NOT NULL,
                name TEXT NOT NULL,
                content TEXT NOT NULL,
                removed INTEGER NOT NULL DEFAULT 0,
                uses INTEGER NOT NULL DEFAULT 0,
                updated REAL NOT NULL,
                PRIMARY KEY (agent_id, scope, name)
            )""",
        ],
    )
]


@dataclass(frozen=True, slots=True)
class ContextFile:
    agent_id: str
    scope: str
    name: str
    content: str
    removed: bool
    uses: int
    updated: float


class ContextFileStore:
    def __init__(self, db: Database | Callable[[], Database], clock: Callable[[], float] = time.time) -> None:
        self._database = LazyDatabase(db, MIGRATIONS)
        self._clock = clock

    @property
    def db(self) -> Database:
        return self._database.get()

    def get(self, agent_id: str, scope: str, name: str) -> ContextFile | None:
        """The row itself (a tombstone included); no fallback."""
        rows = self.db.query(
            "SELECT * FROM context_files WHERE agent_id = ? AND scope = ? AND name = ?",
            (agent_id, scope, name),
        )
        return _row(rows[0]) if rows else None

    def put(self, agent_id: str, scope: str, name: str, content: str) -> bool:
        """Write the file for that scope; True when it was new (a tombstone counts as absent)."""
        now = self._clock()
        with self.db.transaction(f"the context file {name}") as conn:
            old = conn.execute(
                "SELECT removed FROM context_files WHERE agent_id = ? AND scope = ? AND name = ?",
                (agent_id, scope, name),
            ).fetchone()
            conn.execute(
                "INSERT INTO context_files (agent_id, scope, name, content, removed, uses, updated)"
                " VALUES (?, ?, ?, ?, 0, 0, ?) ON CONFLICT (agent_id, scope, name) DO UPDATE SET"
                " content = excluded.content, removed = 0, uses = 0, updated = excluded.updated",
                (agent_id, scope, name, content, now),
            )
        return old is None or bool(old["removed"])

    def remove(self, agent_id: str, scope: str, name: str, *, tombstone: bool) -> bool:
        """Delete the file for that scope; with `tombstone`, also hide the agent's file from it.

        True when there was a file (not a tombstone) to remove.
        """
        now = self._clock()
        with self.db.transaction(f"the removal of the context file {name}") as conn:
            old = conn.execute(
                "SELECT removed FROM context_files WHERE agent_id = ? AND scope = ? AND name = ?",
                (agent_id, scope, name),
            ).fetchone()
            if tombstone:
                conn.execute(
                    "INSERT INTO context_files (agent_id, scope, name, content, removed, uses, updated)"
                    " VALUES (?, ?, ?, '', 1, 0, ?) ON CONFLICT (agent_id, scope, name) DO UPDATE SET"
                    " content = '', removed = 1, updated = excluded.updated",
                    (agent_id, scope, name, now),
                )
            else:
                conn.execute(
                    "DELETE FROM context_files WHERE agent_id = ? AND scope = ? AND name = ?",
                    (agent_id, scope, name),
                )
        return old is not None and not old["removed"]

    def note_use(self, agent_id: str, scope: str, name: str) -> int:
        """Count one more use (a prompt it went into); returns the count."""
        with self.db.transaction(f"the use count of the context file {name}") as conn:
            conn.execute(
                "UPDATE context_files SET uses = uses + 1 WHERE agent_id = ? AND scope = ? AND name = ?",
                (agent_id, scope, name),
            )
            row = conn.execute(
                "SELECT uses FROM context_files WHERE agent_id = ? AND scope = ? AND name = ?",
                (agent_id, scope, name),
            ).fetchone()
        return int(row["uses"]) if row is not None else 0

    def all(self) -> list[ContextFile]:
        return [_row(r) for r in self.db.query("SELECT * FROM context_files ORDER BY agent_id, scope, name")]

    def replace_all(self, files: Iterable[ContextFile], *, prune: bool) -> int:
        """Write many rows in one transaction; with `prune`, delete every row not among them."""
        with self.db.transaction("the imported context files") as conn:
            return self.write_rows(conn, files, prune=prune)

    def write_rows(self, conn: sqlite3.Connection, files: Iterable[ContextFile], *, prune: bool) -> int:
        """`replace_all` inside a transaction someone else holds (an import of memory and files).

        Open `db` before that transaction starts: the table's migration needs one of its own.
        """
        items = list(files)
        if prune:
            conn.execute("DELETE FROM context_files")
        for f in items:
            conn.execute(
                "INSERT INTO context_files (agent_id, scope, name, content, removed, uses, updated)"
                " VALUES (?, ?, ?, ?, ?, 0, ?) ON CONFLICT (agent_id, scope, name) DO UPDATE SET"
                " content = excluded.content, removed = excluded.removed, updated = excluded.updated",
                (f.agent_id, f.scope, f.name, f.content, int(f.removed), f.updated),
            )
        return len(items)


def _row(r: sqlite3.Row) -> ContextFile:
    return ContextFile(
        r["agent_id"], r["scope"], r["name"], r["content"], bool(r["removed"]), r["uses"], r["updated"]
    )
