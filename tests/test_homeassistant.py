"""Home Assistant entities for the board's own hardware.

The discovery payload is checked against Home Assistant's documented MQTT schema for each platform
it uses (the key sets below are the "Configuration Variables" of the sensor, binary_sensor,
switch and button MQTT integrations and of device-based discovery, written down as data: no Home
Assistant install here). The commands are sent the way Home Assistant sends them, to a real
`edgeclaw run` daemon on the sim board behind a real mosquitto.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.channels.mqtt.homeassistant import HomeAssistantEntities, tmp102_celsius
from edgeclaw.channels.mqtt.topics import DeviceTopics
from tests.mqtt_support import Caller, Mosquitto, daemon_env, needs_mosquitto, poll, run_daemon, stop_daemon
from tests.sensor_support import sensor_read_on_the_sim_board

# -- Home Assistant's schema, from its documentation ------------------------------------------------

# MQTT discovery's abbreviations (the ones a payload of ours may use).
ABBREVIATIONS = {
    "p": "platform", "dev": "device", "o": "origin", "cmps": "components", "uniq_id": "unique_id",
    "stat_t": "state_topic", "cmd_t": "command_topic", "avty": "availability", "val_tpl": "value_template",
    "unit_of_meas": "unit_of_measurement", "dev_cla": "device_class", "stat_cla": "state_class",
    "ent_cat": "entity_category", "pl_on": "payload_on", "pl_off": "payload_off",
    "pl_prs": "payload_press", "exp_aft": "expire_after", "pl_avail": "payload_available",
    "pl_not_avail": "payload_not_available", "t": "topic",
}  # fmt: skip
DEVICE_ABBREVIATIONS = {
    "ids": "identifiers", "mf": "manufacturer", "mdl": "model", "sw": "sw_version", "hw": "hw_version",
    "cu": "configuration_url", "cns": "connections", "sa": "suggested_area", "sn": "serial_number",
}  # fmt: skip
ORIGIN_ABBREVIATIONS = {"sw": "sw_version", "url": "support_url"}

DEVICE_KEYS = {
    "identifiers", "connections", "name", "manufacturer", "model", "model_id", "sw_version", "hw_version",
    "serial_number", "suggested_area", "configuration_url", "via_device",
}  # fmt: skip
ORIGIN_KEYS = {"name", "sw_version", "support_url"}
AVAILABILITY_ITEM_KEYS = {"topic", "payload_available", "payload_not_available", "value_template"}
# Every MQTT entity platform takes these.
COMMON_KEYS = {
    "platform", "name", "unique_id", "object_id", "default_entity_id", "availability", "availability_mode",
    "availability_template", "availability_topic", "payload_available", "payload_not_available",
    "enabled_by_default", "encoding", "entity_category", "entity_picture", "icon",
    "json_attributes_template", "json_attributes_topic", "qos",
}  # fmt: skip
PLATFORMS: dict[str, dict[str, set[str]]] = {
    "sensor": {
        "required": {"state_topic"},
        "allowed": COMMON_KEYS | {
            "state_topic", "value_template", "unit_of_measurement", "device_class", "state_class",
            "expire_after", "force_update", "last_reset_value_template", "options",
            "suggested_display_precision",
        },
    },
    "binary_sensor": {
        "required": {"state_topic"},
        "allowed": COMMON_KEYS | {
            "state_topic", "value_template", "device_class", "expire_after", "force_update",
            "off_delay", "payload_on", "payload_off",
        },
    },
    "switch": {
        "required": {"command_topic"},
        "allowed": COMMON_KEYS | {
            "command_topic", "command_template", "state_topic", "value_template", "device_class",
            "optimistic", "payload_on", "payload_off", "state_on", "state_off", "retain",
        },
    },
    "update": {
        "required": set(),
        "allowed": COMMON_KEYS | {
            "state_topic", "command_topic", "payload_install", "device_class", "title", "release_url",
            "release_summary", "latest_version_topic", "latest_version_template", "value_template",
            "display_precision", "retain",
        },
    },
    "button": {
        "required": {"command_topic"},
        "allowed": COMMON_KEYS | {
            "command_topic", "command_template", "device_class", "payload_press", "retain",
        },
    },
}  # fmt: skip
DEVICE_CLASSES = {
    # sensor: the classes used here with the units Home Assistant accepts for them
    "sensor": {
        "temperature": {"°C", "°F", "K"},
        "duration": {"d", "h", "min", "s", "ms"},
        "pressure": {"hPa", "kPa", "Pa", "bar", "mbar"},
        "humidity": {"%"},
        "illuminance": {"lx"},
        "voltage": {"V", "mV"},
        "current": {"A", "mA"},
        "power": {"W", "kW"},
    },
    "binary_sensor": {"connectivity", "problem", "power", "running", "moving", "opening", "motion"},
    "switch": {"outlet", "switch"},
    "button": {"identify", "restart", "update"},
    "update": {"firmware"},
}
STATE_CLASSES = {"measurement", "measurement_angle", "total", "total_increasing"}
ENTITY_CATEGORIES = {"config", "diagnostic"}
# Options at the root of a device-discovery payload: the three blocks and shared entity options
# (inherited by every component that does not set them).
ROOT_BLOCKS = {"device", "origin", "components"}
SHARED_ROOT_KEYS = {
    "state_topic",
    "availability",
    "availability_mode",
    "availability_topic",
    "qos",
    "encoding",
}


def expanded(block: dict[str, Any], table: dict[str, str]) -> dict[str, Any]:
    return {table.get(k, k): v for k, v in block.items()}


def schema_problems(payload: dict[str, Any]) -> list[str]:
    """What Home Assistant's documented device-discovery schema has against `payload`."""
    problems: list[str] = []
    root = expanded(payload, ABBREVIATIONS)
    for key in set(root) - ROOT_BLOCKS - SHARED_ROOT_KEYS:
        problems.append(f"root: unknown key {key!r}")
    device = expanded(root.get("device", {}), DEVICE_ABBREVIATIONS)
    if not (device.get("identifiers") or device.get("connections")):
        problems.append("device: identifiers or connections are required")
    if not isinstance(device.get("identifiers", []), list):
        problems.append("device: identifiers must be a list")
    problems += [f"device: unknown key {k!r}" for k in set(device) - DEVICE_KEYS]
    origin = expanded(root.get("origin", {}), ORIGIN_ABBREVIATIONS)
    if "name" not in origin:
        problems.append("origin: name is required")
    problems += [f"origin: unknown key {k!r}" for k in set(origin) - ORIGIN_KEYS]
    components = root.get("components")
    if not isinstance(components, dict) or not components:
        return [*problems, "components: a non-empty object is required"]
    shared = {k: v for k, v in root.items() if k in SHARED_ROOT_KEYS}
    for cid, raw in components.items():
        comp = {**shared, **expanded(raw, ABBREVIATIONS)}
        where = f"components.{cid}"
        platform = comp.get("platform")
        if platform not in PLATFORMS:
            problems.append(f"{where}: platform {platform!r} is not one of {sorted(PLATFORMS)}")
            continue
        spec = PLATFORMS[platform]
        if not comp.get("unique_id"):
            problems.append(f"{where}: unique_id is required in device discovery")
        elif comp["unique_id"] != cid:
            problems.append(f"{where}: keyed by something other than its unique_id")
        for key in spec["required"] - set(comp):
            problems.append(f"{where} ({platform}): {key!r} is required")
        for key in set(comp) - spec["allowed"]:
            problems.append(f"{where} ({platform}): {key!r} is not an option of this platform")
        for item in comp.get("availability", []):
            if "topic" not in item:
                problems.append(f"{where}: an availability item needs a topic")
            problems += [f"{where}: availability key {k!r}" for k in set(item) - AVAILABILITY_ITEM_KEYS]
        dclass = comp.get("device_class")
        if dclass is not None:
            known = DEVICE_CLASSES[platform]
            if dclass not in known:
                problems.append(f"{where}: device_class {dclass!r} not one of {platform}'s")
            elif platform == "sensor" and comp.get("unit_of_measurement") not in known[dclass]:
                problems.append(f"{where}: unit {comp.get('unit_of_measurement')!r} is not one for {dclass}")
        if "state_class" in comp and comp["state_class"] not in STATE_CLASSES:
            problems.append(f"{where}: state_class {comp['state_class']!r}")
        if "entity_category" in comp and comp["entity_category"] not in ENTITY_CATEGORIES:
            problems.append(f"{where}: entity_category {comp['entity_category']!r}")
        for key in ("state_topic", "command_topic"):
            topic = comp.get(key)
            if topic is not None and (
                not isinstance(topic, str) or not topic or "+" in topic or "#" in topic
            ):
                problems.append(f"{where}: {key} {topic!r} is not a topic one may publish to")
    return problems


