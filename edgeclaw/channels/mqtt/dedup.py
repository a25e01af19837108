"""The request ledger: no request is run twice, every copy of it is answered, and every request
the daemon took in is answered even when the daemon dies on the way.

QoS 1 is at-least-once: a command can arrive again (a redelivery after a
reconnect, or the caller retrying because our answer was lost). Each request
with an `id` is recorded before the broker gets our PUBACK for it, under a key
made of the id *and* a digest of what it asks for, so two different requests
that happen to reuse an id are not confused:

* not in the ledger → run it;
* answered → answer again from the stored answer, without running;
* running in this process → answer this copy too when it finishes;

(those two for a caller's retry: a copy the broker redelivers, with the DUP
flag, is not answered again -- see channels.mqtt.serving)
* recorded, unfinished, but not by this process → the daemon stopped while
  it waited or ran: it is answered `interrupted` and not run again (at most
  once beats a doubled actuator command).

A row is never "new" again while it exists, however old it is: the window
(`window_s`) is how long rows are kept at least after their answer; the
housekeeping purge removes them after that, and only then may the id run
again.

A row also keeps where its answer goes (the Response Topic and Correlation
Data) and what the answer needs to name the request (its id and tool, chat
session or admin action). At start-up the daemon answers every row a previous
process left unfinished, saying whether the call may have run (`queued`: it
never started; `running`: it had started). Requests without an id (chat
messages) and every request while deduplication is off are recorded the same
way under a key of their own, so a crash cannot leave them unanswered either;
their rows go when they are answered.

The answer and the row's `done` are written in one transaction with the
answer's outbox row (see `Finished.record`), so after a crash a request is
either still unfinished (and answered `interrupted`) or has its answer on
the way, never both and never neither.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import field
from enum import Enum
from typing import Any, Generic, TypeVar

from edgeclaw.records import dataclass
from edgeclaw.store.db import Database, Migration, StorageFull

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
    ),
    Migration(
        "mqtt-requests-2-route",
        [
            # Where the answer goes and what it names, so an unfinished request can be answered
            # after a crash without the request itself.
            "ALTER TABLE mqtt_requests ADD COLUMN topic TEXT",
            "ALTER TABLE mqtt_requests ADD COLUMN correlation BLOB",
            "ALTER TABLE mqtt_requests ADD COLUMN request_id TEXT",
            "ALTER TABLE mqtt_requests ADD COLUMN label TEXT",
        ],
    ),
]

Route = TypeVar("Route")
PURGE_CHUNK = 2000
# Copies of one running request that wait for its answer; more are answered "busy" at once, so a
# caller repeating one id in a loop cannot grow the daemon's memory.
MAX_WAITERS = 16
# Keys of requests recorded only so that a crash cannot leave them unanswered (no id, or
# deduplication off): never looked up, deleted once answered.
JOURNAL_PREFIX = "~"

# Row states.
QUEUED = "queued"  # recorded, waiting for a slot: it has not started
RUNNING = "running"  # started: it may have had effects
DONE = "done"  # answered; the answer is kept for repeats


class Seen(Enum):
    NEW = "new"
    DONE = "done"
    RUNNING = "running"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class Lookup:
    seen: Seen
    answer: bytes | None = None
    may_have_run: bool = True  # for INTERRUPTED: had it started when the daemon stopped?


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a row keeps so that its request can be answered without it."""

    topic: str
    correlation: bytes | None = None
    request_id: str | None = None
    label: str | None = None  # the tool, the chat session or the admin action


@dataclass(frozen=True, slots=True)
class Unfinished:
    """A request a previous process recorded and never answered."""

    key: str
    kind: str  # "tool", "chat" or "admin"
    recorded: Recorded
    may_have_run: bool  # it had started (state running), rather than waiting for a slot


@dataclass(slots=True)
class Finished(Generic[Route]):
    """A request concluded in memory; `record` writes that to the ledger inside the transaction
    that stores its answer in the outbox, so the two are never apart."""

    waiters: list[Route] = field(default_factory=list)
    record: Callable[[sqlite3.Connection], None] | None = None


def request_key(kind: str, request_id: str, content: Any) -> str:
    """The ledger key: the id plus a digest of the request's content."""
    blob = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    digest = hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return f"{kind}:{request_id}:{digest}"


def journal_key(kind: str) -> str:
    """A key of its own for a request that is recorded but never looked up."""
    return f"{JOURNAL_PREFIX}{kind}:{uuid.uuid4().hex}"


def kind_of(key: str) -> str:
    return key.removeprefix(JOURNAL_PREFIX).split(":", 1)[0]


