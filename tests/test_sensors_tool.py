"""The `sensor` tool: list and read through the registry, on the command line, over MQTT, on the console,
and as the one call a model needs for "what is the temperature?"; the I2C scan naming parts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.agent.channel import InboundMessage
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.lifecycle import Daemon
from edgeclaw.daemon.mqtt import mqtt_service
from tests.agent_support import Agents, provider_config
from tests.hw_support import call, make_runtime, ok, write_profile
from tests.llm_server import ScriptedLLM, openai_text, openai_tools
from tests.mqtt_support import Caller, Mosquitto, needs_mosquitto

# What the sim's parts hold, as their drivers read them (each part's resolution allowing).
SIM_READINGS = {
    "board temperature": {"temperature": (21.5, "°C")},
    "air": {"temperature": (22.0, "°C"), "pressure": (1013.25, "hPa"), "humidity": (45.0, "%RH")},
    "enclosure": {"temperature": (24.0, "°C"), "pressure": (1002.5, "hPa")},
    "greenhouse": {"temperature": (18.0, "°C"), "humidity": (62.0, "%RH")},
    "cold frame": {"temperature": (12.0, "°C"), "humidity": (80.0, "%RH")},
    "shed": {"temperature": (16.0, "°C"), "humidity": (55.0, "%RH")},
    "cellar": {"temperature": (14.0, "°C"), "humidity": (70.0, "%RH")},
}


@pytest.fixture
async def sim(tmp_path):
    runtime = make_runtime(tmp_path)
    yield runtime
    await runtime.aclose()


def values_of(reading: dict[str, Any]) -> dict[str, tuple[float, str]]:
    return {v["quantity"]: (v["value"], v["unit"]) for v in reading["values"] if "label" not in v}


def assert_close(got: dict[str, tuple[float, str]], expected: dict[str, tuple[float, str]]) -> None:
    assert got.keys() >= expected.keys()
    for quantity, (value, unit) in expected.items():
        assert got[quantity][1] == unit
        assert got[quantity][0] == pytest.approx(value, abs=0.03), quantity


async def test_list_names_each_device_its_part_and_what_it_measures(sim):
    data = await ok(sim, "sensor", action="list")
    by_name = {d["name"]: d for d in data["devices"]}
    assert by_name["air"] == {
        "name": "air",
        "part": "bme280",
        "interface": "i2c",
        "location": "at 0x76 on I2C bus 1",
        "measures": [
            {"quantity": "temperature", "unit": "°C"},
            {"quantity": "pressure", "unit": "hPa"},
            {"quantity": "humidity", "unit": "%RH"},
        ],
        "description": "Bosch BME280 temperature, pressure and humidity sensor",
    }
    assert by_name["battery"]["measures"] == [{"quantity": "voltage", "unit": "V"}]
    assert by_name["water"]["location"] == "on 1-Wire as 28-00000a1b2c3d"
    outcome = await call(sim, "sensor", action="list")
    assert "air: bme280 at 0x76 on I2C bus 1, measures temperature (°C), pressure (hPa), humidity (%RH)" in (
        outcome.for_llm
    )


async def test_read_one_device_gives_values_units_time_and_raw_bytes(sim):
    data = await ok(sim, "sensor", action="read", device="board temperature")
    assert data["device"] == "board temperature" and data["part"] == "tmp102"
    assert data["values"] == [{"quantity": "temperature", "value": 21.5, "unit": "°C"}]
    assert data["raw"] == "15 80" and data["time"].endswith("Z")
    outcome = await call(sim, "sensor", action="read", device="board temperature")
    assert outcome.for_llm == "board temperature: temperature 21.50 °C"


async def test_read_all_reads_every_declared_device(sim):
    data = await ok(sim, "sensor", action="read")
    assert data["errors"] == []
    readings = {r["device"]: r for r in data["readings"]}
    assert set(readings) == {d.name for d in sim.board.devices}
    for name, expected in SIM_READINGS.items():
        assert_close(values_of(readings[name]), expected)
    assert all(r["raw"] for r in readings.values())


async def test_read_all_reports_a_failing_device_in_its_place_and_reads_the_rest(sim):
    sim.hardware.i2c(1).driver.inject(0x44, "nack")
    outcome = await call(sim, "sensor", action="read")
    assert outcome.ok, outcome.error
    [error] = outcome.data["errors"]
    assert error["device"] == "greenhouse" and error["kind"] == "nack" and error["part"] == "sht3x"
    assert error["error"].startswith("'greenhouse' (sht3x at 0x44 on I2C bus 1): no acknowledgement")
    assert len(outcome.data["readings"]) == len(sim.board.devices) - 1
    assert "12 devices read, 1 failed:" in outcome.for_llm
    assert "greenhouse: FAILED: 'greenhouse' (sht3x at 0x44 on I2C bus 1)" in outcome.for_llm


async def test_reading_one_failing_device_is_a_tool_error_naming_it(sim):
    sim.hardware.i2c(1).driver.inject(0x45, "corrupt")
    outcome = await call(sim, "sensor", action="read", device="cold frame")
    assert not outcome.ok
    assert outcome.error.startswith("sensor: 'cold frame' (sht4x at 0x45 on I2C bus 1): CRC mismatch in the")


async def test_an_unknown_device_is_refused_naming_the_known_ones(sim):
    outcome = await call(sim, "sensor", action="read", device="attic")
    assert not outcome.ok
    assert "no device named 'attic' in the sim profile (devices: 'board temperature', 'air'," in outcome.error


async def test_a_profile_without_devices_says_how_to_declare_them(tmp_path):
    runtime = make_runtime(tmp_path, board="rpi4b")
    try:
        outcome = await call(runtime, "sensor", action="list")
    finally:
        await runtime.aclose()
    assert not outcome.ok
    assert "the rpi4b profile declares no devices (add [[devices]] entries" in outcome.error


async def test_the_i2c_scan_names_declared_and_likely_parts(tmp_path):
    profile = write_profile(
        tmp_path,
        "scan",
        """simulated = true