def test_the_schema_check_catches_what_home_assistant_would_reject():
    """The validator itself: each kind of mistake is reported."""
    good = {
        "dev": {"ids": ["x"], "name": "x"}, "o": {"name": "edgeclaw"},
        "cmps": {"u1": {"p": "switch", "unique_id": "u1", "command_topic": "a/b"}},
    }  # fmt: skip
    assert schema_problems(good) == []
    bad_switch = json.loads(json.dumps(good))
    del bad_switch["cmps"]["u1"]["command_topic"]
    assert any("'command_topic' is required" in p for p in schema_problems(bad_switch))
    unknown = json.loads(json.dumps(good))
    unknown["cmps"]["u1"]["unit_of_measurement"] = "°C"
    assert any("not an option of this platform" in p for p in schema_problems(unknown))
    no_uid = json.loads(json.dumps(good))
    del no_uid["cmps"]["u1"]["unique_id"]
    assert any("unique_id is required" in p for p in schema_problems(no_uid))
    sensor = {"p": "sensor", "unique_id": "t", "state_topic": "s", "device_class": "temperature"}
    wrong_unit = {**good, "cmps": {"t": {**sensor, "unit_of_measurement": "C"}}}
    assert any("is not one for temperature" in p for p in schema_problems(wrong_unit))


