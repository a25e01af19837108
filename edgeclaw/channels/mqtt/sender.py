"""Store-and-forward: answers are stored before they are published and leave the outbox only when
the broker has acknowledged them; everything is published in the order it was made.

An answer (what a caller waits for) is written to the outbox first, then
published; its row is deleted once the broker's PUBACK came back. An answer
lost on the way -- the connection dropped, the broker killed, the daemon
killed -- is still in the outbox and is published again after the reconnect
or the restart. Events and telemetry are published straight away and stored
only when that fails: a crash can lose the few in flight, and nobody is
waiting for them.

While connected with nothing waiting, messages are published at once (many at
a time: paho keeps them in order on the wire). Once anything waits in the
outbox, every new message queues behind it, and the forwarder drains the
outbox in order after each (re)connect, a window at a time. Past MAX_DIRECT
publishes awaiting their PUBACK (answers, events and telemetry alike), new
messages queue the same way, so a broker slow to acknowledge, or a burst of
requests answered faster than it acknowledges, costs disk, not memory.

An answer published again because its PUBACK was lost may reach the caller
twice (QoS 1 is at-least-once): the copies are the same bytes with the same
Correlation Data.

A PUBACK is not the end of the story: a broker killed before its next save to
disk loses what it acknowledged since (see `resend`). The answers acknowledged
in the last `resend_window_s` are kept in memory, and when an established
connection is lost they go back into the outbox, in their old places, to be
published again after the reconnect.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable

from edgeclaw.channels.mqtt.outbox import Kind, Outbox, OutMessage, StoredMessage
from edgeclaw.channels.mqtt.resend import RecentAnswers
from edgeclaw.net.mqtt_connection import Connection, PublishFailed, publish_properties
from edgeclaw.records import dataclass
from edgeclaw.tasks import TaskSet

log = logging.getLogger("edgeclaw.mqtt")

FLUSH_WINDOW = 64  # messages in flight while draining the outbox
RETRY_WHILE_CONNECTED_S = 1.0
# Publishes awaiting their PUBACK (stored or not) before new messages queue in the outbox. paho puts
# only MAX_INFLIGHT (20) on the wire at once, so more only waits in memory: each costs a task, its
# properties and paho's message (about 3.5 KB), and a burst of requests answered faster than the
# broker acknowledges would otherwise hold hundreds at once.
MAX_DIRECT = 64
# Rows the broker acknowledged are deleted together -- with the next answer stored, or this long
# after the first PUBACK: one transaction for a burst. A crash in between only means those few are
# published once more.
ACK_FLUSH_S = 0.002
# Kinds stored before they are published.
DURABLE = frozenset({Kind.ANSWER})

Record = Callable[[sqlite3.Connection], None]


@dataclass(frozen=True, slots=True)
class StoredPublish:
    """A message on its way out now; `seq` is its outbox row when it has one."""

    message: OutMessage
    seq: int | None


class Sender:
    def __init__(self, connection: Connection, outbox: Outbox, recent: RecentAnswers | None = None) -> None:
        self.connection = connection
        self.outbox = outbox
        # Answers the broker acknowledged lately: back into the outbox when the connection is lost.
        self.recent = recent if recent is not None else RecentAnswers(0, 0, 0)
        self._losses = 0  # connections lost so far
        connection.when_lost(self._on_lost)
        # True while the outbox may hold messages not in flight: new ones must then queue behind them.
        self._backlog = outbox.depth > 0
        self._in_flight: set[int] = set()  # outbox rows being published right now
        self._acked: set[int] = set()  # outbox rows the broker confirmed, deleted at the next flush
        self._delete_handle: asyncio.TimerHandle | None = None
        self._volatile = 0  # messages without an outbox row awaiting their PUBACK
        self._tasks = TaskSet()
        self._forwarder: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def pending(self) -> int:
        """Messages not yet confirmed by the broker: stored (waiting or in flight) plus unstored in flight."""
        return self.outbox.depth - len(self._acked) + self._volatile

    @property
    def in_flight(self) -> int:
        return len(self._in_flight) + self._volatile

    def send(
        self,
        kind: Kind,
        topic: str,
        payload: bytes,
        *,
        correlation: bytes | None = None,
        record: Record | None = None,
    ) -> None:
        """Hand a message over for delivery. Never blocks and never raises for a broker problem.

        `record` is written in the same transaction that stores the message (see `store`).
        """
        self.launch(self.store(kind, topic, payload, correlation=correlation, record=record))

    def launch(self, out: StoredPublish | None) -> None:
        """Publish what `store` handed out, in a task of its own (`close` waits for it)."""
        if out is not None:
            self._tasks.spawn(self.publish(out))

    async def deliver(
        self,
        kind: Kind,
        topic: str,
        payload: bytes,
        *,
        correlation: bytes | None = None,
        record: Record | None = None,
    ) -> None:
        """`send`, publishing from the calling task: one task hop less for an answer on its way out.

        Returns once the broker confirmed the message or it waits in the outbox; never raises for a
        broker problem (a cancelled caller leaves the message in the outbox).
        """
        out = self.store(kind, topic, payload, correlation=correlation, record=record)
        if out is not None:
            await self.publish(out)

    def store(
        self,
        kind: Kind,
        topic: str,
        payload: bytes,
        *,
        correlation: bytes | None = None,
        record: Record | None = None,
    ) -> StoredPublish | None:
        """Take a message in: synchronous, so it is durable when this returns (answers always; other
        kinds when they cannot go now). `record` (another table's write, e.g. the request ledger's)
        is committed in the same transaction as the message's row.

        Returns what `publish` should send now, or None when the message waits in the outbox (or
        was dropped to keep its bound, which the outbox counts).
        """
        message = OutMessage(kind, topic, payload, self.outbox.next_order(), correlation=correlation)
        if self._closed or self._backlog or not self.connection.connected or self.in_flight >= MAX_DIRECT:
            self._keep(message, record)
            return None
        if kind not in DURABLE and record is None:
            self._volatile += 1
            return StoredPublish(message, None)
        # Rows the broker has confirmed since the last flush go in the same transaction.
        delivered, self._acked = self._acked, set()
        try:
            seq = self.outbox.put(message, record, delete=delivered)
        except sqlite3.Error as e:
            # The state database is failing (a full disk, say): the caller still gets the answer
            # if the broker takes it now, only without the copy that would survive a crash.
            log.error("cannot store the message for %s (%s); publishing it without a copy", topic, e)
            self._acked |= delivered
            self._volatile += 1
            return StoredPublish(message, None)
        if seq is None:
            return None
        self._in_flight.add(seq)
        return StoredPublish(message, seq)

    async def publish(self, out: StoredPublish) -> None:
        """Publish a message `store` handed out; on success its row goes, on failure it waits."""
        m = out.message
        losses = self._losses
        try:
            await self.connection.publish(
                m.topic,
                m.payload,
                qos=m.qos,
                retain=m.retain,
                properties=publish_properties(correlation=m.correlation),
            )
        except PublishFailed as e:
            log.debug("publish to %s failed (%s); kept in the outbox", m.topic, e)
            self._failed(out)
            return
        except asyncio.CancelledError:
            # Stopping before the broker confirmed it: kept for the next start.
            self._failed(out)
            raise
        except Exception:
            log.exception("publishing to %s failed; kept in the outbox", m.topic)
            self._failed(out)
            return
        if out.seq is None:
            self._volatile -= 1
        else:
            self._in_flight.discard(out.seq)
            self._acked.add(out.seq)
            if self._delete_handle is None:
                self._delete_handle = asyncio.get_running_loop().call_later(ACK_FLUSH_S, self._delete_acked)
            self._acknowledged([m], losses)

    def _failed(self, out: StoredPublish) -> None:
        if out.seq is None:
            self._volatile -= 1
            self._keep(out.message, None)
            return
        # Its row is still in the outbox, in its place: the forwarder sends it again.
        self._in_flight.discard(out.seq)
        self._queued()

    def _keep(self, message: OutMessage, record: Record | None) -> None:
        try:
            self.outbox.put(message, record)  # a message dropped to keep the bound is counted there
        except sqlite3.Error as e:
            log.error("cannot store the message for %s (%s); it is lost", message.topic, e)
            return
        self._queued()

    def _queued(self) -> None:
        self._backlog = True
        if self.connection.connected and not self._closed:
            self._start_forwarder()

    def _acknowledged(self, messages: list[OutMessage], losses: int) -> None:
        """Stored messages the broker acknowledged, on a connection that was up when they were sent
        (`losses` then): answers are kept in `recent`, or, when that connection was lost before
        this task got to run again (the PUBACK and the loss in one read), put back at once."""
        answers = [m for m in messages if m.kind in DURABLE]
        if not answers or not self.recent.enabled:
            return
        if losses == self._losses:
            for m in answers:
                self.recent.add(m)
        else:
            self._restore(answers)

    def _on_lost(self) -> None:
        """The connection is gone, and the broker may have gone with it: the answers it acknowledged
        lately go back into the outbox, to be published again after the reconnect."""
        self._losses += 1
        answers = self.recent.take()
        if answers:
            self._restore(answers)
            log.info(
                "connection lost: %d answer(s) acknowledged in the last %g s are published again after "
                "the reconnect, in case the broker lost them",
                len(answers),
                self.recent.window_s,
            )

    def _restore(self, answers: list[OutMessage]) -> None:
        try:
            self.outbox.restore(answers)
        except sqlite3.Error as e:
            log.error("cannot keep %d answer(s) to publish again (%s)", len(answers), e)
            return
        self._queued()

    def _delete_acked(self) -> None:
        self._delete_handle = None
        acked, self._acked = self._acked, set()
        if not acked:
            return  # deleted with a message stored since
        try:
            self.outbox.delete(acked)
        except sqlite3.Error as e:
            log.error("cannot delete %d delivered message(s) from the outbox (%s)", len(acked), e)

    # -- forwarding ----------------------------------------------------------
    def on_connect(self) -> None:
        """Called after each (re)connect: drain whatever is waiting."""
        if self._backlog and not self._closed:
            self._start_forwarder()

    def _start_forwarder(self) -> None:
        if self._forwarder is None or self._forwarder.done():
            self._forwarder = asyncio.get_running_loop().create_task(self._forward())

    async def _forward(self) -> None:
        while self.connection.connected and not self._closed:
            batch = self.outbox.peek(FLUSH_WINDOW, self._in_flight | self._acked)
            if not batch:
                # Synchronous from peek to here: nothing can be stored in between, so nothing is
                # left behind when direct publishing resumes.
                self._backlog = False
                return
            seqs = [m.seq for m in batch]
            losses = self._losses
            self._in_flight.update(seqs)
            try:
                results = await asyncio.gather(
                    *(self._publish_stored(m) for m in batch), return_exceptions=True
                )
            finally:
                self._in_flight.difference_update(seqs)
            done = [m.seq for m, r in zip(batch, results, strict=True) if r is None]
            failed = [m.seq for m, r in zip(batch, results, strict=True) if r is not None]
            # At once, not with the next flush: the next peek must not see them again.
            self.outbox.delete(done)
            self._acknowledged([m.message for m, r in zip(batch, results, strict=True) if r is None], losses)
            if failed:
                unexpected = [r for r in results if r is not None and not isinstance(r, PublishFailed)]
                for error in unexpected:
                    log.error("forwarding the outbox failed", exc_info=error)
                dropped = self.outbox.failed(failed)
                if dropped:
                    log.warning("dropped %d message(s) the broker kept refusing", dropped)
                if not self.connection.connected:
                    return  # the next connect starts us again
                await asyncio.sleep(RETRY_WHILE_CONNECTED_S)

    async def _publish_stored(self, stored: StoredMessage) -> None:
        m = stored.message
        await self.connection.publish(
            m.topic,
            m.payload,
            qos=m.qos,
            retain=m.retain,
            properties=publish_properties(correlation=m.correlation),
        )

    # -- stopping ------------------------------------------------------------
    async def close(self, timeout_s: float = 5.0) -> None:
        """Give in-flight publishes `timeout_s` to be confirmed; whatever is not stays in the outbox."""
        await self._tasks.wait(timeout_s)
        self._closed = True
        await self._tasks.close()
        if self._forwarder is not None and not self._forwarder.done():
            self._forwarder.cancel()
            await asyncio.wait((self._forwarder,))
        if self._delete_handle is not None:
            self._delete_handle.cancel()
        self._delete_acked()
