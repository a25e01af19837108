"""Home Assistant entities for the board's own hardware, from its board profile.

The board profile says what the board has; this turns it into Home Assistant
components that join the device discovery message (discovery.py):

- an output GPIO pin (the sim board's LED) is a `switch`: `ON`/`OFF` on its
  command topic becomes a `gpio` write;
- an input GPIO pin (the button) is a `binary_sensor`;
- an I2C device the profile labels as a part we can decode (a TMP102) is a
  `sensor` with its unit and device class; an MCP3008 on SPI gives each
  channel's raw 10-bit reading (no driver converts it to a quantity);
- a connectivity `binary_sensor` reads the retained `status`;
- a restart `button`, only when configured, is a `gateway` restart;
- an `update` entity shows the running version and the one an admin offers (`gateway`
  `offer_update`); with `homeassistant_update_install`, its Install runs that offer as a `gateway`
  `update`, which the policy must admit for this channel like the restart button.

Commands run through the registry as channel `homeassistant`, so the policy
decides: its built-in profile admits `gpio` only (the restart button is
refused unless the config widens `[tools.channels.homeassistant]`). Home
Assistant cannot sign its commands, so anyone who may write these topics may
use what that profile admits: the broker's ACL is the gate. A payload that is
not one of the platform's documented ones is logged and nothing runs.

States are read straight from the board's backends (like telemetry: reports,
not commands, so no audit event per poll), published retained when they
change (checked every `homeassistant_poll_s`) and again every telemetry
interval; availability comes from the retained `status` like every entity.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from edgeclaw.channels.mqtt.topics import DeviceTopics
from edgeclaw.records import dataclass
from edgeclaw.tasks import TaskSet
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.registry import Registry

log = logging.getLogger("edgeclaw.mqtt.homeassistant")

CHANNEL = "homeassistant"
# Home Assistant's default payloads for each platform (switch.mqtt, binary_sensor.mqtt, button.mqtt).
ON, OFF, PRESS, INSTALL = "ON", "OFF", "PRESS", "install"
MCP3008_CHANNELS = 8

Platform = Literal["sensor", "binary_sensor", "switch", "button", "update"]
Publish = Callable[[str, bytes], Awaitable[None]]  # topic, payload: retained, QoS 1


@dataclass(frozen=True)
class Entity:
    """One Home Assistant component. `read` gives its state payload (None: nothing to publish);
    `command` handles a payload on its command topic."""

    key: str  # unique within the device; part of unique_id and the topics
    platform: Platform
    name: str
    options: dict[str, Any]
    read: Callable[[], Awaitable[str | None]] | None = None
    command: Callable[[str], Awaitable[None]] | None = None


def tmp102_celsius(word: int) -> float:
    """The TMP102's temperature register as SMBus read_word_data returns it (low byte first on the
    wire, the part sends MSB first): 12 bits, two's complement, 0.0625 °C a step (datasheet 7.5.1)."""
    raw = ((word & 0xFF) << 8) | (word >> 8)
    counts = raw >> 4
    if counts & 0x800:
        counts -= 0x1000
    return round(counts * 0.0625, 4)


# The units Home Assistant accepts for a device class, where ours differ (its humidity is "%").
HA_UNITS = {"%RH": "%"}
# Our quantities as Home Assistant's sensor device classes, with the units each accepts.
DEVICE_CLASSES: dict[str, tuple[str, frozenset[str]]] = {
    "temperature": ("temperature", frozenset({"°C", "°F", "K"})),
    "pressure": ("pressure", frozenset({"hPa", "kPa", "Pa", "bar", "mbar", "mmHg", "inHg", "psi"})),
    "humidity": ("humidity", frozenset({"%"})),
    "illuminance": ("illuminance", frozenset({"lx"})),
    "voltage": ("voltage", frozenset({"V", "mV", "µV", "kV", "MV"})),
    "bus_voltage": ("voltage", frozenset({"V", "mV", "µV", "kV", "MV"})),
    "current": ("current", frozenset({"A", "mA"})),
    "power": ("power", frozenset({"W", "kW", "mW", "MW", "GW", "TW"})),
}


def sensor_class(quantity: str, unit: str) -> dict[str, str]:
    """unit_of_measurement, and device_class where Home Assistant has one that takes this unit."""
    ha_unit = HA_UNITS.get(unit, unit)
    out = {"unit_of_measurement": ha_unit}
    found = DEVICE_CLASSES.get(quantity)
    if found is not None and ha_unit in found[1]:
        out["device_class"] = found[0]
    return out


