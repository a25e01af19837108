"""Persisted "allow always" decisions for shell commands.

A person who answers allow-always lets that exact command (in its
normalised form) run again for that agent without asking. Each decision is a
row: listable (`edgeclaw approvals list`) and revocable (`edgeclaw approvals
revoke ID`), and it survives restarts because it lives in the state database.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import asdict, fields

from edgeclaw.records import dataclass
from edgeclaw.store.db import Database, Migration

MIGRATIONS = [
    Migration(
        "exec-approvals-1",
        [
            """CREATE TABLE exec_approvals (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                tool TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                pattern TEXT NOT NULL,
                created_at REAL NOT NULL,
                created_by TEXT NOT NULL DEFAULT '',
                last_used_at REAL,
                uses INTEGER NOT NULL DEFAULT 0,
                UNIQUE (tool, agent_id, pattern)
            )""",
        ],
    )
]


@dataclass(frozen=True)
class StoredApproval:
    """An allow-always decision for a command pattern, as stored."""

    id: int
    tool: str
    agent_id: str
    pattern: str
    created_at: float
    created_by: str
    last_used_at: float | None
    uses: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class ApprovalStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        db.migrate(MIGRATIONS)

    def add(self, tool: str, agent_id: str, pattern: str, created_by: str = "") -> StoredApproval:
        """Record an allow-always decision (idempotent: the same pattern twice is one row)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO exec_approvals (tool, agent_id, pattern, created_at, created_by)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (tool, agent_id, pattern) DO NOTHING",
                (tool, agent_id, pattern, time.time(), created_by),
            )
        found = self.find(tool, agent_id, pattern)
        assert found is not None
        return found

    def find(self, tool: str, agent_id: str, pattern: str) -> StoredApproval | None:
        rows = self.db.query(
            "SELECT * FROM exec_approvals WHERE tool = ? AND agent_id = ? AND pattern = ?",
            (tool, agent_id, pattern),
        )
        return _row(rows[0]) if rows else None

    def use(self, tool: str, agent_id: str, pattern: str) -> StoredApproval | None:
        """The matching decision, with its use recorded; None when there is none."""
        found = self.find(tool, agent_id, pattern)
        if found is not None:
            self.db.execute(
                "UPDATE exec_approvals SET uses = uses + 1, last_used_at = ? WHERE id = ?",
                (time.time(), found.id),
            )
        return found

    def list(self) -> list[StoredApproval]:
        return [_row(r) for r in self.db.query("SELECT * FROM exec_approvals ORDER BY id")]

    def revoke(self, approval_id: int) -> bool:
        return self.db.execute("DELETE FROM exec_approvals WHERE id = ?", (approval_id,)).rowcount > 0


def _row(r: sqlite3.Row) -> StoredApproval:
    return StoredApproval(**{f.name: r[f.name] for f in fields(StoredApproval)})