class RequestLedger(Generic[Route]):
    def __init__(self, db: Database, window_s: float, *, max_waiters: int = MAX_WAITERS) -> None:
        self.db = db
        self.window_s = window_s
        self.max_waiters = max_waiters
        db.migrate(MIGRATIONS)
        # All three bounded by the channel's admission: a key is here only while its request is admitted.
        self._running: set[str] = set()
        self._queued: set[str] = set()  # recorded as queued: `start` has a row to update
        self._waiters: dict[str, list[Route]] = {}

    @property
    def enabled(self) -> bool:
        """Whether repeated ids are recognised (the journal of unfinished requests is always kept)."""
        return self.window_s > 0

    @property
    def in_memory(self) -> tuple[int, int]:
        """(requests running in this process, copies waiting for them): for tests and telemetry."""
        return len(self._running), sum(len(w) for w in self._waiters.values())

    def lookup(self, key: str) -> Lookup:
        if key in self._running:
            return Lookup(Seen.RUNNING)
        rows = self.db.query("SELECT state, answer FROM mqtt_requests WHERE key = ?", (key,))
        if not rows:
            return Lookup(Seen.NEW)
        state, answer = rows[0]["state"], rows[0]["answer"]
        if state == DONE:
            return Lookup(Seen.DONE, bytes(answer))
        return Lookup(Seen.INTERRUPTED, may_have_run=state != QUEUED)

    def begin(self, key: str, recorded: Recorded, *, started: bool) -> Lookup:
        """Look the request up and, when it is new, record it (durably, before it is acknowledged).

        `started` says it gets a slot at once (recorded as running); otherwise it is recorded as
        queued and `start` marks it running when its turn comes. One INSERT in the common case (a
        new id): the SELECT runs only when the key is already there.
        """
        if key in self._running:
            return Lookup(Seen.RUNNING)
        inserted = self.db.execute(
            "INSERT INTO mqtt_requests (key, state, answer, created, topic, correlation, request_id, label)"
            " VALUES (?, ?, NULL, ?, ?, ?, ?, ?) ON CONFLICT(key) DO NOTHING",
            (
                key,
                RUNNING if started else QUEUED,
                time.time(),
                recorded.topic,
                recorded.correlation,
                recorded.request_id,
                recorded.label,
            ),
            what="the request ledger entry",
        ).rowcount
        if inserted:
            self._running.add(key)
            if not started:
                self._queued.add(key)
            return Lookup(Seen.NEW)
        # Stored, whatever its age: never new while the row exists (only the purge forgets it).
        return self.lookup(key)

    def start(self, key: str) -> None:
        """The request is about to run: a queued one is recorded as running before it does, so a
        crash says "may have run". Costs nothing for one that was recorded as running."""
        if key in self._queued:
            self._queued.discard(key)
            # On a full disk (logged by the database) the row keeps saying queued; the request runs.
            with contextlib.suppress(StorageFull):
                self.db.execute(
                    "UPDATE mqtt_requests SET state = ? WHERE key = ? AND state = ?",
                    (RUNNING, key, QUEUED),
                    what="the request ledger's 'running' mark",
                )

    def wait(self, key: str, route: Route) -> bool:
        """Answer `route` too when the running request `key` finishes; False when too many wait."""
        waiting = self._waiters.setdefault(key, [])
        if len(waiting) >= self.max_waiters:
            return False
        waiting.append(route)
        return True

    def finish(self, key: str, answer: bytes) -> Finished[Route]:
        """The request is answered: the copies that waited, and the record to write with the answer.

        A journal-only row is deleted; any other keeps the answer, and the window counts from now.
        """
        self._running.discard(key)
        self._queued.discard(key)
        waiters = self._waiters.pop(key, [])
        if key.startswith(JOURNAL_PREFIX):

            def record(conn: sqlite3.Connection) -> None:
                conn.execute("DELETE FROM mqtt_requests WHERE key = ?", (key,))

        else:

            def record(conn: sqlite3.Connection) -> None:
                # An upsert: the row may have been purged while a very long request ran.
                conn.execute(
                    "INSERT INTO mqtt_requests (key, state, answer, created) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT(key) DO UPDATE SET state = excluded.state, answer = excluded.answer,"
                    " created = excluded.created",
                    (key, DONE, answer, time.time()),
                )

        return Finished(waiters, record)

    def abandon(self, key: str) -> Finished[Route]:
        """Forget a request that never ran (stopped before it started): it may be sent again and run."""
        self._running.discard(key)
        self._queued.discard(key)
        waiters = self._waiters.pop(key, [])

        def record(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM mqtt_requests WHERE key = ? AND state != ?", (key, DONE))

        return Finished(waiters, record)

    def unfinished(self) -> list[Unfinished]:
        """Requests recorded and never answered by an earlier process (call before taking any in)."""
        rows = self.db.query(
            "SELECT key, state, topic, correlation, request_id, label FROM mqtt_requests WHERE state != ?",
            (DONE,),
        )
        out = []
        for r in rows:
            key = r["key"]
            if key in self._running:
                continue
            corr = r["correlation"]
            request_id = r["request_id"]
            if request_id is None and not key.startswith(JOURNAL_PREFIX):
                request_id = key.split(":", 1)[1].rsplit(":", 1)[0]  # kind:id:digest
            out.append(
                Unfinished(
                    key,
                    kind_of(key),
                    # A row from before routes were recorded has no topic ("").
                    Recorded(r["topic"] or "", None if corr is None else bytes(corr), request_id, r["label"]),
                    may_have_run=r["state"] != QUEUED,
                )
            )
        return out

    def write(self, finished: Finished[Route]) -> None:
        """Write a conclusion that has no answer to store with it (nowhere to send one)."""
        if finished.record is not None:
            with self.db.transaction() as conn:
                finished.record(conn)

    def purge(self, limit: int = PURGE_CHUNK) -> int:
        """Drop up to `limit` answered entries older than the window; returns how many (call again
        while it returns `limit`, yielding in between, so a large ledger never stalls the event loop).

        Unfinished rows stay: they belong to requests still running, or are answered at start-up."""
        cutoff = time.time() - self.window_s
        return self.db.execute(
            "DELETE FROM mqtt_requests WHERE key IN"
            " (SELECT key FROM mqtt_requests WHERE created < ? AND state = ? LIMIT ?)",
            (cutoff, DONE, limit),
        ).rowcount
