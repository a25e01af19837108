"""What a remote caller gets from a daemon run with the shipped defaults, over a real broker.

`edgeclaw run --board sim` as a subprocess, a mosquitto on a free port, and backends publishing
`tool/call` as a fleet would: by default MQTT callers read and use the hardware the board profile
grants, and get no shell, no background processes and no file writes; one config line widens it.
A flood from one backend is stopped after its burst without locking the other backends out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.net.signing import envelope
from tests.mqtt_support import Caller, Mosquitto, needs_mosquitto

pytestmark = needs_mosquitto

DEV = "remote-dev"
BASE = f"edgeclaw/{DEV}"
I2C_READ = {"action": "read_word", "bus": 1, "address": 0x48, "register": 0}


@pytest.fixture
def broker(tmp_path: Path):
    b = Mosquitto(tmp_path / "broker").start()
    yield b
    b.kill()


@contextlib.contextmanager
def daemon(tmp_path: Path, env: dict[str, str], port: int, extra: str = "") -> Iterator[Path]:
    """The daemon with the shipped defaults (plus `extra` TOML); yields its workspace."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = Path(env["EDGECLAW_CONFIG"])
    config.write_text(
        f'board = "sim"\ndevice_id = "{DEV}"\nworkspace = "{workspace}"\n'
        f"[mqtt]\nenabled = true\nport = {port}\ntelemetry_interval_s = 0\ninbound_queue = 512\n" + extra
    )
    log = (tmp_path / "daemon.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgeclaw", "run"], env=env, stdout=subprocess.DEVNULL, stderr=log
    )
    try:
        yield workspace
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung daemon is a failure anyway
            proc.kill()
            proc.wait(5)
        log.close()


class Backend:
    def __init__(self, caller: Caller, name: str, secret: str = "") -> None:
        self.caller = caller
        self.name = name
        self.secret = secret  # its own key ([callers.NAME]); "" = unsigned (mqtt:anonymous)
        self.seq = 0

    async def send(self, tool: str, args: dict[str, Any]) -> str:
        self.seq += 1
        request_id = f"{self.name}-{self.seq}"
        request = {"id": request_id, "tool": tool, "args": args, "sender": self.name}
        topic, answers = f"{BASE}/tool/call", f"answers/{self.name}"
        payload: Any = request
        if self.secret:
            payload = envelope(self.secret.encode(), topic, request, response_topic=answers, key=self.name)
        await self.caller.publish(topic, payload, response_topic=answers)
        return request_id

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        request_id = await self.send(tool, args)
        return (await self.answers([request_id]))[request_id]

    async def answers(self, ids: list[str], within: float = 30.0) -> dict[str, dict[str, Any]]:
        def collected() -> dict[str, dict[str, Any]] | None:
            bodies = {m.json["id"]: m.json for m in self.caller.on(f"answers/{self.name}")}
            return bodies if all(i in bodies for i in ids) else None

        return await self.caller.wait_for(collected, within, f"answers to {len(ids)} calls")


async def online(caller: Caller) -> None:
    await caller.wait_for(
        lambda: any(json.loads(m.payload).get("state") == "online" for m in caller.on(f"{BASE}/status")),
        30,
        "the daemon to come online",
    )


async def test_mqtt_callers_read_and_use_hardware_but_get_no_shell_or_writes_by_default(
    tmp_path, state_env, broker
):
    with daemon(tmp_path, state_env, broker.port) as workspace:
        async with Caller(broker.port, ["answers/#", f"{BASE}/status"]) as c:
            await online(c)
            (workspace / "notes.txt").write_text("calibrated 2024-05-01\n")
            backend = Backend(c, "backend-1")
            reading = await backend.call("i2c", I2C_READ)
            assert reading["ok"] is True, reading
            read = await backend.call("read_file", {"path": "notes.txt"})
            assert read["ok"] and "calibrated" in read["for_llm"]
            for tool, args in (
                ("write_file", {"path": "planted.sh", "content": "echo owned"}),
                ("exec", {"command": "echo hi"}),
                ("process", {"action": "list"}),
            ):
                answer = await backend.call(tool, args)
                assert answer["ok"] is False and answer["code"] == "policy", answer
                assert '[tools.channels.mqtt] profile = "full"' in answer["error"]  # says how to widen
            assert not (workspace / "planted.sh").exists()


async def test_one_config_line_widens_what_mqtt_callers_may_use(tmp_path, state_env, broker):
    widen = '[tools.channels.mqtt]\nprofile = "full"\n'
    with daemon(tmp_path, state_env, broker.port, widen) as workspace:
        async with Caller(broker.port, ["answers/#", f"{BASE}/status"]) as c:
            await online(c)
            answer = await Backend(c, "backend-1").call("write_file", {"path": "set.txt", "content": "21.0"})
            assert answer["ok"] is True, answer
            assert (workspace / "set.txt").read_text() == "21.0"


# Two backends, each with its own key: two identities, two buckets.
KEYS = {"EC_KEY_FLOODER": "flooder-key-1a2b3c", "EC_KEY_POLLER": "poller-key-4d5e6f"}
CALLERS = "".join(
    f'[callers.{name}]\nsecret_env = "EC_KEY_{name.upper()}"\nroles = ["operate"]\n'
    for name in ("flooder", "poller")
)


async def test_a_flood_from_one_backend_is_stopped_after_its_burst_and_others_carry_on(
    tmp_path, state_env, broker
):
    with daemon(tmp_path, {**state_env, **KEYS}, broker.port, CALLERS):
        async with Caller(broker.port, ["answers/#", f"{BASE}/status"]) as c:
            await online(c)
            flooder = Backend(c, "flooder", KEYS["EC_KEY_FLOODER"])
            poller = Backend(c, "poller", KEYS["EC_KEY_POLLER"])
            started = time.monotonic()
            ids = [await flooder.send("i2c", I2C_READ) for _ in range(200)]
            answers = await flooder.answers(ids, within=60)
            elapsed = time.monotonic() - started
            ok = sum(a["ok"] for a in answers.values())
            limited = [a for a in answers.values() if a.get("code") == "rate_limit"]
            # 60 at once, plus what the bucket refilled (one every 2 s) while the flood was arriving.
            assert 60 <= ok <= 60 + int(elapsed / 2) + 1, (ok, elapsed)
            assert len(limited) == 200 - ok
            assert "caller 'mqtt:flooder' may make 60 tool calls at once" in limited[-1]["error"]
            # The flood costs the flooder seconds, and the other backend nothing.
            assert (await poller.call("i2c", I2C_READ))["ok"] is True
            await asyncio.sleep(2.2)
            assert (await flooder.call("i2c", I2C_READ))["ok"] is True
