"""A Sparkplug B (3.0) edge node for the board: NBIRTH, NDATA, NDEATH and NCMD under `spBv1.0/`.

Topics are ``spBv1.0/{group_id}/{NBIRTH|NDATA|NDEATH|NCMD}/{edge_node_id}``, and
``spBv1.0/{group_id}/{DBIRTH|DDATA|DCMD}/{edge_node_id}/{device_id}`` for the devices attached to
the board (an ESP32 bridge: `esp32`; a debug probe's target: `probe`); payloads are the
Sparkplug B protobuf (sparkplug_payload.py).

Its own MQTT connection. Sparkplug's NDEATH must be the connection's Last Will (so a host
application hears at once that the node died), and MQTT gives a connection a single Will, which
on the channel's connection is the retained `status`. So the node rides on the MQTT channel's
lifecycle (it is an `MqttExtension`: started and stopped with the channel, no topics of its own
there) but connects by itself, as `{client_id}-spb`, with a clean session (Sparkplug asks for
one: a command queued while the node was away must not run when it comes back) and the NDEATH as
its Will (QoS 1, not retained).

bdSeq: each connection attempt takes the next bdSeq (0-255, wrapping), writes it to the state
directory before the CONNECT goes out, and puts it in the Will's NDEATH; the NBIRTH sent on that
connection carries the same number, so a host pairs a death with the birth it ends, across
restarts too. `seq` is 0 in each NBIRTH and counts every later message on the connection (the
DBIRTHs that follow each NBIRTH included), 0-255 wrapping.

Metrics: the board's GPIO pins (`GPIO/<name>`, Boolean; an output pin is writable), the sensors
the profile names and we can decode (a TMP102's `Sensors/.../Temperature` in °C), the tool
statistics (`Tools/*`), health figures from the telemetry (`Health/*`) and the node's
`Properties/*`. GPIO, sensors and tools are sent in an NDATA when they change (checked every
`poll_s`); everything, health included, again every `data_interval_s`.

Devices: the ESP32 bridge's granted GPIO pins (`GPIO/<name>`; outputs writable) and ADC pins
(`ADC/<name>/Millivolts`), read over the bridge like the board's own pins, and its firmware
version once the bridge has shaken hands; the probe's target and transport (never read from the
target: that would start or halt it). A device that does not answer has null metrics.

NCMD: `Node Control/Rebirth` = true publishes a fresh NBIRTH; `Node Control/Reboot` = true is a
`gateway` restart; a write to a writable metric is a `gpio` write (a DCMD to the ESP32: an
`esp32` gpio_write). Each runs through the registry as channel `sparkplug`, so the policy decides
(its built-in profile admits `gpio` only: Reboot and ESP32 writes are refused unless
`[tools.channels.sparkplug]` admits `gateway` and `esp32`). Sparkplug commands carry
no signature: whoever may publish on the NCMD topic may use what that profile admits, so the
broker's ACL is the gate. A metric that is unknown, read-only or of the wrong type is logged and
nothing runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiomqtt

from edgeclaw.channels.mqtt.sparkplug_metrics import Metric, MetricCatalogue
from edgeclaw.net.mqtt_connection import Connection, ConnectionSettings, PublishFailed
from edgeclaw.tasks import TaskSet
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.registry import Registry

log = logging.getLogger("edgeclaw.mqtt.sparkplug")

CHANNEL = "sparkplug"
NAMESPACE = "spBv1.0"
REBIRTH = "Node Control/Rebirth"
REBOOT = "Node Control/Reboot"
BDSEQ = "bdSeq"


def topic_id_usable(name: str) -> bool:
    """A Sparkplug group or edge node id: one topic level, no wildcards (Sparkplug 3.0 §4.1.1)."""
    return bool(name) and not any(c in name for c in "/+#") and name.isprintable()


class BdSeq:
    """The birth/death sequence number, kept in a file so it goes on across restarts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.value: int | None = None  # the current connection's; None before the first attempt

    def _stored(self) -> int | None:
        try:
            return int(self.path.read_text().strip()) % 256
        except (OSError, ValueError):
            return None

    def next(self) -> int:
        """The next connection's bdSeq, written down (atomically) before the connection is tried."""
        stored = self._stored() if self.value is None else self.value
        self.value = 0 if stored is None else (stored + 1) % 256
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{self.value}\n")
        os.replace(tmp, self.path)
        return self.value