[[i2c]]
bus = 1
read = [{ first = 0x08, last = 0x77 }]
[[devices]]
part = "tmp102"
bus = 1
address = 0x48
name = "greenhouse air"
[[devices]]
part = "tmp102"
bus = 1
address = 0x4B
name = "missing one"
""",
    )
    runtime = make_runtime(tmp_path, board=profile)
    try:
        outcome = await call(runtime, "i2c", action="scan", bus=1)
    finally:
        await runtime.aclose()
    assert outcome.ok, outcome.error
    text = outcome.for_llm
    assert "  0x48  device 'greenhouse air' (tmp102)" in text
    assert "  0x76  not declared; likely bme280 or bmp280" in text  # the sim's BME280, undeclared here
    assert "  0x50\n" in text + "\n"  # an EEPROM: no sensor part answers there
    assert "  device 'missing one' (tmp102, declared at 0x4b) did not acknowledge" in text
    assert outcome.data["parts"]["0x48"] == {"devices": [{"name": "greenhouse air", "part": "tmp102"}]}
    assert outcome.data["parts"]["0x77"] == {"likely": ["bme280", "bmp280"]}


def test_done_when_tool_call_prints_the_sims_readings(run_cli):
    out = run_cli("tool", "call", "sensor", '{"action": "read"}', "--board", "sim", timeout=60)
    assert out.returncode == 0, out.stderr
    assert (
        "air: temperature 22.00 °C, pressure 1013.2" in out.stdout and "hPa, humidity 45.00 %RH" in out.stdout
    )
    assert "board temperature: temperature 21.50 °C" in out.stdout
    assert "13 devices read:" in out.stdout and "FAILED" not in out.stdout
    as_json = run_cli("tool", "call", "sensor", '{"action": "read"}', "--board", "sim", "--json", timeout=60)
    data = json.loads(as_json.stdout)["data"]
    assert len(data["readings"]) == 13 and data["errors"] == []


# -- over MQTT, with the default profile remote callers get -------------------------------------------
DEV = "sensor-dev"


@contextlib.asynccontextmanager
async def mqtt_daemon(tmp_path: Path, port: int):
    config = config_from_dict(
        {
            "board": "sim",
            "device_id": DEV,
            "state_dir": str(tmp_path / "state"),
            "tools": {"rate_limit": 0},
            "mqtt": {"enabled": True, "port": port, "telemetry_interval_s": 0},
        },
        "test.toml",
    )
    channels = []

    def mqtt(runtime):
        channels.append(mqtt_service(runtime))
        return channels[0]

    daemon = Daemon(config, services=[mqtt], environ={})
    task = asyncio.create_task(daemon.run())
    ready = asyncio.create_task(daemon.ready.wait())
    await asyncio.wait((task, ready), timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    assert await channels[0].connection.wait_connected(30), "the daemon did not connect"
    try:
        yield
    finally:
        daemon.request_stop()
        assert await asyncio.wait_for(task, 30) == 0


@needs_mosquitto
async def test_sensor_read_over_mqtt(tmp_path):
    broker = Mosquitto(tmp_path / "broker").start()
    try:
        async with mqtt_daemon(tmp_path, broker.port), Caller(broker.port, ["test/answers"]) as c:
            request = {"id": "t1", "tool": "sensor", "args": {"action": "read", "device": "air"}}
            await c.publish(
                f"edgeclaw/{DEV}/tool/call", request, response_topic="test/answers", correlation=b"c1"
            )
            [answer] = await c.answers("test/answers", 1, within=30)
            body = answer.json
            assert answer.correlation == b"c1" and body["id"] == "t1" and body["ok"] is True, body
            assert_close(values_of(body["data"]), SIM_READINGS["air"])
            assert body["for_llm"].startswith("air: temperature 22.00 °C, pressure 1013.2")
    finally:
        broker.kill()


# -- on the console ---------------------------------------------------------------------------------
def test_sensor_read_on_the_console(tmp_path):
    from tests.test_console import DEVICE, PIN_HASH, ConsoleDaemon, PtyPort, login, run

    port = PtyPort(tmp_path / "ttyTEST0")
    config = {
        "board": "sim",
        "device_id": DEVICE,
        "state_dir": str(tmp_path / "state"),
        "console": {"ports": [str(port.link)], "login_hash": PIN_HASH, "login_delay_s": 0},
    }
    daemon = ConsoleDaemon(config).start()
    try:
        term = port.terminal()
        login(term)
        shown = run(term, '/call sensor {"action": "read", "device": "greenhouse"}')
        assert "greenhouse: temperature 18.00 °C, humidity 62.00 %RH" in shown
        listing = run(term, '/call sensor {"action": "list"}')
        assert "shed: aht20 at 0x38 on I2C bus 1, measures temperature" in listing
    finally:
        daemon.stop()
        port.vanish()


# -- a model asking --------------------------------------------------------------------------------
async def test_what_is_the_temperature_takes_one_sensor_call(tmp_path):
    """A small model's context: only a ranked subset of tools is offered. The scripted model calls
    `sensor` when it is offered (and would have to do raw I2C reads and datasheet arithmetic
    otherwise); one call brings back the reading in °C, which it then answers with."""
    with ScriptedLLM() as llm:
        offered_sensor = lambda body: "sensor" in {t["function"]["name"] for t in body.get("tools", [])}  # noqa: E731
        llm.route(
            offered_sensor,
            openai_tools(("sensor", {"action": "read", "device": "board temperature"})),
            openai_text("It is 21.5 °C on the board."),
        )
        llm.reply(openai_tools(("i2c", {"action": "read_word", "bus": 1, "address": 72, "register": 0})))
        providers = {
            "local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1", "context_tokens": 2048}
        }
        agents = Agents()
        try:
            loop = agents.loop(provider_config(tmp_path, providers))
            reply = await loop.handle(
                InboundMessage(channel="cli", text="what is the temperature?", chat_id="t", peer_kind="local")
            )
        finally:
            await agents.aclose()
        assert reply.ok and reply.text == "It is 21.5 °C on the board."
        assert len(llm.requests) == 2  # one tool call, then the answer
        offered = [t["function"]["name"] for t in llm.requests[0]["tools"]]
        assert "sensor" in offered and len(offered) < 20  # a subset, and the sensor tool in it
        [result] = [m for m in llm.requests[1]["messages"] if m["role"] == "tool"]
        assert "board temperature: temperature 21.50 °C" in result["content"]


def test_the_drivers_load_on_the_first_read_not_at_start(tmp_path):
    code = f"""
import sys
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import build_runtime
build_runtime(config_from_dict({{"board": "sim", "state_dir": {str(tmp_path)!r}}}, "t.toml"), environ={{}})
print(sorted(m for m in sys.modules if m.startswith("edgeclaw.backends.sensors")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