def entity_name(device: str, value: Any) -> str:
    """ "Air humidity", "Board temperature" (not "... temperature temperature"), "Adc voltage ch2"."""
    words = device if value.quantity.replace("_", " ") in device.lower() else f"{device} {value.quantity}"
    words = words.replace("_", " ")
    if value.label:
        words += f" {value.label}"
    return words[:1].upper() + words[1:]


def _key(text: str) -> str:
    return "".join(c if (c.isascii() and c.isalnum()) or c in "_-" else "_" for c in text.lower())


class RecentReadings:
    """One read of a declared device serves all its entities in a poll (a BME280's three values
    come from one transaction, not three)."""

    def __init__(self, hardware: Any, max_age_s: float) -> None:
        self.hardware = hardware
        self.max_age_s = max_age_s
        self._taken: dict[str, tuple[float, Any]] = {}

    async def get(self, device: str) -> Any:
        now = time.monotonic()
        taken = self._taken.get(device)
        if taken is not None and now - taken[0] <= self.max_age_s:
            return taken[1]
        reading = await self.hardware.sensors().read(device)
        self._taken[device] = (now, reading)
        return reading


class HomeAssistantEntities:
    """An MqttExtension (channel.MqttChannel.extend): command topics in, entity states out."""

    def __init__(
        self,
        *,
        topics: DeviceTopics,
        profile: Any,  # edgeclaw.board.BoardProfile
        hardware: Any,  # edgeclaw.backends.hub.BoardBackends
        registry: Registry,
        publish: Publish,
        poll_s: float,
        refresh_s: float,
        restart_button: bool,
        offered: Callable[[], str] | None = None,
        install: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.topics = topics
        self.profile = profile
        self.hardware = hardware
        self.registry = registry
        self._publish = publish
        self.poll_s = poll_s
        self.refresh_s = refresh_s  # every state again this often, changed or not (0 = on change only)
        self.entities: list[Entity] = []
        self._last: dict[str, str] = {}  # state topic -> the payload last published
        self._last_full = float("-inf")
        self._commands: dict[str, Entity] = {}
        self._tasks = TaskSet()
        self._poller: asyncio.Future[None] | None = None
        # Set at the first connection: before it, states could not be published, and reading them
        # would only open the board's devices (and import their drivers) during start-up.
        self._connected_once = asyncio.Event()
        self._readings = RecentReadings(hardware, max_age_s=min(1.0, poll_s / 2))
        self._offered = offered  # the version an admin offers (the running one when none is)
        self._install_request = install  # the update request of the offer; None: no Install
        self._build(restart_button)

    # -- topics --------------------------------------------------------------
    def state_topic(self, key: str) -> str:
        return f"{self.topics.base}/ha/{key}/state"

    def command_topic(self, key: str) -> str:
        return f"{self.topics.base}/ha/{key}/set"

    # -- the entities from the profile ---------------------------------------
    def _build(self, restart_button: bool) -> None:
        spec = self.profile._spec
        for grant in spec.gpio:
            key = f"gpio_{_key(grant.name)}"
            if grant.direction == "out":
                self._add(Entity(key, "switch", grant.name.capitalize(), {
                    "state_topic": self.state_topic(key),
                    "command_topic": self.command_topic(key),
                    "payload_on": ON, "payload_off": OFF,
                }, read=self._gpio_reader(grant.pin), command=self._gpio_writer(grant.pin, key)))  # fmt: skip
            else:
                self._add(Entity(key, "binary_sensor", grant.name.capitalize(), {
                    "state_topic": self.state_topic(key), "payload_on": ON, "payload_off": OFF,
                }, read=self._gpio_reader(grant.pin)))  # fmt: skip
        declared = self._declared_entities()
        for bus in spec.i2c:
            for label in bus.devices:
                if ("i2c", bus.bus, label.address) in declared:
                    continue  # a [[devices]] entry reads it, with every quantity it has
                if label.name.upper().startswith("TMP102"):
                    key = f"i2c{bus.bus}_{label.address:02x}_temperature"
                    name = f"TMP102 temperature (I2C {bus.bus} 0x{label.address:02x})"
                    self._add(Entity(key, "sensor", name, {
                        "state_topic": self.state_topic(key), "unit_of_measurement": "°C",
                        "device_class": "temperature", "state_class": "measurement",
                        "suggested_display_precision": 2,
                    }, read=self._tmp102_reader(bus.bus, label.address)))  # fmt: skip
        for dev in spec.spi:
            if ("spi", dev.bus, dev.chip_select) in declared:
                continue
            if dev.name.upper().startswith("MCP3008"):
                for ch in range(MCP3008_CHANNELS):
                    key = f"spi{dev.bus}_{dev.chip_select}_ch{ch}"
                    self._add(Entity(key, "sensor", f"MCP3008 channel {ch} (raw)", {
                        "state_topic": self.state_topic(key), "state_class": "measurement",
                        "entity_category": "diagnostic",
                    }, read=self._mcp3008_reader(dev, ch)))  # fmt: skip
        self._add(Entity("connectivity", "binary_sensor", "Connectivity", {
            "state_topic": self.topics.status, "value_template": "{{ value_json.state }}",
            "payload_on": "online", "payload_off": "offline", "device_class": "connectivity",
            "entity_category": "diagnostic",
        }))  # fmt: skip
        if self._offered is not None:
            install = {"command_topic": self.command_topic("update"), "payload_install": INSTALL}
            self._add(Entity("update", "update", "Firmware", {
                "state_topic": self.state_topic("update"), "device_class": "firmware",
                "entity_category": "config", "title": "edgeclaw",
                **(install if self._install_request is not None else {}),
            }, read=self._versions, command=self._install if self._install_request else None))  # fmt: skip
        if restart_button:
            self._add(Entity("restart", "button", "Restart", {
                "command_topic": self.command_topic("restart"), "payload_press": PRESS,
                "device_class": "restart", "entity_category": "config",
            }, command=self._restart))  # fmt: skip

    def _declared_entities(self) -> set[tuple[str, int | None, int | None]]:
        """A sensor entity for each value of each `[[devices]]` entry, in its unit; where each is
        wired, so the older per-label entities leave those out."""
        wired: set[tuple[str, int | None, int | None]] = set()
        for device in self.profile.devices:
            if device.form == "i2c":
                wired.add(("i2c", device.bus, device.address))
            elif device.form == "spi":
                wired.add(("spi", device.bus, device.chip_select))
            for value in device.values:
                key = "_".join(
                    _key(part) for part in ("sensor", device.name, value.quantity, value.label) if part
                )
                self._add(Entity(key, "sensor", entity_name(device.name, value), {
                    "state_topic": self.state_topic(key),
                    **sensor_class(value.quantity, value.unit),
                    "state_class": "measurement",
                    "suggested_display_precision": 2,
                }, read=self._declared_reader(device.name, value)))  # fmt: skip
        return wired

    def _declared_reader(self, device: str, value: Any) -> Callable[[], Awaitable[str | None]]:
        async def read() -> str | None:
            reading = await self._readings.get(device)
            found = reading.value(value.quantity, value.label)
            return None if found is None else f"{found.value:.6g}"

        return read

    def _add(self, entity: Entity) -> None:
        self.entities.append(entity)
        if entity.command is not None:
            self._commands[self.command_topic(entity.key)] = entity

    def components(self, dev_id: str) -> dict[str, dict[str, Any]]:
        """The entities as device-discovery components, keyed by unique_id."""
        out: dict[str, dict[str, Any]] = {}
        for e in self.entities:
            uid = f"edgeclaw_{dev_id}_{e.key}"
            # The entity id Home Assistant gives it (2025.10 on; `object_id` before, which it now warns
            # about): the device and the key, so two boards' "Air humidity" never collide.
            entity_id = f"{e.platform}.{_key(dev_id)}_{e.key}".replace("-", "_")
            out[uid] = {"p": e.platform, "name": e.name, "unique_id": uid, "default_entity_id": entity_id}
            out[uid].update(e.options)
        return out

    # -- readers and commands --------------------------------------------------
    def _gpio_reader(self, pin: int) -> Callable[[], Awaitable[str | None]]:
        async def read() -> str | None:
            state = await self.hardware.gpio().read(pin)
            return ON if state.active else OFF

        return read

    def _tmp102_reader(self, bus: int, address: int) -> Callable[[], Awaitable[str | None]]:
        async def read() -> str | None:
            word = await self.hardware.i2c(bus).read_word_data(address, 0x00)
            return f"{tmp102_celsius(word):.4g}"

        return read

    def _mcp3008_reader(self, dev: Any, channel: int) -> Callable[[], Awaitable[str | None]]:
        async def read() -> str | None:
            # Start bit, single-ended + channel, then clock out the 10-bit answer (datasheet fig. 6-1).
            spi = self.hardware.spi(dev.bus, dev.chip_select)
            mode = dev.modes[0] if dev.modes else 0
            reply = await spi.transfer(bytes([0x01, 0x80 | (channel << 4), 0x00]), dev.max_speed_hz, mode, 8)
            return str(((reply[1] & 0x03) << 8) | reply[2])

        return read

    def _gpio_writer(self, pin: int, key: str) -> Callable[[str], Awaitable[None]]:
        async def command(payload: str) -> None:
            outcome = await self._call(key, "gpio", {"action": "write", "pin": pin, "value": payload == ON})
            if outcome is not None:
                self._last.pop(self.state_topic(key), None)  # publish the state read back, changed or not
                await self._refresh_one(key)

        return command

    async def _versions(self) -> str | None:
        from edgeclaw import __version__

        assert self._offered is not None
        latest = self._offered()
        return json.dumps({"installed_version": __version__, "latest_version": latest}, sort_keys=True)

    async def _install(self, payload: str) -> None:
        """Install pressed: the update an admin offered, as `gateway` `update` (which the policy must
        admit for this channel, and which checks the wheel and its signature as for any update)."""
        assert self._install_request is not None
        try:
            args = self._install_request()
        except Exception as e:
            log.warning("Home Assistant install refused: %s", e)
            return
        await self._call("update", "gateway", args)

    async def _restart(self, payload: str) -> None:
        await self._call(
            "restart", "gateway", {"action": "restart", "reason": "Home Assistant restart button"}
        )

    async def _call(self, key: str, tool: str, args: dict[str, Any]) -> Any:
        ctx = ToolContext(
            channel=CHANNEL,
            chat_id=self.command_topic(key),
            peer_kind="device",
            session_key=f"{CHANNEL}:{key}",
            caller=CHANNEL,
            request_id=f"ha-{key}-{time.monotonic_ns()}",
        )
        outcome = await self.registry.execute(tool, args, ctx)
        if not outcome.ok:
            log.warning("Home Assistant command on %s refused: %s", self.command_topic(key), outcome.error)
            return None
        log.info("Home Assistant command on %s: %s", self.command_topic(key), outcome.for_llm)
        return outcome

    # -- the MqttExtension protocol ----------------------------------------------
    def subscriptions(self) -> list[str]:
        return list(self._commands)

    def connect_properties(self) -> list[tuple[str, str]]:
        return []

    def handles(self, topic: str) -> bool:
        return topic in self._commands

    def on_message(
        self, topic: str, payload: bytes, user_properties: list[tuple[str, str]] | None, retained: bool
    ) -> None:
        entity = self._commands[topic]
        if retained:
            # A retained command would run again at every reconnect: Home Assistant never retains
            # commands unless told to, so one that is retained was left there by someone else.
            log.warning("Home Assistant command on %s ignored: it is a retained message", topic)
            return
        allowed = {"button": (PRESS,), "update": (INSTALL,)}.get(entity.platform, (ON, OFF))
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text not in allowed:
            shown = repr(payload[:40]) + ("..." if len(payload) > 40 else "")
            log.warning(
                "Home Assistant command on %s ignored: expected %s, got %s",
                topic, " or ".join(allowed), shown,
            )  # fmt: skip
            return
        assert entity.command is not None and text is not None
        self._spawn(entity.command(text))

    def start(self) -> None:
        if self._poller is None:
            self._poller = self._tasks.spawn(self._poll(), name="ha-entities")

    def on_connect(self) -> None:
        # The broker keeps the retained states, but ours may have changed while we were away.
        self._last.clear()
        self._connected_once.set()

    async def before_disconnect(self) -> None:
        await self._tasks.close()  # the poller is one of them
        self._poller = None

    # -- states -----------------------------------------------------------------
    def _spawn(self, coro: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await coro
            except Exception:
                log.exception("Home Assistant command failed")

        self._tasks.spawn(run())

    async def _poll(self) -> None:
        await self._connected_once.wait()
        while True:
            now = time.monotonic()
            if self.refresh_s > 0 and now - self._last_full >= self.refresh_s:
                self._last.clear()  # every state again at the telemetry interval
                self._last_full = now
            await self.refresh()
            await asyncio.sleep(self.poll_s)

    async def refresh(self) -> None:
        for entity in self.entities:
            await self._refresh_one(entity.key)

    async def _refresh_one(self, key: str) -> None:
        entity = next(e for e in self.entities if e.key == key)
        if entity.read is None:
            return
        topic = self.state_topic(key)
        try:
            state = await entity.read()
        except Exception as e:  # a device that does not answer: its entity keeps its last state
            log.debug("Home Assistant state of %s: %s", key, e)
            return
        if state is None or self._last.get(topic) == state:
            return
        try:
            await self._publish(topic, state.encode())
        except Exception as e:
            log.debug("Home Assistant state of %s not published: %s", key, e)
            return
        self._last[topic] = state
