"""Store-and-forward: publish now when we can, keep it in the outbox when we cannot, in order.

While connected with an empty outbox a message is published straight away
(many at once: paho keeps them in order on the wire). Once anything is in
the outbox every new message queues behind it, and the forwarder drains the
outbox in order after each (re)connect, a window of messages at a time,
deleting each one only when the broker has acknowledged it. A message whose
publish fails, or is still unconfirmed when the daemon stops, goes back into
the outbox in its original place.
"""

from __future__ import annotations

import asyncio
import logging

from edgeclaw.channels.mqtt.connection import Connection, PublishFailed, publish_properties
from edgeclaw.channels.mqtt.outbox import Kind, Outbox, OutMessage, StoredMessage

log = logging.getLogger("edgeclaw.mqtt")

FLUSH_WINDOW = 64  # messages in flight while draining the outbox
RETRY_WHILE_CONNECTED_S = 1.0


class Sender:
    def __init__(self, connection: Connection, outbox: Outbox) -> None:
        self.connection = connection
        self.outbox = outbox
        # True while the outbox may hold messages: new ones must then queue behind them.
        self._backlog = outbox.depth > 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._forwarder: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def pending(self) -> int:
        """Messages not yet confirmed by the broker: stored plus in flight."""
        return self.outbox.depth + len(self._tasks)

    def send(
        self,
        kind: Kind,
        topic: str,
        payload: bytes,
        *,
        correlation: bytes | None = None,
    ) -> None:
        """Hand a message over for delivery. Never blocks and never raises for a broker problem."""
        message = self._publish_now(
            OutMessage(kind, topic, payload, self.outbox.next_order(), correlation=correlation)
        )
        if message is not None:
            task = asyncio.get_running_loop().create_task(self._direct(message))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def deliver(
        self,
        kind: Kind,
        topic: str,
        payload: bytes,
        *,
        correlation: bytes | None = None,
    ) -> None:
        """`send`, publishing from the calling task: one task hop less for an answer on its way out.

        Returns once the broker confirmed the message or it was stored; never raises for a broker
        problem (a cancelled caller leaves the message in the outbox).
        """
        message = self._publish_now(
            OutMessage(kind, topic, payload, self.outbox.next_order(), correlation=correlation)
        )
        if message is not None:
            await self._direct(message)

    def _publish_now(self, message: OutMessage) -> OutMessage | None:
        """The message when it may be published straight away; else it is stored, behind the backlog."""
        if self._closed or self._backlog or not self.connection.connected:
            self._store(message)
            return None
        return message

    async def _direct(self, message: OutMessage) -> None:
        try:
            await self.connection.publish(
                message.topic,
                message.payload,
                qos=message.qos,
                retain=message.retain,
                properties=publish_properties(correlation=message.correlation),
            )
        except PublishFailed as e:
            log.debug("publish to %s failed (%s); kept in the outbox", message.topic, e)
            self._store(message)
        except asyncio.CancelledError:
            # Stopping before the broker confirmed it: keep it for the next start.
            self._store(message)
            raise

    def _store(self, message: OutMessage) -> None:
        self.outbox.put(message)  # a message dropped to keep the bound is counted by the outbox
        self._backlog = True
        if self.connection.connected and not self._closed:
            self._start_forwarder()

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
            batch = self.outbox.peek(FLUSH_WINDOW)
            if not batch:
                # Synchronous from peek to here: nothing can be stored in between, so nothing is
                # left behind when direct publishing resumes.
                self._backlog = False
                return
            results = await asyncio.gather(*(self._publish_stored(m) for m in batch), return_exceptions=True)
            done = [m.seq for m, r in zip(batch, results, strict=True) if r is None]
            failed = [m.seq for m, r in zip(batch, results, strict=True) if r is not None]
            self.outbox.delete(done)
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
        """Give in-flight publishes `timeout_s` to be confirmed; whatever is not goes to the outbox."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_s)
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        if self._forwarder is not None and not self._forwarder.done():
            self._forwarder.cancel()
            await asyncio.wait((self._forwarder,))
