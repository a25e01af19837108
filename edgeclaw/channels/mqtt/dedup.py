"""The request ledger: no request is run twice, and every copy of it is answered.

QoS 1 is at-least-once: a command can arrive again (a redelivery after a
reconnect, or the caller retrying because our answer was lost). Each request
with an `id` is recorded before it runs, under a key made of the id *and* a
digest of what it asks for, so two different requests that happen to reuse
an id are not confused:

* not seen within the window → run it;
* seen and finished → answer again from the stored answer, without running;
* seen and running in this process → answer this copy too when it finishes;
* seen, marked running, but not by this process → the daemon stopped while it
  ran: it may have had effects, so it is answered with an error and not run
  again (at-most-once beats a doubled actuator command).

The ledger lives in SQLite so a restart does not forget what already ran.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

from edgeclaw.store.db import Database, Migration

MIGRATIONS = [
    Migration(
        "mqtt-requests-1",
        [
            # WITHOUT ROWID and no index on `created`: the INSERT before every request is on the
            # caller's critical path, and this halves its cost; the purge scans instead, in chunks.
            """CREATE TABLE mqtt_requests (
                key TEXT PRIMARY KEY,
                state TEXT NOT NULL,
                answer BLOB,
                created REAL NOT NULL
            ) WITHOUT ROWID""",
        ],
    )
]

Route = TypeVar("Route")
PURGE_CHUNK = 2000


class Seen(Enum):
    NEW = "new"
    DONE = "done"
    RUNNING = "running"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class Lookup:
    seen: Seen
    answer: bytes | None = None


def request_key(kind: str, request_id: str, content: Any) -> str:
    """The ledger key: the id plus a digest of the request's content."""
    blob = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    digest = hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return f"{kind}:{request_id}:{digest}"


class RequestLedger(Generic[Route]):
    def __init__(self, db: Database, window_s: float) -> None:
        self.db = db
        self.window_s = window_s
        db.migrate(MIGRATIONS)
        self._running: set[str] = set()
        self._waiters: defaultdict[str, list[Route]] = defaultdict(list)

    @property
    def enabled(self) -> bool:
        return self.window_s > 0

    def lookup(self, key: str) -> Lookup:
        if key in self._running:
            return Lookup(Seen.RUNNING)
        rows = self.db.query("SELECT state, answer, created FROM mqtt_requests WHERE key = ?", (key,))
        if not rows or rows[0]["created"] < time.time() - self.window_s:
            return Lookup(Seen.NEW)
        state, answer = rows[0]["state"], rows[0]["answer"]
        if state == "done":
            return Lookup(Seen.DONE, bytes(answer))
        return Lookup(Seen.INTERRUPTED)

    def begin(self, key: str) -> Lookup:
        """Look the request up and, when it is new, record it as running (durably, before it runs).

        One INSERT in the common case (a new id): the SELECT runs only when the key is already there.
        """
        if key in self._running:
            return Lookup(Seen.RUNNING)
        now = time.time()
        inserted = self.db.execute(
            "INSERT INTO mqtt_requests (key, state, answer, created) VALUES (?, 'running', NULL, ?)"
            " ON CONFLICT(key) DO NOTHING",
            (key, now),
        ).rowcount
        if inserted:
            self._running.add(key)
            return Lookup(Seen.NEW)
        found = self.lookup(key)
        if found.seen is Seen.NEW:  # an entry from beyond the window: start afresh
            self.start(key)
        return found

    def start(self, key: str) -> None:
        """Record the request as running, durably, before it runs."""
        self._running.add(key)
        self.db.execute(
            "INSERT INTO mqtt_requests (key, state, answer, created) VALUES (?, 'running', NULL, ?)"
            " ON CONFLICT(key) DO UPDATE SET state = 'running', answer = NULL, created = excluded.created",
            (key, time.time()),
        )

    def wait(self, key: str, route: Route) -> None:
        """Answer `route` too when the running request `key` finishes."""
        self._waiters[key].append(route)

    def finish(self, key: str, answer: bytes) -> list[Route]:
        """Store the answer; returns the routes of the copies that arrived while it ran."""
        self._running.discard(key)
        self.db.execute(
            "INSERT INTO mqtt_requests (key, state, answer, created) VALUES (?, 'done', ?, ?)"
            " ON CONFLICT(key) DO UPDATE SET state = 'done', answer = excluded.answer",
            (key, answer, time.time()),
        )
        return self._waiters.pop(key, [])

    def finish_many(self, finished: list[tuple[str, bytes]]) -> list[tuple[bytes, list[Route]]]:
        """`finish` for several requests in one transaction; returns (answer, waiting routes) pairs."""
        now = time.time()
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT INTO mqtt_requests (key, state, answer, created) VALUES (?, 'done', ?, ?)"
                " ON CONFLICT(key) DO UPDATE SET state = 'done', answer = excluded.answer",
                [(key, answer, now) for key, answer in finished],
            )
        out = []
        for key, answer in finished:
            self._running.discard(key)
            waiters = self._waiters.pop(key, None)
            if waiters:
                out.append((answer, waiters))
        return out

    def abandon(self, key: str) -> list[Route]:
        """Forget a request that never ran (refused for being busy, stopped before it started)."""
        self._running.discard(key)
        self.db.execute("DELETE FROM mqtt_requests WHERE key = ? AND state = 'running'", (key,))
        return self._waiters.pop(key, [])

    def purge(self, limit: int = PURGE_CHUNK) -> int:
        """Drop up to `limit` entries older than the window; returns how many (call again while it
        returns `limit`, yielding in between, so a large ledger never stalls the event loop)."""
        cutoff = time.time() - self.window_s
        return self.db.execute(
            "DELETE FROM mqtt_requests WHERE key IN"
            " (SELECT key FROM mqtt_requests WHERE created < ? LIMIT ?)",
            (cutoff, limit),
        ).rowcount
