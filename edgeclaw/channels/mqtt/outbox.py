"""The outbox: messages that could not be published yet, kept in SQLite until the broker is back.

Bounded, because a device may be cut off for days. When the bound is hit the
least valuable message goes first: the oldest telemetry, then the oldest
event, and answers only when nothing else is left (an answer is the one thing
a caller is waiting for). Every drop is counted, persistently, and the count
is reported in telemetry so a fleet dashboard can see that history was lost.

Messages leave in the order they were made (`ord`, handed out by
`next_order`), not the order they were stored: a publish that failed after
others were queued behind it is put back in its place.

Answers are stored here *before* they are published and deleted only when
the broker has acknowledged them (see `sender`), so an answer survives a
broker outage and a daemon crash alike; `put` can write another record (the
request ledger's) in the same transaction.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable
from enum import IntEnum

from edgeclaw.records import dataclass
from edgeclaw.store.db import Database, Migration

MIGRATIONS = [
    Migration(
        "mqtt-outbox-1",
        [
            """CREATE TABLE mqtt_outbox (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                ord INTEGER NOT NULL,
                kind INTEGER NOT NULL,
                topic TEXT NOT NULL,
                payload BLOB NOT NULL,
                qos INTEGER NOT NULL,
                retain INTEGER NOT NULL,
                correlation BLOB,
                attempts INTEGER NOT NULL DEFAULT 0,
                created REAL NOT NULL
            )""",
            "CREATE INDEX mqtt_outbox_by_ord ON mqtt_outbox (ord)",
            "CREATE INDEX mqtt_outbox_by_kind ON mqtt_outbox (kind, ord)",
            "CREATE TABLE mqtt_state (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
        ],
    )
]

# A message whose forwarding failed this many times is dropped (and counted) rather than blocking the
# queue for good. A connection that drops with the message in flight counts too: a message the broker
# kicks us for (over its packet size limit, say) fails that way, every time.
MAX_ATTEMPTS = 10


class Kind(IntEnum):
    """What a message is; the order is the drop order when the outbox is full (lowest first)."""

    TELEMETRY = 0
    EVENT = 1
    ANSWER = 2


@dataclass(frozen=True, slots=True)
class OutMessage:
    kind: Kind
    topic: str
    payload: bytes
    ord: int
    qos: int = 1
    retain: bool = False
    correlation: bytes | None = None  # MQTT 5 Correlation Data of the request being answered


@dataclass(frozen=True, slots=True)
class StoredMessage:
    seq: int
    message: OutMessage


class Outbox:
    def __init__(self, db: Database, max_messages: int) -> None:
        self.db = db
        self.max_messages = max_messages
        db.migrate(MIGRATIONS)
        self._depth = int(db.query("SELECT count(*) FROM mqtt_outbox")[0][0])
        row = db.query("SELECT value FROM mqtt_state WHERE name = 'outbox_dropped'")
        self._dropped = int(row[0][0]) if row else 0
        last = db.query("SELECT max(ord) FROM mqtt_outbox")[0][0]
        self._orders = itertools.count((last or 0) + 1)

    @property
    def depth(self) -> int:
        return self._depth

    @property
    def dropped(self) -> int:
        """Messages dropped since the database was created (bound hit, or refused too often)."""
        return self._dropped

    def next_order(self) -> int:
        return next(self._orders)

    def put(
        self,
        message: OutMessage,
        record: Callable[[sqlite3.Connection], None] | None = None,
        delete: Collection[int] = (),
    ) -> int | None:
        """Store a message; returns its `seq`, or None when it was itself the one dropped to keep
        the bound. `record` runs inside the same transaction (whether or not the message is
        dropped), and so does deleting the rows `delete` (delivered messages: one commit less)."""
        with self.db.transaction("an outbox entry (a message waiting for the broker)") as conn:
            if record is not None:
                record(conn)
            if delete:
                self._delete(conn, delete)
            return self._insert(conn, message)

    def restore(self, messages: Iterable[OutMessage]) -> int:
        """Store messages that had left the outbox again, in their old places (their `ord`), in
        one transaction; returns how many were stored (the bound may drop some, counted)."""
        stored = 0
        with self.db.transaction("outbox entries (messages to publish again)") as conn:
            for message in messages:
                stored += self._insert(conn, message) is not None
        return stored

    def _insert(self, conn: sqlite3.Connection, message: OutMessage) -> int | None:
        """Insert one message, first dropping what the bound requires (see the module doc)."""
        # A loop, not one victim: after a restart with a lower `outbox_max` the stored backlog
        # is over the bound, and one-in-one-out would keep it there for good.
        while self._depth >= self.max_messages:
            lowest = conn.execute("SELECT min(kind) FROM mqtt_outbox").fetchone()[0]
            if lowest is None:
                self._depth = 0
                break
            if message.kind < lowest:
                # Everything stored is worth more than this message.
                self._count_dropped(conn, 1)
                return None
            victim = conn.execute(
                "SELECT seq FROM mqtt_outbox WHERE kind = ? ORDER BY ord LIMIT 1", (lowest,)
            ).fetchone()[0]
            conn.execute("DELETE FROM mqtt_outbox WHERE seq = ?", (victim,))
            self._depth -= 1
            self._count_dropped(conn, 1)
        seq = conn.execute(
            "INSERT INTO mqtt_outbox (ord, kind, topic, payload, qos, retain, correlation, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                message.ord,
                int(message.kind),
                message.topic,
                message.payload,
                message.qos,
                int(message.retain),
                message.correlation,
                time.time(),
            ),
        ).lastrowid
        self._depth += 1
        return seq

    def peek(self, limit: int, exclude: Collection[int] = ()) -> list[StoredMessage]:
        """The oldest `limit` messages not in `exclude` (seqs), in the order they were made."""
        rows = self.db.query(
            "SELECT seq, ord, kind, topic, payload, qos, retain, correlation FROM mqtt_outbox"
            " ORDER BY ord LIMIT ?",
            (limit + len(exclude),),
        )
        if exclude:
            rows = [r for r in rows if r["seq"] not in exclude][:limit]
        return [
            StoredMessage(
                r["seq"],
                OutMessage(
                    Kind(r["kind"]),
                    r["topic"],
                    bytes(r["payload"]),
                    r["ord"],
                    r["qos"],
                    bool(r["retain"]),
                    None if r["correlation"] is None else bytes(r["correlation"]),
                ),
            )
            for r in rows
        ]

    def delete(self, seqs: Iterable[int]) -> None:
        seqs = list(seqs)
        if not seqs:
            return
        with self.db.transaction() as conn:
            self._delete(conn, seqs)

    def _delete(self, conn: sqlite3.Connection, seqs: Iterable[int]) -> None:
        self._depth -= conn.executemany(
            "DELETE FROM mqtt_outbox WHERE seq = ?", [(seq,) for seq in seqs]
        ).rowcount

    def failed(self, seqs: Iterable[int]) -> int:
        """Count a failed attempt for each; drop those that failed MAX_ATTEMPTS times. Returns how many."""
        seqs = list(seqs)
        if not seqs:
            return 0
        with self.db.transaction() as conn:
            conn.executemany(
                "UPDATE mqtt_outbox SET attempts = attempts + 1 WHERE seq = ?", [(s,) for s in seqs]
            )
            dropped = conn.execute("DELETE FROM mqtt_outbox WHERE attempts >= ?", (MAX_ATTEMPTS,)).rowcount
            if dropped:
                self._depth -= dropped
                self._count_dropped(conn, dropped)
        return dropped

    def _count_dropped(self, conn: sqlite3.Connection, n: int) -> None:
        self._dropped += n
        conn.execute(
            "INSERT INTO mqtt_state (name, value) VALUES ('outbox_dropped', ?)"
            " ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            (self._dropped,),
        )
