"""Publishing again what the broker may have lost: the answers it acknowledged lately, kept within
their bounds, and put back in the outbox, in their places, when the connection is lost. No broker
needed but for the last test (tests/test_mqtt_faults.py has the broker killed for real)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from edgeclaw.channels.mqtt.outbox import Kind, Outbox, OutMessage
from edgeclaw.channels.mqtt.resend import OVERHEAD_BYTES, RecentAnswers
from edgeclaw.channels.mqtt.sender import Sender
from edgeclaw.config.loader import config_from_dict
from edgeclaw.errors import ConfigErrors
from edgeclaw.net.mqtt_connection import Connection, ConnectionSettings
from edgeclaw.store.db import Database
from tests.mqtt_support import Caller, Mosquitto, needs_mosquitto, poll


@pytest.fixture
def db(tmp_path: Path):
    database = Database(tmp_path / "state.db")
    yield database
    database.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def answer(n: int, payload: bytes = b"{}", kind: Kind = Kind.ANSWER) -> OutMessage:
    return OutMessage(kind, f"reply/{n}", payload, n, correlation=f"c{n}".encode())


def test_recent_answers_are_those_within_the_window():
    clock = Clock()
    recent = RecentAnswers(10.0, 100, 1 << 20, clock)
    recent.add(answer(1))
    clock.now += 6
    recent.add(answer(2))
    clock.now += 6  # the first is 12 s old now
    recent.add(answer(3))
    assert [m.ord for m in recent.take()] == [2, 3]
    assert len(recent) == 0 and recent.bytes == 0  # taken: kept anew once published again


async def test_recent_answers_past_their_window_are_let_go_with_no_other_coming():
    recent = RecentAnswers(0.2, 100, 1 << 20)
    for n in range(50):
        recent.add(answer(n, b"x" * 1000))
    await asyncio.sleep(0.1)
    recent.add(answer(50))
    assert len(recent) == 51  # all within the window still
    await asyncio.sleep(0.15)  # the first 50 are past it; nothing was added or taken since
    assert [a.message.ord for a in recent._kept] == [50] and recent.bytes < 1000
    await asyncio.sleep(0.15)
    assert len(recent) == 0 and recent.bytes == 0


def test_recent_answers_are_bounded_by_count_and_bytes_the_oldest_going_first():
    by_count = RecentAnswers(60.0, 3, 1 << 20, Clock())
    for n in range(5):
        by_count.add(answer(n))
    assert [m.ord for m in by_count.take()] == [2, 3, 4]
    each = len(b"x" * 100) + len("reply/0") + len(b"c0") + OVERHEAD_BYTES
    by_bytes = RecentAnswers(60.0, 100, 2 * each, Clock())
    for n in range(5):
        by_bytes.add(answer(n, b"x" * 100))
    assert by_bytes.bytes <= 2 * each and [m.ord for m in by_bytes.take()] == [3, 4]
    by_bytes.add(answer(9, b"x" * (3 * each)))  # larger than the whole bound: not kept at all
    assert len(by_bytes) == 0
    off = RecentAnswers(0, 100, 1 << 20, Clock())
    off.add(answer(1))
    assert not off.enabled and off.take() == []


def test_outbox_restore_puts_messages_back_in_their_places(db):
    box = Outbox(db, 4)
    box.put(OutMessage(Kind.TELEMETRY, "t", b"t", box.next_order()))
    later = OutMessage(Kind.ANSWER, "reply/later", b"later", box.next_order() + 10)
    box.put(later)
    # Made before `later`, published, acknowledged, and now back: ahead of it again.
    assert box.restore([answer(1, b"one"), answer(2, b"two"), answer(3, b"three")]) == 3
    # The bound held, the telemetry going first.
    assert [m.message.payload for m in box.peek(10)] == [b"one", b"two", b"three", b"later"]
    assert box.depth == 4 and box.dropped == 1


def test_a_lost_connection_puts_the_answers_acknowledged_lately_back_in_the_outbox(db):
    connection = Connection(ConnectionSettings("127.0.0.1", 1, "dev"), lambda message: None)
    outbox = Outbox(db, 100)
    sender = Sender(connection, outbox, RecentAnswers(30.0, 100, 1 << 20))
    losses = sender._losses
    # The broker acknowledged an answer and an event: only the answer is kept.
    sender._acknowledged([answer(1, b"one"), answer(2, b"event", Kind.EVENT)], losses)
    assert len(sender.recent) == 1 and outbox.depth == 0
    connection._tell_lost()
    assert [m.message.payload for m in outbox.peek(10)] == [b"one"]
    assert outbox.peek(10)[0].message.correlation == b"c1" and len(sender.recent) == 0
    # A PUBACK read just before the loss, its publisher running only after it: back at once.
    sender._acknowledged([answer(3, b"three")], losses)
    assert [m.message.payload for m in outbox.peek(10)] == [b"one", b"three"]
    assert len(sender.recent) == 0


def test_resend_settings_are_checked():
    with pytest.raises(ConfigErrors) as e:
        config_from_dict(
            {"mqtt": {"resend_window_s": -1, "resend_max_messages": -1, "resend_max_bytes": -5}}, "r.toml"
        )
    for key in ("mqtt.resend_window_s", "mqtt.resend_max_messages", "mqtt.resend_max_bytes"):
        assert key in str(e.value), key
    config = config_from_dict({"mqtt": {"resend_window_s": 0}}, "r.toml")
    assert config.mqtt.resend_window_s == 0


@needs_mosquitto
async def test_the_connection_tells_a_loss_but_not_its_own_stop(tmp_path):
    """The broker killed: the listeners hear it (the answers go back in the outbox). A clean stop
    of the daemon loses nothing at the broker: they do not, or every restart would send copies."""
    broker = Mosquitto(tmp_path / "broker").start()
    try:
        lost: list[int] = []
        connection = Connection(ConnectionSettings("127.0.0.1", broker.port, "dev"), lambda message: None)
        connection.when_lost(lambda: lost.append(connection.connects))
        runner = asyncio.create_task(connection.run())
        assert await connection.wait_connected(10)
        broker.kill()
        await poll(lambda: lost == [1], 10, "the loss told")
        broker.start()
        await poll(lambda: connection.connects == 2 and connection.connected, 20, "the reconnect")
        await connection.stop(runner)
        assert lost == [1]
    finally:
        broker.kill()


@needs_mosquitto
async def test_a_burst_the_broker_is_slow_to_acknowledge_waits_on_disk_not_in_memory(tmp_path, db):
    """Publishes awaiting their PUBACK are bounded, answers and events alike; the rest wait in the
    outbox and all leave, in order, once the broker answers again."""
    from edgeclaw.channels.mqtt.sender import FLUSH_WINDOW, MAX_DIRECT

    broker = Mosquitto(tmp_path / "broker").start()
    connection = Connection(ConnectionSettings("127.0.0.1", broker.port, "burst"), lambda message: None)
    runner = asyncio.create_task(connection.run())
    try:
        async with Caller(broker.port, ["burst/#"]) as watcher:
            assert await connection.wait_connected(10)
            sender = Sender(connection, Outbox(db, 10_000))
            os.kill(broker.proc.pid, signal.SIGSTOP)  # up, but acknowledging nothing
            try:
                for n in range(300):
                    sender.send(Kind.ANSWER, f"burst/{n}", b"a%d" % n, correlation=b"%d" % n)
                    sender.send(Kind.EVENT, f"burst/{n}", b"e%d" % n)
                await asyncio.sleep(0.3)
                assert sender.in_flight <= MAX_DIRECT + FLUSH_WINDOW  # direct ones, and the forwarder's
                assert sender.outbox.depth >= 600 - MAX_DIRECT
            finally:
                os.kill(broker.proc.pid, signal.SIGCONT)
            await poll(lambda: sender.pending == 0, 30, "every message acknowledged")
            got = await watcher.wait_for(lambda: watcher.received if len(watcher.received) >= 600 else None)
            assert sorted(r.payload for r in got) == sorted(
                [b"a%d" % n for n in range(300)] + [b"e%d" % n for n in range(300)]
            )
            assert [r.payload for r in got if r.payload.startswith(b"a")] == [b"a%d" % n for n in range(300)]
    finally:
        await connection.stop(runner)
        broker.stop()