def test_tmp102_conversion_follows_the_datasheet():
    # Datasheet table 7-2: 0x190 counts = 25 °C, 0xE70 = -25 °C; SMBus delivers the bytes swapped.
    assert tmp102_celsius(0x0019) == 25.0  # MSB 0x19, LSB 0x00
    assert tmp102_celsius(0x00E7) == -25.0
    assert tmp102_celsius(0xF07F) == 127.9375  # 0x7FF counts, the top of the range


def test_home_assistant_commands_get_the_gpio_tool_only(tmp_path: Path):
    from edgeclaw.tools.base import ToolContext
    from tests.hw_support import make_runtime

    ctx = ToolContext(channel="homeassistant", caller="homeassistant")
    runtime = make_runtime(tmp_path / "default")
    assert runtime.registry.policy.allowed(ctx) == {"gpio"}
    assert "gateway" in runtime.registry.policy.allowed(ToolContext(channel="cli"))
    assert "homeassistant" in runtime.registry.policy.explain("gateway", ctx)
    # A table of the operator's own replaces the default.
    widened = make_runtime(tmp_path / "widened", tools={"rate_limit": 0, "channels": {"homeassistant": {
        "allow": ["gpio", "gateway"]}}})  # fmt: skip
    assert widened.registry.policy.allowed(ctx) == {"gpio", "gateway"}


def test_no_answer_may_be_aimed_at_the_entity_topics():
    """A caller's Response Topic under `ha/` would pose as an entity's state or command."""
    from edgeclaw.channels.mqtt.topics import reserved_topic

    for topic in (f"{LED}/set", f"{LED}/state", "edgeclaw/other-device/ha/restart/set"):
        assert reserved_topic(topic, PREFIX, "homeassistant") is not None, topic
    assert reserved_topic("reply/backend-1/ha", PREFIX, "homeassistant") is None


# -- against a real daemon on the sim board ---------------------------------------------------------

DEV = "ha-sim"
PREFIX = "edgeclaw"
BASE = f"{PREFIX}/{DEV}"
LED = f"{BASE}/ha/gpio_led"
BUTTON = f"{BASE}/ha/gpio_button"
DISCOVERY = f"homeassistant/device/{DEV}/config"


@pytest.fixture
def broker(tmp_path: Path):
    b = Mosquitto(tmp_path / "broker").start()
    yield b
    b.kill()


