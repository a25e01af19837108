"""Home Assistant device discovery: one retained message describing the device and its sensors.

Home Assistant (2024.11 and later) accepts a device-based discovery payload
on ``homeassistant/device/{dev}/config`` with a `dev` (device) block, an `o`
(origin) block and `cmps` (components), plus shared options at the root:
here availability from our retained `status` (online/offline, the Last Will
included). Each component names its own `state_topic` (the telemetry topic
for these sensors): a root one would be inherited by the board's buttons and
switches too (homeassistant.py), and a button has no state topic. It is
re-sent whenever Home Assistant announces itself on ``homeassistant/status``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from edgeclaw.channels.mqtt.topics import DeviceTopics
from edgeclaw.records import dataclass


@dataclass(frozen=True)
class Sensor:
    key: str  # the telemetry field
    name: str
    unit: str | None = None
    device_class: str | None = None
    state_class: str | None = "measurement"
    diagnostic: bool = False


SENSORS = (
    Sensor("cpu_temp_c", "CPU temperature", "°C", "temperature"),
    Sensor("load_1m", "Load (1 min)"),
    Sensor("mem_used_pct", "Memory used", "%"),
    Sensor("disk_used_pct", "Disk used", "%"),
    Sensor("uptime_s", "Uptime", "s", "duration", "total_increasing", diagnostic=True),
    Sensor("tool_calls", "Tool calls", None, None, "total_increasing"),
    Sensor("tool_errors", "Tool call errors", None, None, "total_increasing"),
    Sensor("outbox_depth", "Outbox depth", None, None, "measurement", diagnostic=True),
    Sensor("outbox_dropped", "Outbox dropped", None, None, "total_increasing", diagnostic=True),
)


def _object_id(device: str) -> str:
    """Home Assistant ids allow [a-zA-Z0-9_-] only (ASCII: str.isalnum alone would pass "é")."""
    return "".join(c if (c.isascii() and c.isalnum()) or c in "_-" else "_" for c in device)


def discovery_topic_usable(device: str) -> bool:
    """Home Assistant ignores a discovery topic whose id has characters other than [a-zA-Z0-9_-]
    (a hostname with a dot in it, say). The topic is fixed by the MQTT contract, so such a
    device id is reported at start-up rather than quietly changed."""
    return bool(device) and _object_id(device) == device


def discovery_payload(
    topics: DeviceTopics,
    *,
    board: str,
    version: str,
    telemetry_interval_s: float,
    hardware: Callable[[str], dict[str, dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """`hardware` gives the board's own entities (homeassistant.py) for a device id: components
    with their own state and command topics, beside the telemetry sensors."""
    dev_id = _object_id(topics.device)
    components: dict[str, dict[str, Any]] = {}
    for sensor in SENSORS:
        uid = f"edgeclaw_{dev_id}_{sensor.key}"
        component: dict[str, Any] = {
            "p": "sensor",
            "name": sensor.name,
            "unique_id": uid,
            "state_topic": topics.telemetry,
            "value_template": "{{ value_json.%s }}" % sensor.key,  # noqa: UP031 - Jinja braces
        }
        if sensor.unit is not None:
            component["unit_of_measurement"] = sensor.unit
        if sensor.device_class is not None:
            component["device_class"] = sensor.device_class
        if sensor.state_class is not None:
            component["state_class"] = sensor.state_class
        if sensor.diagnostic:
            component["entity_category"] = "diagnostic"
        if telemetry_interval_s > 0:
            # A value not refreshed for three periods is shown as unavailable, not as current.
            component["expire_after"] = max(30, round(3 * telemetry_interval_s))
        components[uid] = component
    if hardware is not None:
        components.update(hardware(dev_id))
    return {
        "dev": {
            "ids": [f"edgeclaw_{dev_id}"],
            "name": topics.device,
            "mf": "edgeclaw",
            "mdl": board,
            "sw": version,
        },
        "o": {"name": "edgeclaw", "sw": version},
        "cmps": components,
        "availability": [
            {
                "topic": topics.status,
                "value_template": "{{ value_json.state }}",
                "payload_available": "online",
                "payload_not_available": "offline",
            }
        ],
        "qos": 1,
    }
