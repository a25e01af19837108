"""What the MQTT delivery path keeps stays bounded under steady traffic: the request ledger is
purged after its window, the outbox drains, and nothing accumulates in memory -- neither requests
"running" that finished nor copies waiting on one request (against a real mosquitto, the daemon
in-process so its tables and sets can be looked at)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from edgeclaw.channels.mqtt import MqttChannel
from edgeclaw.channels.mqtt.dedup import MAX_WAITERS
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.lifecycle import Daemon
from edgeclaw.daemon.mqtt import mqtt_service
from tests.mqtt_support import Caller, Mosquitto, needs_mosquitto, poll

pytestmark = needs_mosquitto

DEV = "bounds-dev"
BASE = f"edgeclaw/{DEV}"
ANSWERS = "reply/bounds"


@contextlib.asynccontextmanager
async def channel(tmp_path: Path, port: int, **mqtt: Any) -> AsyncIterator[MqttChannel]:
    built: list[MqttChannel] = []

    def service(runtime: Any) -> MqttChannel:
        built.append(mqtt_service(runtime))
        return built[0]

    config = {
        "board": "sim",
        "device_id": DEV,
        "state_dir": str(tmp_path / "state"),
        "tools": {"rate_limit": 0},
        "mqtt": {"enabled": True, "port": port, "telemetry_interval_s": 0, **mqtt},
    }
    daemon = Daemon(config_from_dict(config, "test.toml"), services=[service], environ={})
    task = asyncio.create_task(daemon.run())
    await poll(lambda: (built and built[0].connection.connected) or task.done(), 20, "the channel")
    if task.done():
        task.result()
    try:
        yield built[0]
    finally:
        daemon.request_stop()
        assert await asyncio.wait_for(task, 30) == 0


def read(i: int) -> dict[str, Any]:
    return {
        "id": f"r{i}",
        "tool": "i2c",
        "args": {"action": "read_word", "bus": 1, "address": 72, "register": 0},
    }


async def test_steady_traffic_leaves_nothing_behind(tmp_path):
    broker = Mosquitto(tmp_path / "broker").start()
    try:
        async with (
            channel(tmp_path, broker.port, dedup_window_s=1.0, inbound_queue=256) as ch,
            Caller(broker.port, [ANSWERS]) as c,
        ):
            total = 0
            for wave in range(4):
                ids = range(total, total + 150)
                await asyncio.gather(
                    *(
                        c.publish(f"{BASE}/tool/call", read(i), response_topic=ANSWERS, correlation=b"%d" % i)
                        for i in ids
                    )
                )
                total += 150
                await c.answers(ANSWERS, total, within=30)
                await asyncio.sleep(0.3 if wave < 3 else 0)
            assert all(m.json["ok"] for m in c.on(ANSWERS))
            # Everything answered: nothing in flight, nothing waiting, the outbox empty.
            # (The last answers' events may still be on their way into the outbox as the answers arrive.)
            await poll(
                lambda: ch.sender.pending == 0 and ch.outbox.depth == 0 and ch.sender.in_flight == 0,
                10,
                "the outbox to drain",
            )
            assert ch.ledger.in_memory == (0, 0)
            assert ch.requests.admitted == 0 and not ch.requests.tasks
            # The ledger keeps the answers for its window, then the purge removes them.
            rows = ch.db.query("SELECT count(*) FROM mqtt_requests")[0][0]
            assert rows > 0
            await poll(lambda: ch.db.query("SELECT count(*) FROM mqtt_requests")[0][0] == 0, 10, "the purge")
    finally:
        broker.kill()


async def test_copies_of_one_running_request_are_bounded(tmp_path):
    broker = Mosquitto(tmp_path / "broker").start()
    try:
        async with (
            channel(tmp_path, broker.port) as ch,
            Caller(broker.port, [ANSWERS]) as c,
        ):
            # Long enough to be still running while every copy arrives and is answered, on a busy machine.
            pulse = {"id": "p", "tool": "gpio", "args": {"action": "pulse", "pin": 17, "duration_ms": 5000}}
            await c.publish(f"{BASE}/tool/call", pulse, response_topic=ANSWERS, correlation=b"original")
            await poll(lambda: ch.ledger.in_memory[0] == 1, 10, "the call to run")
            copies = MAX_WAITERS + 5
            for n in range(copies):
                await c.publish(f"{BASE}/tool/call", pulse, response_topic=ANSWERS, correlation=b"copy%d" % n)
            # The copies past the bound are answered at once, "busy"; the others wait.
            busy = await c.answers(ANSWERS, 5, within=10)
            assert {m.json["code"] for m in busy} == {"busy"}
            assert ch.ledger.in_memory == (1, MAX_WAITERS)
            answers = await c.answers(ANSWERS, copies + 1, within=20)
            by = {m.correlation: m.json for m in answers}
            assert by[b"original"]["ok"] and "replay" not in by[b"original"]
            waited = [b for corr, b in by.items() if corr != b"original" and b.get("code") != "busy"]
            assert len(waited) == MAX_WAITERS and all(b["ok"] and b["replay"] for b in waited)
            assert ch.ledger.in_memory == (0, 0)
    finally:
        broker.kill()