class Daemon:
    """`edgeclaw run --board sim` as device DEV, with the board's entities and a restart button."""

    def __init__(self, workdir: Path, port: int, extra: str = "", env: dict[str, str] | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / "daemon.log"
        config = workdir / "edgeclaw.toml"
        config.write_text(
            f'board = "sim"\ndevice_id = "{DEV}"\n[tools]\nrate_limit = 0\n'
            f"[mqtt]\nenabled = true\nport = {port}\ntelemetry_interval_s = 2.0\n"
            "homeassistant_poll_s = 0.2\nhomeassistant_restart_button = true\n" + extra
        )
        self.proc = run_daemon(
            daemon_env(workdir / "state", config, **(env or {})), self.log, "--board", "sim"
        )

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        stop_daemon(self.proc)


@pytest.fixture
def daemon(tmp_path: Path, broker: Mosquitto):
    d = Daemon(tmp_path / "dev", broker.port)
    yield d
    d.stop()


async def gpio_read(caller: Caller, n: int) -> bool:
    """The LED as the gpio tool reads it, over the device's tool/call."""
    await caller.publish(
        f"{BASE}/tool/call", {"id": f"r{n}", "tool": "gpio", "args": {"action": "read", "pin": "led"}}
    )
    answer = await caller.wait_for(
        lambda: next((r.json for r in caller.on(f"{BASE}/tool/result") if r.json.get("id") == f"r{n}"), None),
        what=f"gpio read r{n}",
    )
    assert answer["ok"], answer
    return answer["data"]["active"]


def daemon_log(d: Daemon) -> str:
    return d.log.read_text(errors="replace")


@needs_mosquitto
async def test_discovery_follows_home_assistants_schema_for_every_platform(broker, daemon):
    async with Caller(broker.port, [DISCOVERY]) as ha:
        await ha.answers(DISCOVERY, 1, within=60)
    async with Caller(broker.port, [DISCOVERY]) as late:  # retained: Home Assistant started later
        (msg,) = await late.answers(DISCOVERY, 1)
        payload = msg.json
    assert msg.retain
    assert schema_problems(payload) == []
    cmps = payload["cmps"]
    by_platform: dict[str, list[dict[str, Any]]] = {}
    for comp in cmps.values():
        by_platform.setdefault(comp["p"], []).append(comp)
    assert set(by_platform) == {"sensor", "binary_sensor", "switch", "button", "update"}
    (led,) = by_platform["switch"]
    assert (led["command_topic"], led["state_topic"]) == (f"{LED}/set", f"{LED}/state")
    # The profile's declared TMP102, by its name there, no longer by its I2C label.
    temp = next(c for c in by_platform["sensor"] if c["name"] == "Board temperature")
    assert (temp["device_class"], temp["unit_of_measurement"]) == ("temperature", "°C")
    assert temp["default_entity_id"] == "sensor.ha_sim_sensor_board_temperature_temperature"
    assert not [c for c in by_platform["sensor"] if "i2c" in c["unique_id"]]  # each part once
    kinds = {c.get("device_class") for c in by_platform["binary_sensor"]}
    assert "connectivity" in kinds
    assert [c["device_class"] for c in by_platform["button"]] == ["restart"]
    # Availability for all of them: the retained status, the Last Will included.
    assert payload["availability"][0]["topic"] == f"{BASE}/status"


@needs_mosquitto
async def test_a_switch_command_toggles_the_sim_led(broker, daemon):
    async with Caller(broker.port, [f"{BASE}/#"]) as ha:
        await ha.wait_for(lambda: ha.on(f"{LED}/state"), within=60, what="the LED's first state")
        assert ha.on(f"{LED}/state")[-1].payload == b"OFF"
        assert await gpio_read(ha, 1) is False
        await ha.publish(f"{LED}/set", "ON")
        await ha.wait_for(lambda: ha.on(f"{LED}/state")[-1].payload == b"ON", what="the LED on")
        assert await gpio_read(ha, 2) is True
        await ha.publish(f"{LED}/set", "OFF")
        await ha.wait_for(lambda: ha.on(f"{LED}/state")[-1].payload == b"OFF", what="the LED off")
        assert await gpio_read(ha, 3) is False
        # The switch's command ran through the registry as Home Assistant: on `events` like every call.
        events = [r.json for r in ha.on(f"{BASE}/events")]
        writes = [e for e in events if e.get("tool") == "gpio" and e.get("channel") == "homeassistant"]
        assert len(writes) == 2, events
        # The button (not pressed) and the TMP102 are published too.
        assert ha.on(f"{BUTTON}/state")[-1].payload == b"OFF"
        temp_topic = next(r.topic for r in ha.received if r.topic.endswith("_temperature/state"))
        assert -40 < float(ha.on(temp_topic)[-1].payload) < 125


@needs_mosquitto
async def test_states_are_published_again_at_the_telemetry_interval(broker, daemon):
    async with Caller(broker.port, [f"{BUTTON}/state"]) as ha:
        await ha.answers(f"{BUTTON}/state", 3, within=60)  # the retained one, then every 2 s
        fresh = [r for r in ha.on(f"{BUTTON}/state") if not r.retain]
        assert len(fresh) >= 2
        assert 1.0 < fresh[1].at - fresh[0].at < 4.0


@needs_mosquitto
async def test_commands_outside_the_profile_and_malformed_ones_do_nothing(broker, daemon):
    async with Caller(broker.port, [f"{BASE}/#"]) as ha:
        await ha.wait_for(lambda: ha.on(f"{LED}/state"), within=60, what="the LED's first state")
        # The restart button calls `gateway`, which the homeassistant profile does not admit.
        await ha.publish(f"{BASE}/ha/restart/set", "PRESS")
        await poll(lambda: "ha/restart/set refused" in daemon_log(daemon), what="the refusal in the log")
        assert "the homeassistant channel's default profile 'homeassistant'" in daemon_log(daemon)
        # Malformed: each logged, none run.
        for payload in (b"on", b"TOGGLE", b"\xff\xfe", b"", b"ON " * 30):
            await ha.publish(f"{LED}/set", payload)
        await ha.publish(f"{BASE}/ha/restart/set", "ON")
        await poll(
            lambda: daemon_log(daemon).count("ignored: expected") >= 6, what="six malformed commands logged"
        )
        await asyncio.sleep(1.0)
        assert await gpio_read(ha, 1) is False
        assert all(r.payload == b"OFF" for r in ha.on(f"{LED}/state"))
        assert daemon.running  # no restart either
        events = [r.json for r in ha.on(f"{BASE}/events")]
        assert not [e for e in events if e.get("tool") == "gpio" and e.get("channel") == "homeassistant"]


@needs_mosquitto
async def test_a_retained_command_left_on_the_broker_is_not_run(tmp_path: Path, broker):
    """Home Assistant does not retain commands; one that is retained would run at every reconnect."""
    async with Caller(broker.port, [f"{LED}/state"]) as ha:
        await ha.publish(f"{LED}/set", "ON", retain=True)
        d = Daemon(tmp_path / "dev", broker.port)
        try:
            await ha.wait_for(lambda: ha.on(f"{LED}/state"), within=60, what="the LED's first state")
            await poll(
                lambda: "it is a retained message" in daemon_log(d), what="the retained command logged"
            )
            await asyncio.sleep(0.5)
            assert all(r.payload == b"OFF" for r in ha.on(f"{LED}/state"))
        finally:
            d.stop()


@needs_mosquitto
async def test_the_restart_button_restarts_the_daemon_once_policy_admits_gateway(tmp_path: Path, broker):
    extra = '[tools.channels.homeassistant]\nallow = ["gpio", "gateway"]\n'
    async with Caller(broker.port, [f"{BASE}/status"]) as ha:
        d = Daemon(tmp_path / "dev", broker.port, extra)
        try:

            def states() -> list[str]:
                return [r.json["state"] for r in ha.on(f"{BASE}/status")]

            await ha.wait_for(lambda: "online" in states(), within=60, what="the device online")
            await ha.publish(f"{BASE}/ha/restart/set", "PRESS")

            def back_online() -> bool:
                seen = states()
                first = seen.index("online")
                return "offline" in seen[first:] and "online" in seen[seen.index("offline", first) :]

            await ha.wait_for(back_online, within=60, what="the device offline, then online again")
            assert "restart requested: Home Assistant restart button" in daemon_log(d)
        finally:
            d.stop()


# -- in process: the button pressed --------------------------------------------------------------


async def test_the_button_binary_sensor_follows_the_pin(tmp_path: Path):
    from tests.hw_support import make_runtime

    runtime = make_runtime(tmp_path)
    published: list[tuple[str, bytes]] = []

    async def publish(topic: str, payload: bytes) -> None:
        published.append((topic, payload))

    entities = HomeAssistantEntities(
        topics=DeviceTopics(PREFIX, DEV), profile=runtime.board, hardware=runtime.hardware,
        registry=runtime.registry, publish=publish, poll_s=0.05, refresh_s=0, restart_button=False,
    )  # fmt: skip
    try:
        entities.start()
        topic = f"{BUTTON}/state"
        await asyncio.sleep(0.3)  # several poll intervals: before the first connection nothing is read
        assert published == []
        entities.on_connect()  # as the channel tells it once connected
        await poll(lambda: (topic, b"OFF") in published, within=10, what="the button released")
        await asyncio.sleep(0.5)  # several polls: an unchanged state is not published again
        pin = runtime.hardware.gpio().driver.device(27).pin
        pin.drive_low()  # pressed: the pull-up pulled to ground
        await poll(lambda: published[-1:] == [(topic, b"ON")] or (topic, b"ON") in published, within=10)
        pin.drive_high()
        await poll(lambda: [p for t, p in published if t == topic][-1] == b"OFF", within=10)
        await asyncio.sleep(0.5)
        # On change only: three states for the button, not one per poll.
        assert [p for t, p in published if t == topic] == [b"OFF", b"ON", b"OFF"]
    finally:
        await entities.before_disconnect()
        assert runtime.hardware is not None
        await runtime.hardware.aclose()


# -- Home Assistant's own code ----------------------------------------------------------------------
HA_VERSION = "2025.4.4"  # the newest release the Python 3.13.0 here installs
HA_VENV = (
    Path(os.environ.get("EDGECLAW_TEST_CACHE", Path.home() / ".cache" / "edgeclaw-tests"))
    / f"ha-{HA_VERSION}"
)
HA_VALIDATE = Path(__file__).resolve().parent / "ha_validate.py"


def _python_3_13() -> str | None:
    for candidate in (
        shutil.which("python3.13"),
        *sorted(Path.home().glob(".pyenv/versions/3.13*/bin/python")),
    ):
        if candidate and Path(candidate).exists():
            return str(candidate)
    return None


@pytest.fixture(scope="session")
def ha_python() -> str:
    """The Python of a venv with Home Assistant installed from PyPI (built once, kept in the test cache)."""
    python = HA_VENV / "bin" / "python"
    if not python.exists():
        base = _python_3_13()
        if base is None:
            pytest.skip(
                f"Home Assistant {HA_VERSION} needs Python 3.13 (python3.13 or pyenv), not found here"
            )
        subprocess.run([base, "-m", "venv", str(HA_VENV)], check=True, timeout=120)
        done = subprocess.run(
            [str(HA_VENV / "bin" / "pip"), "install", "-q", f"homeassistant=={HA_VERSION}"],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode != 0:
            shutil.rmtree(HA_VENV, ignore_errors=True)
            raise AssertionError(f"installing Home Assistant {HA_VERSION} failed:\n{done.stderr[-3000:]}")
    return str(python)


def in_home_assistant(ha_python: str, asked: dict[str, Any], *args: str) -> dict[str, Any]:
    """tests/ha_validate.py run by Home Assistant's Python: `asked` in, its answer out."""
    done = subprocess.run(
        [ha_python, str(HA_VALIDATE), *args],
        input=json.dumps(asked),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@needs_mosquitto
async def test_home_assistant_takes_every_entity_and_every_value_sensor_read_prints(
    broker, daemon, ha_python
):
    async with Caller(broker.port, [DISCOVERY, f"{BASE}/ha/+/state"]) as ha:
        (msg,) = await ha.answers(DISCOVERY, 1, within=60)
        payload = msg.json
        printed = sensor_read_on_the_sim_board()
        # The board's own sensors (the telemetry's figures are entities too, read from `telemetry`).
        sensors = {
            c["state_topic"]: c
            for c in payload["cmps"].values()
            if c["p"] == "sensor" and c["state_topic"].startswith(f"{BASE}/ha/")
        }
        await ha.wait_for(lambda: all(ha.on(t) for t in sensors), 30, "a state of every sensor")
        states = {t: float(ha.on(t)[-1].payload) for t in sensors}

    taken = in_home_assistant(ha_python, payload)
    assert set(taken) == set(payload["cmps"])
    for uid, verdict in taken.items():
        assert verdict["ok"], (uid, verdict)
        assert verdict["warnings"] == [], (uid, verdict["warnings"])
        # Only the entity id of Home Assistant 2025.10 on, which this release predates.
        assert set(verdict["dropped"]) <= {"default_entity_id"}, (uid, verdict["dropped"])

    # One sensor entity for every value `sensor read` prints, named after its device, in its unit
    # (Home Assistant writes relative humidity "%"), showing that value.
    unmatched = dict(sensors)
    for p in printed:
        unit = "%" if p.unit == "%RH" else p.unit
        match = next(
            (
                t
                for t, c in unmatched.items()
                if c["name"].lower().startswith(p.device.lower())
                and c["unit_of_measurement"] == unit
                and (not p.label or c["name"].endswith(p.label))
                and states[t] == pytest.approx(p.value, abs=0.5)
            ),
            None,
        )
        assert match is not None, (p, sorted(c["name"] for c in unmatched.values()))
        del unmatched[match]
    assert unmatched == {}, sorted(c["name"] for c in unmatched.values())


@needs_mosquitto
async def test_connectivity_is_off_in_home_assistant_once_the_device_is_killed(broker, daemon, ha_python):
    async with Caller(broker.port, [DISCOVERY]) as ha:
        (msg,) = await ha.answers(DISCOVERY, 1, within=60)
    [connectivity] = [c for c in msg.json["cmps"].values() if c.get("device_class") == "connectivity"]
    daemon.proc.kill()  # no clean stop: the broker publishes the Last Will
    daemon.proc.wait(10)
    async with Caller(broker.port, [connectivity["state_topic"]]) as ha:
        will = await ha.wait_for(
            lambda: next((m for m in ha.on(connectivity["state_topic"]) if b"offline" in m.payload), None),
            30,
            "the Last Will on the status topic",
        )
    asked = {"template": connectivity["value_template"], "payload": will.payload.decode()}
    rendered = in_home_assistant(ha_python, asked, "render")["rendered"]
    assert rendered == connectivity["payload_off"]  # off in Home Assistant


ADMIN_KEY = "ha-admin-key-0f3a9c"
COMMAND_KEY = "ha-command-key-77d2e1"


@needs_mosquitto
async def test_an_update_an_admin_offers_shows_in_home_assistant_and_install_runs_it(
    tmp_path, broker, ha_python
):
    """Only the admin key can offer; Home Assistant's Install then runs that offer as `gateway` `update`,
    which still refuses an unsigned wheel (no update key configured): nothing is installed."""
    from edgeclaw import __version__
    from edgeclaw.net.signing import envelope

    extra = (
        'hmac_secret_env = "EC_HMAC"\nadmin_secret_env = "EC_ADMIN"\nhomeassistant_update_install = true\n'
        '[tools.channels.homeassistant]\nallow = ["gpio", "gateway"]\n'
    )
    d = Daemon(
        tmp_path / "upd", broker.port, extra=extra, env={"EC_ADMIN": ADMIN_KEY, "EC_HMAC": COMMAND_KEY}
    )
    gateway, answers, state = f"{BASE}/admin/gateway", "test/ha/admin", f"{BASE}/ha/update/state"
    offer = {
        "action": "offer_update",
        "version": "99.0.0",
        "url": "https://releases.example.net/edgeclaw-99.0.0-py3-none-any.whl",
        "sha256": "ab" * 32,
    }
    try:
        async with Caller(broker.port, [DISCOVERY, state, answers]) as ha:
            (msg,) = await ha.answers(DISCOVERY, 1, within=60)
            [update] = [c for c in msg.json["cmps"].values() if c["p"] == "update"]
            assert (
                update["command_topic"] == f"{BASE}/ha/update/set" and update["payload_install"] == "install"
            )
            first = await ha.wait_for(lambda: ha.on(state), 30, "the update entity's state")
            assert first[-1].json == {"installed_version": __version__, "latest_version": __version__}

            for n, key in enumerate((COMMAND_KEY, ADMIN_KEY)):
                request = {"id": f"offer-{n}", **offer}
                signed = envelope(
                    key.encode(), gateway, request, response_topic=answers, correlation=b"%d" % n
                )
                await ha.publish(gateway, signed, response_topic=answers, correlation=b"%d" % n)
                await ha.wait_for(lambda n=n: [m for m in ha.on(answers) if m.correlation == b"%d" % n], 30)
            refused, offered = ha.on(answers)
            assert not refused.json["ok"], refused.json  # the everyday key cannot offer an update
            assert offered.json["ok"], offered.json
            latest = await ha.wait_for(
                lambda: next((m for m in ha.on(state) if m.json["latest_version"] == "99.0.0"), None), 30
            )
            assert latest.json["installed_version"] == __version__

            await ha.publish(f"{BASE}/ha/update/set", "install")
            await ha.wait_for(lambda: "updates must be signed" in daemon_log(d), 30, "the install refused")
    finally:
        d.stop()
    assert "update to" not in daemon_log(d)  # nothing installed, no restart onto it
