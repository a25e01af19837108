"""What the device reports on its own: status (and the Last Will), Home Assistant discovery,
telemetry and its retained `health`, events, and a job's output under the device's topics.

Status is retained, `online` after each connect and `offline` on a clean stop; the same `offline`
is the Last Will for an unclean one. Telemetry and events go through the store-and-forward
`Sender`, so nothing produced while the broker is unreachable is lost (within the outbox bound).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from edgeclaw.channels.mqtt.discovery import discovery_payload
from edgeclaw.channels.mqtt.inbound import CHANNEL
from edgeclaw.channels.mqtt.outbox import Kind, Outbox
from edgeclaw.channels.mqtt.protocol import encode
from edgeclaw.channels.mqtt.sender import Sender
from edgeclaw.channels.mqtt.status import machine_status
from edgeclaw.channels.mqtt.telemetry import TelemetryCollector
from edgeclaw.channels.mqtt.topics import DeviceTopics, FleetTopics
from edgeclaw.config.schema import MqttConfig
from edgeclaw.net.device_key import DeviceSigner
from edgeclaw.net.mqtt_connection import Connection, PublishFailed
from edgeclaw.tasks import TaskSet
from edgeclaw.tools.audit import AuditRecord, AuditTrail
from edgeclaw.tools.registry import Registry

log = logging.getLogger("edgeclaw.mqtt")

# Events wait this long after an answer (see Reporter.after_answers).
AFTER_ANSWERS_S = 0.002
# Commands refused for a bad signature are reported on `events` at most this often (with a count):
# one line per attempt would let whoever floods the broker flood the event stream too.
BAD_SIGNATURE_REPORT_S = 60.0


class Reporter:
    """The device's status, discovery, telemetry and events on one connection."""

    def __init__(
        self,
        config: MqttConfig,
        *,
        topics: DeviceTopics,
        fleet: FleetTopics,
        device_id: str,
        board: str,
        version: str,
        registry: Registry,
        connection: Connection,
        sender: Sender,
        outbox: Outbox,
        collector: TelemetryCollector,
        counters: dict[str, int],
        audit: AuditTrail | None = None,
        status_facts: Callable[[], dict[str, Any]] | None = None,
        signer: DeviceSigner | None = None,
    ) -> None:
        self.config = config
        self.topics = topics
        self.fleet = fleet
        self.device_id = device_id
        self.board = board
        self.version = version
        self.registry = registry
        self.connection = connection
        self.sender = sender
        self.outbox = outbox
        self.collector = collector
        self.counters = counters  # the request counters, for telemetry
        self.audit = audit
        # What the daemon adds to the retained status (config hash, firmware, sandbox, providers,
        # MCP servers): asked at every status publish, so it must be cheap and never wait.
        self.status_facts = status_facts
        self.signer = signer  # its public key (or why there is none) is part of every status
        # The board's own Home Assistant entities (homeassistant.py), given a device id: set by the
        # daemon when it carries them on this connection; they join the discovery message.
        self.ha_components: Callable[[str], dict[str, dict[str, Any]]] | None = None
        self.tasks = TaskSet()  # publishes nobody waits for
        self._events: list[AuditRecord | dict[str, Any]] = []
        self._flush_handle: asyncio.TimerHandle | None = None
        self._online_since: float | None = None  # when the current connection came up
        self._status_sent: dict[str, Any] | None = None  # the online status last published (no ts)
        self._bad_signatures = 0  # refused since the last report on `events`
        self._bad_signature_reported = float("-inf")

    # -- status ----------------------------------------------------------------------
    def status_payload(self, state: str) -> bytes:
        """The Last Will and the clean stop's status: what was known at connect time, `ts` then."""
        status = {"state": state, "version": self.version, "board": self.board, **self._key_fields()}
        return encode({**status, "ts": round(time.time(), 3)})

    def _key_fields(self) -> dict[str, Any]:
        """`device_key` (the public key a page pins), or `device_key_problem` saying why there is none."""
        return self.signer.status_fields() if self.signer is not None else {}

    def _online_status(self) -> dict[str, Any]:
        """The retained `online` status without its `ts`: the device, the machine, the software and
        what the daemon has attached and can reach (see docs/mqtt.md for what each field means)."""
        status: dict[str, Any] = {
            "state": "online",
            "version": self.version,
            "board": self.board,
            "device": self.device_id,
            "since": self._online_since,
            "groups": list(self.fleet.groups),
        }
        try:
            status.update(machine_status())
        except Exception:  # a machine that cannot tell must still be listed
            log.exception("reading the machine's facts for the status failed")
        if self.status_facts is not None:
            try:
                status.update(self.status_facts())
            except Exception:
                log.exception("reading the daemon's facts for the status failed")
        return status

    def _encode_status(self, status: dict[str, Any]) -> bytes:
        text = json.dumps({**status, "ts": round(time.time(), 3)}, ensure_ascii=False, separators=(",", ":"))
        text = self.registry.scrubber.scrub(text)
        key = self._key_fields()
        if key:
            # After the scrub: a public key looks as random as a secret, and is meant to be read.
            text = json.dumps({**json.loads(text), **key}, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "surrogatepass")

    def _discovery_payload(self) -> bytes:
        return encode(
            discovery_payload(
                self.topics,
                board=self.board,
                version=self.version,
                telemetry_interval_s=self.config.telemetry_interval_s,
                hardware=self.ha_components,
            )
        )

    def on_connect(self) -> None:
        self._spawn(self._announce())

    async def _announce(self) -> None:
        """After each connect: status online, discovery, a first telemetry, then the outbox backlog."""
        self._online_since = round(time.time(), 3)
        status = self._online_status()
        # Set before the publish: a refresh while it is on its way compares with what it sends.
        self._status_sent = status
        try:
            await self.connection.publish(self.topics.status, self._encode_status(status), retain=True)
            if self.config.discovery:
                await self.connection.publish(self.topics.discovery, self._discovery_payload(), retain=True)
        except PublishFailed as e:
            self._status_sent = None  # the next connect announces it again
            log.warning("could not announce the device: %s", e)
            return
        self.sender.on_connect()
        if self.config.telemetry_interval_s > 0:
            self._send_telemetry()

    def home_assistant_online(self) -> None:
        """Home Assistant (re)started: it forgot the discovery, so it is sent again."""
        self._spawn(self._republish_discovery())

    async def _republish_discovery(self) -> None:
        try:
            await self.connection.publish(self.topics.discovery, self._discovery_payload(), retain=True)
        except PublishFailed as e:
            log.warning("could not re-send discovery: %s", e)

    # -- telemetry -------------------------------------------------------------------
    def telemetry_snapshot(self) -> dict[str, Any]:
        return self.collector.snapshot(
            outbox_depth=self.outbox.depth,
            outbox_dropped=self.outbox.dropped,
            mqtt_connects=self.connection.connects,
            mqtt_requests=self.counters["requests"],
            mqtt_busy=self.counters["busy"],
            mqtt_replayed=self.counters["replayed"],
            mqtt_rejected=self.counters["rejected"],
        )

    def _send_telemetry(self) -> None:
        snapshot = self.telemetry_snapshot()
        self.sender.send(Kind.TELEMETRY, self.topics.telemetry, encode(snapshot))
        if self.connection.connected:
            # Retained beside it: the last figures with their time (= last seen), for whoever
            # subscribes later. Not stored while offline: the next connect sends fresh ones.
            health = encode({**snapshot, "device": self.device_id})
            self._spawn(self._publish_retained(self.topics.health, health))
            self.refresh_status()

    def refresh_status(self) -> None:
        """The retained status published again if its facts differ from the last one sent (a provider
        became reachable, an MCP server went down, an address changed, an update was deferred): at
        each telemetry, and when the daemon says they changed. Only while connected: the next connect
        announces it anyway."""
        if not self.connection.connected or self._status_sent is None:
            return
        status = self._online_status()
        if status != self._status_sent:
            self._status_sent = status
            self._spawn(self._publish_retained(self.topics.status, self._encode_status(status)))

    async def _publish_retained(self, topic: str, payload: bytes) -> None:
        try:
            await self.connection.publish(topic, payload, retain=True)
        except PublishFailed as e:
            log.debug("could not publish %s: %s", topic, e)

    async def telemetry_loop(self) -> None:
        interval = self.config.telemetry_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                self._send_telemetry()
            except Exception:
                log.exception("telemetry failed")

    def publish_under(self, subtopic: str, payload: dict[str, Any]) -> None:
        """`payload` on `{prefix}/{dev}/SUBTOPIC`, scrubbed, through the store-and-forward sender
        like telemetry: kept while the broker is away (within the outbox bound), dropped first when
        full."""
        text = self.registry.scrubber.scrub(json.dumps(payload, ensure_ascii=False))
        topic = f"{self.topics.base}/{subtopic}"
        self.sender.send(Kind.TELEMETRY, topic, text.encode("utf-8", "surrogatepass"))

    # -- events ----------------------------------------------------------------------
    def start_events(self) -> None:
        """Every tool call (whatever channel it came from) and the audit trail's events on `events`."""
        self.registry.add_audit_sink(self._tool_event)
        if self.audit is not None:
            self.audit.add_sink(self._trail_event)

    def stop_events(self) -> None:
        """Stop listening; what was still waiting for its moment goes out now."""
        self.registry.remove_audit_sink(self._tool_event)
        if self.audit is not None:
            self.audit.remove_sink(self._trail_event)
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        self._flush_after_answers()

    def _tool_event(self, record: AuditRecord) -> None:
        """One event per tool call, whatever channel it came from (published by `_publish_events`)."""
        self._events.append(record)
        self._after_answers()

    def _trail_event(self, event: dict[str, Any]) -> None:
        """Approval decisions, admin changes, logins (the runtime's AuditTrail): published on `events`
        like tool calls, and with them."""
        self._events.append(event)
        self._after_answers()

    def _publish_events(self) -> None:
        records, self._events = self._events, []
        for record in records:
            event = dict(record) if isinstance(record, dict) else record.as_dict()
            event["device"] = self.device_id
            # The registry and the trail already scrubbed their texts; the whole event is scrubbed
            # again because session keys, names and identities come from callers too.
            text = self.registry.scrubber.scrub(json.dumps(event, ensure_ascii=False, separators=(",", ":")))
            self.sender.send(Kind.EVENT, self.topics.events, text.encode("utf-8", "surrogatepass"))

    def _after_answers(self) -> None:
        """Publish the events not yet sent a moment after this turn's answers.

        Nobody waits for them. A short timer, rather than the next loop turn, lets the answers
        reach the wire first.
        """
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_later(
                AFTER_ANSWERS_S, self._flush_after_answers
            )

    def _flush_after_answers(self) -> None:
        self._flush_handle = None
        self._publish_events()

    def with_answer(self) -> None:
        """An answer is about to be written: the call's event goes out in the same socket write (it
        is queued before the write happens); a separate write for every event costs more than the
        event."""
        if self._events:
            asyncio.get_running_loop().call_soon(self._publish_events)

    def bad_signature(self, topic: str) -> None:
        """Count a command refused for its signature; on `events` at most once a minute, with how
        many were refused since the last report (someone probing for a key, or a backend with the
        wrong one)."""
        self._bad_signatures += 1
        now = time.monotonic()
        if now - self._bad_signature_reported < BAD_SIGNATURE_REPORT_S:
            return
        count, self._bad_signatures = self._bad_signatures, 0
        self._bad_signature_reported = now
        if self.audit is not None:
            self.audit.emit(
                "auth_failure", level=logging.WARNING, what="bad_signature", count=count, topic=topic,
                channel=CHANNEL, within_s=BAD_SIGNATURE_REPORT_S,
            )  # fmt: skip

    def _spawn(self, coro: Awaitable[None]) -> None:
        self.tasks.spawn(coro)
