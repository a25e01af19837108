"""Conversation sessions in the state database: history per session survives restarts.

Messages are stored as JSON rows in order. Starting a fresh session (`/new`)
archives the old history under a dated key rather than deleting it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from edgeclaw.records import dataclass
from edgeclaw.store.db import Database, LazyDatabase, Migration

MIGRATIONS = [
    Migration(
        "sessions-1",
        [
            """CREATE TABLE sessions (
                key TEXT PRIMARY KEY,
                channel TEXT NOT NULL DEFAULT '',
                provider TEXT NOT NULL DEFAULT '',
                created REAL NOT NULL,
                updated REAL NOT NULL
            )""",
            """CREATE TABLE messages (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                session_key TEXT NOT NULL,
                body TEXT NOT NULL,
                tokens INTEGER NOT NULL,
                ts REAL NOT NULL
            )""",
            "CREATE INDEX messages_by_session ON messages (session_key, id)",
        ],
    )
]


_SUMMARY_SELECT = (
    "SELECT s.key, s.channel, s.provider, s.created, s.updated, count(m.id) AS n,"
    " coalesce(sum(m.tokens), 0) AS tokens"
    " FROM sessions s LEFT JOIN messages m ON m.session_key = s.key"
)


@dataclass(frozen=True)
class SessionSummary:
    """One stored session as `sessions_list` shows it."""

    key: str
    channel: str
    provider: str
    messages: int
    tokens: int
    created: float
    updated: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "session": self.key,
            "channel": self.channel,
            "provider": self.provider or None,
            "messages": self.messages,
            "tokens_estimated": self.tokens,
            "created": _iso(self.created),
            "last_activity": _iso(self.updated),
        }


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


class SessionStore:
    """Raw message rows per session; the agent decides what a row means."""

    def __init__(self, db: Database | Callable[[], Database]) -> None:
        self._database = LazyDatabase(db, MIGRATIONS)

    @property
    def db(self) -> Database:
        return self._database.get()

    def append(self, key: str, channel: str, body: str, tokens: int, provider: str = "") -> int:
        """Store one message; returns its row id."""
        now = time.time()
        with self.db.transaction(f"a message of session {key!r}") as conn:
            conn.execute(
                "INSERT INTO sessions (key, channel, provider, created, updated) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(key) DO UPDATE SET updated = excluded.updated, "
                "provider = CASE WHEN excluded.provider != '' THEN excluded.provider ELSE provider END",
                (key, channel, provider, now, now),
            )
            cursor = conn.execute(
                "INSERT INTO messages (session_key, body, tokens, ts) VALUES (?, ?, ?, ?)",
                (key, body, tokens, now),
            )
        return int(cursor.lastrowid or 0)

    def load(self, key: str) -> list[tuple[int, str]]:
        """(row id, body) of every message, oldest first."""
        rows = self.db.query("SELECT id, body FROM messages WHERE session_key = ? ORDER BY id", (key,))
        return [(r["id"], r["body"]) for r in rows]

    def archive(self, key: str) -> str | None:
        """Move the session's history to `key@<timestamp>`; returns the archive key (None when empty)."""
        if not self.db.query("SELECT 1 FROM messages WHERE session_key = ? LIMIT 1", (key,)):
            return None
        now = time.time()
        # Milliseconds keep two quick /new in a row from colliding.
        archived = f"{key}@{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}.{int(now * 1000) % 1000:03d}"
        with self.db.transaction(f"the archive of session {key!r}") as conn:
            conn.execute("UPDATE sessions SET key = ? WHERE key = ?", (archived, key))
            conn.execute("UPDATE messages SET session_key = ? WHERE session_key = ?", (archived, key))
        return archived

    def prune(self, key: str, keep_from_id: int) -> None:
        self.db.execute(
            "DELETE FROM messages WHERE session_key = ? AND id < ?",
            (key, keep_from_id),
            what=f"the trimming of session {key!r}",
        )

    def summary(self, key: str) -> SessionSummary | None:
        rows = self.db.query(
            f"{_SUMMARY_SELECT} WHERE s.key = ? GROUP BY s.key",
            (key,),
        )
        return _summary(rows[0]) if rows else None

    def list(self, limit: int = 50, channel: str | None = None) -> list[SessionSummary]:
        where, params = ("WHERE s.channel = ?", [channel]) if channel else ("", [])
        rows = self.db.query(
            f"{_SUMMARY_SELECT} {where} GROUP BY s.key ORDER BY s.updated DESC LIMIT ?",
            (*params, limit),
        )
        return [_summary(r) for r in rows]

    def describe(self, session_key: str) -> dict[str, Any]:
        """Figures for `session_status`."""
        summary = self.summary(session_key)
        if summary is None:
            return {"messages": 0, "tokens_estimated": 0}
        data = summary.as_dict()
        data.pop("session", None)
        data.pop("channel", None)
        data["conversation_provider"] = data.pop("provider")
        data["conversation_last_activity"] = data.pop("last_activity")
        return data


def _summary(r: Any) -> SessionSummary:
    return SessionSummary(
        r["key"], r["channel"], r["provider"], r["n"], r["tokens"], r["created"], r["updated"]
    )


__all__ = ["MIGRATIONS", "SessionStore", "SessionSummary"]