class SparkplugNode:
    """An MqttExtension (channel.MqttChannel.extend) that runs a Sparkplug edge node on its own
    connection."""

    def __init__(
        self,
        *,
        settings: ConnectionSettings,  # the channel's: broker, credentials, TLS, protocol
        group_id: str,
        edge_node_id: str,
        state_dir: Path,
        profile: Any,  # edgeclaw.board.BoardProfile
        hardware: Any,  # edgeclaw.backends.hub.BoardBackends, or None
        registry: Registry,
        telemetry: Callable[[], dict[str, Any]],
        properties: dict[str, str],
        data_interval_s: float,
        poll_s: float,
        primary_host_id: str = "",
    ) -> None:
        from edgeclaw.channels.mqtt import sparkplug_payload as pb  # protobuf: the extra

        self.pb = pb
        self.group_id = group_id
        self.edge_node_id = edge_node_id
        self.registry = registry
        self.profile = profile
        self.hardware = hardware
        self.telemetry = telemetry
        self.properties = properties
        self.data_interval_s = data_interval_s
        self.poll_s = poll_s
        self.bdseq = BdSeq(state_dir / "sparkplug" / "bdseq")
        self.seq = 0
        self.births = 0  # NBIRTHs published (for tests and the log)
        self._last: dict[str | None, dict[str, Any]] = {}  # node (None) or device -> metric -> value sent
        catalogue = MetricCatalogue(pb, profile, hardware, telemetry, self._call, poll_s)
        self.catalogue = catalogue
        self.metrics = catalogue.node
        self.devices = catalogue.devices
        # Each metric's alias (node and devices share one numbering, Sparkplug 3.0 §6.4.5): named with
        # it in the births, then only the alias in NDATA/DDATA.
        self.aliases: dict[tuple[str | None, str], int] = {}
        for device, scope in ((None, self.metrics), *self.devices.items()):
            for name in scope:
                self.aliases[(device, name)] = len(self.aliases) + 1
        # With a primary host application (Sparkplug 3.0 §5.?): births only while it says it is online.
        self.primary_host_id = primary_host_id
        self._host_online = not primary_host_id
        self._host_ts = -1
        self.settings = dataclasses.replace(
            settings,
            client_id=f"{settings.client_id}-spb",
            clean_start=True,
            session_expiry_s=0,
            subscriptions=(
                self.topic("NCMD"),
                f"{self.topic('DCMD')}/+",
                *((self.state_topic,) if primary_host_id else ()),
            ),
            connect_user_properties=(),
            will_topic=self.topic("NDEATH"),
            will_retain=False,
            will_payload=self._death_payload,
        )
        self.connection = Connection(self.settings, self._on_message, on_connect=self._on_connect)
        self._lock = asyncio.Lock()  # one NBIRTH/NDATA at a time, so seq goes out in order
        self._tasks = TaskSet()
        self._runner: asyncio.Task[None] | None = None
        self._poller: asyncio.Future[None] | None = None
        self._born = asyncio.Event()  # an NBIRTH went out on the current connection

    @property
    def state_topic(self) -> str:
        """The primary host application's STATE (Sparkplug 3.0: `spBv1.0/STATE/{host_id}`)."""
        return f"{NAMESPACE}/STATE/{self.primary_host_id}"

    def topic(self, kind: str, device: str | None = None) -> str:
        node = f"{NAMESPACE}/{self.group_id}/{kind}/{self.edge_node_id}"
        return node if device is None else f"{node}/{device}"

    def _scope(self, device: str | None) -> dict[str, Metric]:
        return self.metrics if device is None else self.devices[device]

    async def _read_all(self, names: list[str], device: str | None = None) -> dict[str, Any]:
        if device is None:
            self.catalogue.take_telemetry()
        scope = self._scope(device)
        values: dict[str, Any] = {}
        for name in names:
            try:
                values[name] = await scope[name].read()
            except Exception as e:  # a device that does not answer: the metric is null this time
                log.debug("Sparkplug metric %s: %s", name, e)
                values[name] = None
        return values

    # -- payloads -------------------------------------------------------------------
    def _payload(
        self,
        values: dict[str, tuple[int, Any]],
        *,
        seq: int | None,
        device: str | None = None,
        birth: bool = True,
    ) -> bytes:
        """A payload of these metrics. In a birth each carries its name, alias, datatype and unit; in
        a DATA message only its alias and value (Sparkplug 3.0: the name and datatype are known from
        the birth)."""
        pb = self.pb
        now = int(time.time() * 1000)
        payload = pb.Payload(timestamp=now)
        if seq is not None:
            payload.seq = seq
        scope = self._scope(device) if self.aliases else {}
        for name, (datatype, value) in values.items():
            alias = self.aliases.get((device, name))
            metric = payload.metrics.add(timestamp=now)
            if alias is not None:
                metric.alias = alias
            if birth or alias is None:
                metric.name = name
            pb.set_value(metric, datatype, value)
            if not birth and alias is not None:
                metric.ClearField("datatype")
            known = scope.get(name)
            if birth and known is not None and known.unit:
                pb.set_string_properties(metric, {"engUnit": known.unit})
        return payload.SerializeToString()

    def _death_payload(self) -> bytes:
        """The Will of the next connection attempt: NDEATH with that connection's (new) bdSeq."""
        bdseq = self.bdseq.next()
        return self._payload({BDSEQ: (self.pb.INT64, bdseq)}, seq=None)

    def _next_seq(self) -> int:
        self.seq = (self.seq + 1) % 256
        return self.seq

    async def birth(self) -> None:
        """NBIRTH: every metric with its current value, bdSeq and the node controls; seq back to 0.
        Then a DBIRTH for each device."""
        pb = self.pb
        if not self._host_online:
            log.info("Sparkplug NBIRTH waits for the primary host %s to be online", self.primary_host_id)
            return
        async with self._lock:
            values = await self._read_all(list(self.metrics))
            body: dict[str, tuple[int, Any]] = {
                BDSEQ: (pb.INT64, self.bdseq.value),
                REBIRTH: (pb.BOOLEAN, False),
                REBOOT: (pb.BOOLEAN, False),
            }
            body.update({f"Properties/{k}": (pb.STRING, v) for k, v in self.properties.items()})
            body.update({n: (self.metrics[n].datatype, v) for n, v in values.items()})
            self.seq = 0
            await self.connection.publish(self.topic("NBIRTH"), self._payload(body, seq=0), qos=0)
            self._last = {None: values}
            self.births += 1
            for device, scope in self.devices.items():
                values = await self._read_all(list(scope), device)
                body = {n: (scope[n].datatype, v) for n, v in values.items()}
                payload = self._payload(body, seq=self._next_seq(), device=device)
                await self.connection.publish(self.topic("DBIRTH", device), payload, qos=0)
                self._last[device] = values
            self._born.set()
        log.info("Sparkplug NBIRTH on %s (bdSeq %s)", self.topic("NBIRTH"), self.bdseq.value)

    async def data(self, *, everything: bool, scopes: tuple[str | None, ...] | None = None) -> None:
        """NDATA (and a DDATA per device): the metrics that changed since they were last sent (all of
        them if `everything`). `scopes`: the node (None) and devices to look at; None = all."""
        if not self._born.is_set() or not self._host_online:
            return
        async with self._lock:
            for device in (None, *self.devices) if scopes is None else scopes:
                scope = self._scope(device)
                last = self._last.setdefault(device, {})
                names = [n for n, m in scope.items() if everything or m.on_change]
                values = await self._read_all(names, device)
                changed = {n: v for n, v in values.items() if everything or last.get(n, ()) != v}
                if not changed:
                    continue
                body = {n: (scope[n].datatype, v) for n, v in changed.items()}
                kind = "NDATA" if device is None else "DDATA"
                payload = self._payload(body, seq=self._next_seq(), device=device, birth=False)
                await self.connection.publish(self.topic(kind, device), payload, qos=0)
                last.update(changed)

    # -- connection events --------------------------------------------------------
    def _on_connect(self) -> None:
        self._born.clear()
        self._spawn(self.birth())

    def _on_message(self, message: aiomqtt.Message) -> None:
        if self.primary_host_id and message.topic.value == self.state_topic:
            self._on_host_state(message.payload)
            return
        if message.retain:
            # Sparkplug commands are never retained; one that is was left by someone and would run
            # again at every connect.
            log.warning("Sparkplug NCMD ignored: it is a retained message")
            return
        payload = message.payload if isinstance(message.payload, bytes) else str(message.payload).encode()
        device: str | None = None
        if message.topic.value != self.topic("NCMD"):
            device = message.topic.value.rsplit("/", 1)[-1]
            if device not in self.devices:
                log.warning("Sparkplug DCMD ignored: this node has no device %r", device)
                return
        try:
            command = self.pb.Payload.FromString(payload)
        except Exception as e:
            log.warning("Sparkplug NCMD ignored: not a Sparkplug B payload (%s)", e)
            return
        self._spawn(self._command(command, device))

    def _on_host_state(self, raw: Any) -> None:
        """The primary host's STATE (retained JSON `{"online": bool, "timestamp": ms}`): a birth when it
        comes online, nothing sent while it is offline. An older timestamp than one seen is stale."""
        import json

        try:
            state = json.loads(raw)
            online, stamp = state["online"], int(state.get("timestamp", 0))
        except (ValueError, TypeError, KeyError):
            log.warning(
                'Sparkplug STATE of %s ignored: not {"online": bool, "timestamp": ms}', self.primary_host_id
            )
            return
        if not isinstance(online, bool) or stamp < self._host_ts:
            return
        self._host_ts = stamp
        was, self._host_online = self._host_online, online
        if online and not was:
            log.info("Sparkplug primary host %s is online: NBIRTH", self.primary_host_id)
            self._spawn(self.birth())
        elif was and not online:
            log.info("Sparkplug primary host %s is offline: no data until it is back", self.primary_host_id)
            self._born.clear()

    def _by_alias(self, scope: dict[str, Metric], device: str | None, alias: int) -> str:
        for (dev, name), number in self.aliases.items():
            if dev == device and number == alias and name in scope:
                return name
        return ""

    async def _command(self, command: Any, device: str | None = None) -> None:
        pb = self.pb
        wrote = False
        scope = self._scope(device)
        for metric in command.metrics:
            name = metric.name or (
                self._by_alias(scope, device, metric.alias) if metric.HasField("alias") else ""
            )
            value = pb.get_value(metric)
            if device is None and name in (REBIRTH, REBOOT):
                if metric.datatype != pb.BOOLEAN or value is not True:
                    log.warning("Sparkplug NCMD %s ignored: expected Boolean true", name)
                elif name == REBIRTH:
                    await self.birth()
                else:
                    await self._call(
                        "gateway", {"action": "restart", "reason": "Sparkplug Node Control/Reboot"}
                    )
                continue
            target = scope.get(name)
            if target is None or target.write is None:
                log.warning(
                    "Sparkplug NCMD ignored: %r is no writable metric of this node", name or metric.alias
                )
                continue
            if metric.datatype != target.datatype or value is None:
                log.warning(
                    "Sparkplug NCMD for %s ignored: expected a datatype %d value", name, target.datatype
                )
                continue
            await target.write(value)
            wrote = True
        if wrote:
            await self.data(everything=False, scopes=(device,))  # the new state as read back

    async def _call(self, tool: str, args: dict[str, Any]) -> Any:
        ctx = ToolContext(
            channel=CHANNEL,
            chat_id=self.topic("NCMD"),
            peer_kind="device",
            session_key=f"{CHANNEL}:{self.edge_node_id}",
            caller=CHANNEL,
            request_id=f"spb-{time.monotonic_ns()}",
        )
        outcome = await self.registry.execute(tool, args, ctx)
        if not outcome.ok:
            log.warning("Sparkplug NCMD %s refused: %s", tool, outcome.error)
            return None
        log.info("Sparkplug NCMD %s: %s", tool, outcome.for_llm)
        return outcome

    def _spawn(self, coro: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await coro
            except PublishFailed as e:
                log.debug("Sparkplug message not published: %s", e)
            except Exception:
                log.exception("Sparkplug edge node failed")

        self._tasks.spawn(run())

    async def _poll(self) -> None:
        last_full = time.monotonic()
        while True:
            await asyncio.sleep(min(self.poll_s, self.data_interval_s))
            now = time.monotonic()
            everything = now - last_full >= self.data_interval_s
            if everything:
                last_full = now
            try:
                await self.data(everything=everything)
            except PublishFailed as e:
                log.debug("Sparkplug NDATA not published: %s", e)
            except Exception:
                log.exception("Sparkplug NDATA failed")

    # -- the MqttExtension protocol (nothing on the channel's own connection) -------------
    def subscriptions(self) -> list[str]:
        return []

    def connect_properties(self) -> list[tuple[str, str]]:
        return []

    def handles(self, topic: str) -> bool:
        return False

    def on_message(
        self, topic: str, payload: bytes, user_properties: list[tuple[str, str]] | None, retained: bool
    ) -> None:
        return None

    def on_connect(self) -> None:
        return None

    def start(self) -> None:
        if self._runner is None:
            loop = asyncio.get_running_loop()
            self.connection.open()
            self._runner = loop.create_task(self.connection.run(), name="sparkplug-connection")
            self._poller = self._tasks.spawn(self._poll(), name="sparkplug-data")

    async def before_disconnect(self) -> None:
        """A clean stop: the broker will not send the Will, so the NDEATH is published here."""
        await self._tasks.close()  # the poller is one of them
        self._poller = None
        if self._runner is None:
            return
        if self.connection.connected and self.bdseq.value is not None:
            death = self._payload({BDSEQ: (self.pb.INT64, self.bdseq.value)}, seq=None)
            try:
                async with asyncio.timeout(5):
                    await self.connection.publish(self.topic("NDEATH"), death, qos=1)
            except (PublishFailed, TimeoutError) as e:
                log.warning("could not publish the Sparkplug NDEATH: %s", e)
        await self.connection.stop(self._runner)
        self._runner = None
