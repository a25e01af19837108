"""Runtime-defined custom tools in the state database.

The definition (description, parameters, command template, timeout, working
directory, scope) is stored as JSON; the environment values are sealed with
AES-256-GCM (`SecretBox`, the `crypto` extra) and never stored in the clear. Writing a definition
replaces the old one in a single transaction.
"""

from __future__ import annotations

import json
import time
from dataclasses import field
from typing import Any

from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass
from edgeclaw.store.db import Database, Migration
from edgeclaw.store.secretbox import SecretBox

MIGRATIONS = [
    Migration(
        "custom-tools-1",
        [
            """CREATE TABLE custom_tools (
                name TEXT PRIMARY KEY,
                agent_id TEXT NOT NULL DEFAULT '',
                definition TEXT NOT NULL,
                env_sealed BLOB,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL
            )""",
        ],
    )
]


@dataclass(frozen=True)
class StoredCustomTool:
    """A custom tool defined at runtime, as stored (its env values sealed)."""

    name: str
    agent_id: str
    definition: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    env_problem: str = ""  # why the sealed environment could not be opened ("" = it could, or there is none)


def _context(name: str) -> str:
    return f"custom-tool:{name}"


class CustomToolStore:
    def __init__(self, db: Database, box: SecretBox) -> None:
        self.db = db
        self.box = box
        db.migrate(MIGRATIONS)

    def put(self, name: str, agent_id: str, definition: dict[str, Any], env: dict[str, str]) -> None:
        """Insert or replace `name` (one transaction: readers see the old or the new, never half)."""
        sealed = self.box.seal(json.dumps(env, sort_keys=True).encode(), _context(name)) if env else None
        now = time.time()
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO custom_tools (name, agent_id, definition, env_sealed, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET agent_id = excluded.agent_id,"
                " definition = excluded.definition, env_sealed = excluded.env_sealed,"
                " updated_at = excluded.updated_at",
                (name, agent_id, json.dumps(definition, sort_keys=True), sealed, now, now),
            )

    def delete(self, name: str) -> bool:
        return self.db.execute("DELETE FROM custom_tools WHERE name = ?", (name,)).rowcount > 0

    def get(self, name: str) -> StoredCustomTool | None:
        rows = self.db.query("SELECT * FROM custom_tools WHERE name = ?", (name,))
        return self._load(rows[0]) if rows else None

    def list(self) -> list[StoredCustomTool]:
        """Every row; one whose environment cannot be opened says why in `env_problem` (the rest load)."""
        rows = self.db.query("SELECT * FROM custom_tools ORDER BY name")
        return [self._load(r, tolerant=True) for r in rows]

    def _load(self, row: Any, tolerant: bool = False) -> StoredCustomTool:
        env: dict[str, str] = {}
        problem = ""
        if row["env_sealed"] is not None:
            try:
                plain = self.box.open(bytes(row["env_sealed"]), _context(row["name"]))
            except BackendError as e:
                if not tolerant:
                    raise
                problem, plain = str(e), b"{}"
            try:
                env = json.loads(plain)
            except ValueError:
                raise BackendError(f"custom tool {row['name']!r}: stored environment is corrupt") from None
        return StoredCustomTool(
            name=row["name"],
            agent_id=row["agent_id"],
            definition=json.loads(row["definition"]),
            env=env,
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            env_problem=problem,
        )
