"""Subagents in the state database: one row per child, from its spawn to its archiving.

A row holds what is needed to tell the parent about the child after a
restart: the parent's session and the route its answers take (channel, chat
id, caller), the child's task, state and result, and whether the parent has
been told. A daemon killed while children ran finds them `spawning` or
`running` at the next start: they become `interrupted`, unannounced, and are
announced like any other ending.

States: spawning → running → completed | failed | cancelled | interrupted →
archived. Rows archived for a week are deleted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Any

from edgeclaw.records import dataclass
from edgeclaw.store.db import Database, Migration

MIGRATIONS = [
    Migration(
        "subagents-1",
        [
            """CREATE TABLE subagents (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                parent_session TEXT NOT NULL,
                session_key TEXT NOT NULL DEFAULT '',
                label TEXT NOT NULL DEFAULT '',
                task TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                depth INTEGER NOT NULL,
                detached INTEGER NOT NULL DEFAULT 0,
                state TEXT NOT NULL,
                result TEXT NOT NULL DEFAULT '',
                announce INTEGER NOT NULL DEFAULT 1,
                announced INTEGER NOT NULL DEFAULT 0,
                channel TEXT NOT NULL,
                chat_id TEXT NOT NULL DEFAULT '',
                peer_kind TEXT NOT NULL DEFAULT '',
                caller TEXT NOT NULL DEFAULT '',
                sender TEXT NOT NULL DEFAULT '',
                parent_agent TEXT NOT NULL DEFAULT 'main',
                created REAL NOT NULL,
                ended REAL,
                archived REAL
            )""",
            "CREATE INDEX subagents_by_parent ON subagents (parent_session, id)",
            "CREATE INDEX subagents_by_state ON subagents (state)",
        ],
    )
]

ACTIVE = ("spawning", "running")
ENDED = ("completed", "failed", "cancelled", "interrupted")
STATES = (*ACTIVE, *ENDED, "archived")
DELETE_ARCHIVED_AFTER_S = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class SubagentRow:
    id: int
    parent_session: str
    session_key: str
    label: str
    task: str
    agent_id: str
    depth: int
    detached: bool
    state: str
    result: str
    announce: bool  # False: the parent learns the outcome itself (`run`, `delegate`, its own cancel)
    announced: bool
    channel: str
    chat_id: str
    peer_kind: str
    caller: str
    sender: str
    parent_agent: str
    created: float
    ended: float | None
    archived: float | None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "label": self.label or None,
            "state": self.state,
            "agent": self.agent_id,
            "depth": self.depth,
            "detached": self.detached,
            "task": self.task,
            "result": self.result or None,
            "created": _iso(self.created),
            "ended": _iso(self.ended) if self.ended else None,
        }


_COLUMNS = [f.name for f in fields(SubagentRow)]


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _row(r: Any) -> SubagentRow:
    values = {name: r[name] for name in _COLUMNS}
    for flag in ("detached", "announce", "announced"):
        values[flag] = bool(values[flag])
    return SubagentRow(**values)


class SubagentStore:
    def __init__(self, db: Database | Callable[[], Database], clock: Callable[[], float] = time.time) -> None:
        self._source = db
        self._db: Database | None = None
        self._clock = clock

    @property
    def db(self) -> Database:
        if self._db is None:
            db = self._source if isinstance(self._source, Database) else self._source()
            db.migrate(MIGRATIONS)
            self._db = db
        return self._db

    def create(
        self,
        *,
        parent_session: str,
        task: str,
        label: str,
        agent_id: str,
        depth: int,
        detached: bool,
        announce: bool,
        channel: str,
        chat_id: str,
        peer_kind: str,
        caller: str,
        sender: str,
        parent_agent: str,
        session_prefix: str,
    ) -> SubagentRow:
        """A new child in state `spawning`; its session key is `session_prefix` + its id."""
        with self.db.transaction("a new subagent") as conn:
            cursor = conn.execute(
                "INSERT INTO subagents (parent_session, label, task, agent_id, depth, detached, state,"
                " announce, channel, chat_id, peer_kind, caller, sender, parent_agent, created)"
                " VALUES (?, ?, ?, ?, ?, ?, 'spawning', ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    parent_session,
                    label,
                    task,
                    agent_id,
                    depth,
                    int(detached),
                    int(announce),
                    channel,
                    chat_id,
                    peer_kind,
                    caller,
                    sender,
                    parent_agent,
                    self._clock(),
                ),
            )
            child_id = int(cursor.lastrowid or 0)
            conn.execute(
                "UPDATE subagents SET session_key = ? WHERE id = ?", (f"{session_prefix}{child_id}", child_id)
            )
        found = self.get(child_id)
        assert found is not None
        return found

    def get(self, child_id: int) -> SubagentRow | None:
        rows = self.db.query("SELECT * FROM subagents WHERE id = ?", (child_id,))
        return _row(rows[0]) if rows else None

    def by_session(self, session_key: str) -> SubagentRow | None:
        rows = self.db.query("SELECT * FROM subagents WHERE session_key = ?", (session_key,))
        return _row(rows[0]) if rows else None

    def set_state(self, child_id: int, state: str) -> None:
        self.db.execute(
            "UPDATE subagents SET state = ? WHERE id = ? AND state IN ('spawning', 'running')",
            (state, child_id),
            what=f"subagent {child_id}'s state",
        )

    def end(self, child_id: int, state: str, result: str, *, announce: bool | None = None) -> None:
        """A child's ending: its state, result, and (when given) whether the parent is to be told."""
        assert state in ENDED, state
        sql = "UPDATE subagents SET state = ?, result = ?, ended = ?"
        params: list[Any] = [state, result, self._clock()]
        if announce is not None:
            sql += ", announce = ?"
            params.append(int(announce))
        self.db.execute(f"{sql} WHERE id = ?", (*params, child_id), what=f"subagent {child_id}'s result")

    def mark_announced(self, ids: Iterable[int]) -> None:
        ids = list(ids)
        if ids:
            marks = ",".join("?" * len(ids))
            self.db.execute(
                f"UPDATE subagents SET announced = 1 WHERE id IN ({marks})", ids, what="announced subagents"
            )

    def children(self, parent_session: str, *, archived: bool = False) -> list[SubagentRow]:
        """The parent's children, oldest first (archived ones only when asked)."""
        where = "" if archived else " AND state != 'archived'"
        rows = self.db.query(
            f"SELECT * FROM subagents WHERE parent_session = ?{where} ORDER BY id", (parent_session,)
        )
        return [_row(r) for r in rows]

    def count_active(self, parent_session: str | None = None) -> int:
        if parent_session is None:
            rows = self.db.query("SELECT count(*) AS n FROM subagents WHERE state IN ('spawning', 'running')")
        else:
            rows = self.db.query(
                "SELECT count(*) AS n FROM subagents WHERE state IN ('spawning', 'running')"
                " AND parent_session = ?",
                (parent_session,),
            )
        return int(rows[0]["n"])

    def interrupt_leftovers(self) -> list[SubagentRow]:
        """At start: every child a stopped daemon left spawning or running becomes `interrupted`."""
        rows = self.db.query("SELECT * FROM subagents WHERE state IN ('spawning', 'running')")
        if rows:
            self.db.execute(
                "UPDATE subagents SET state = 'interrupted', ended = ?,"
                " result = 'the daemon stopped while this subagent ran; its work may be half done'"
                " WHERE state IN ('spawning', 'running')",
                (self._clock(),),
                what="interrupted subagents",
            )
        return [_row(r) for r in rows]

    def left_by_last_run(self) -> bool:
        """Whether a start has anything to recover: children left spawning or running, or ended
        ones whose parent is still to be told (see `interrupt_leftovers`, `unannounced`)."""
        row = self.db.query(
            "SELECT 1 FROM subagents WHERE state IN ('spawning', 'running') OR (announce = 1"
            " AND announced = 0 AND state IN ('completed', 'failed', 'cancelled', 'interrupted')) LIMIT 1"
        )
        return bool(row)

    def unannounced(self) -> list[SubagentRow]:
        """Ended children whose parent is to be told and has not been, oldest first."""
        rows = self.db.query(
            "SELECT * FROM subagents WHERE announce = 1 AND announced = 0"
            " AND state IN ('completed', 'failed', 'cancelled', 'interrupted') ORDER BY id"
        )
        return [_row(r) for r in rows]

    def archive(self, older_than_s: float) -> int:
        """Archive children that ended more than `older_than_s` ago and were announced (or need not
        be); delete those archived a week ago. Returns how many were archived."""
        now = self._clock()
        with self.db.transaction("archiving subagents") as conn:
            cursor = conn.execute(
                "UPDATE subagents SET state = 'archived', archived = ?"
                " WHERE state IN ('completed', 'failed', 'cancelled', 'interrupted')"
                " AND ended <= ? AND (announced = 1 OR announce = 0)",
                (now, now - older_than_s),
            )
            conn.execute(
                "DELETE FROM subagents WHERE state = 'archived' AND archived <= ?",
                (now - DELETE_ARCHIVED_AFTER_S,),
            )
        return cursor.rowcount


__all__ = ["ACTIVE", "ENDED", "MIGRATIONS", "STATES", "SubagentRow", "SubagentStore"]
