"""The MQTT channel: chat and tool calls in, answers, status, telemetry and events out.

Flow of a request (`tool/call` or `chat/in`):

  receive loop (never waits) → size check → signature (and `ts`) → parse → request
  ledger (a repeat is answered from the stored result, or joins the running
  original) → admission (at most `inbound_queue` requests waiting or running;
  beyond that the answer is "busy") → a task per request, at most
  `max_concurrent` running → `Registry.execute` / `AgentLoop.handle` →
  exactly one answer per delivered request, to the MQTT 5 Response Topic
  with its Correlation Data, else to `tool/result` / `chat/out`.

Who is calling (`ToolContext.caller`, `InboundMessage.caller`) is what the
channel can prove or was told: "mqtt:key:NAME" for a command signed with the
command key, else "mqtt:sender:NAME" for a declared `sender`, else
"mqtt:anonymous". A `tool/cancel` stops a call of the same caller only.

Answers, events and telemetry go through the store-and-forward `Sender`, so
nothing produced while the broker is unreachable is lost (within the outbox
bound). Status is retained, `online` after each connect and `offline` on a
clean stop; the same `offline` is the Last Will for an unclean one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import aiomqtt

from edgeclaw import __version__
from edgeclaw.agent.channel import InboundMessage, Reply
from edgeclaw.channels.mqtt.approvals import NO_APPROVER, MqttApprover
from edgeclaw.channels.mqtt.connection import (
    Connection,
    ConnectionSettings,
    PublishFailed,
    TlsSettings,
    publish_properties,
)
from edgeclaw.channels.mqtt.dedup import (
    PURGE_CHUNK,
    Lookup,
    Recorded,
    RequestLedger,
    Seen,
    journal_key,
    request_key,
)
from edgeclaw.channels.mqtt.discovery import discovery_payload, discovery_topic_usable
from edgeclaw.channels.mqtt.outbox import Kind, Outbox
from edgeclaw.channels.mqtt.partials import PartialPublisher
from edgeclaw.channels.mqtt.progress import ProgressPublisher
from edgeclaw.channels.mqtt.protocol import (
    AdminCall,
    AdminRequest,
    CancelRequest,
    ChatRequest,
    Route,
    ToolCallRequest,
    WireError,
    admin_call_answer,
    admin_error,
    cancel_answer,
    cancel_error,
    chat_answer,
    chat_error,
    check_fresh,
    encode,
    parse_admin,
    parse_admin_call,
    parse_approval,
    parse_cancel,
    parse_chat,
    parse_json_object,
    parse_tool_call,
    peek_id,
    replayed,
    response_topic_problem,
    tool_answer,
    tool_error,
)
from edgeclaw.channels.mqtt.sender import Outgoing, Sender
from edgeclaw.channels.mqtt.signing import Verifier
from edgeclaw.channels.mqtt.status import machine_status
from edgeclaw.channels.mqtt.telemetry import HealthSources, TelemetryCollector
from edgeclaw.channels.mqtt.topics import DeviceTopics, FleetTopics, group_problem
from edgeclaw.config.schema import MqttConfig
from edgeclaw.errors import ConfigError, ConfigErrors
from edgeclaw.store.db import Database, StorageFull
from edgeclaw.tools.approval import ApprovalBroker, ApprovalRequest, Decision, Verdict
from edgeclaw.tools.audit import AuditRecord, AuditTrail
from edgeclaw.tools.automation.targets import Delivery, DeliveryError, topic_problem
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.outlets import DeliveryFailed, Outlets
from edgeclaw.tools.outlets import Outgoing as OutletMessage
from edgeclaw.tools.registry import Registry
from edgeclaw.tools.runtime.custom import CustomTools, InvalidDefinition

if TYPE_CHECKING:
    from edgeclaw.agent.loop import AgentLoop

log = logging.getLogger("edgeclaw.mqtt")

CHANNEL = "mqtt"
# Calls over admin/cron and admin/gateway run as this channel: its policy is [tools.channels.mqtt-admin]
# (no built-in restriction: the admin topics take signed commands only, unless mqtt.admin_unsigned).
ADMIN_CHANNEL = "mqtt-admin"
# On a clean stop, requests still running get this long before they are cancelled (and answered so).
STOP_GRACE_S = 5.0
HOUSEKEEPING_S = 60.0
MAX_PURGE_CHUNKS = 1000  # per housekeeping round; whatever is left waits for the next
# Events wait this long after an answer (see MqttChannel._after_answers).
AFTER_ANSWERS_S = 0.002

# `interrupted` answers carry "may_have_run": whether the request had started when the daemon stopped.
INTERRUPTED = (
    "this request was running when the daemon stopped: it may have had (part of) its effect; it is "
    "not run again (send it with a new id to run it)"
)
INTERRUPTED_WAITING = (
    "the daemon stopped before this request started: it did not run; it is not run later either "
    "(send it with a new id to run it)"
)

# Builds the error answer for one request: (code, message) -> payload.
ErrorAnswer = Callable[[str, str], bytes]
Kind_ = Literal["tool", "chat", "admin", "cancel"]
WHAT = {"tool": "tool/call", "cancel": "tool/cancel", "chat": "chat/in", "admin": "admin/tools"}
ANONYMOUS = "mqtt:anonymous"
# Commands refused for a bad signature are reported on `events` at most this often (with a count):
# one line per attempt would let whoever floods the broker flood the event stream too.
BAD_SIGNATURE_REPORT_S = 60.0


class MqttExtension(Protocol):
    """Another protocol on the channel's connection (`MqttChannel.extend`): MCP over MQTT."""

    def subscriptions(self) -> list[str]: ...
    def connect_properties(self) -> list[tuple[str, str]]: ...
    def handles(self, topic: str) -> bool: ...
    def on_message(
        self, topic: str, payload: bytes, user_properties: list[tuple[str, str]] | None, retained: bool
    ) -> None: ...
    def start(self) -> None: ...
    def on_connect(self) -> None: ...
    async def before_disconnect(self) -> None: ...


@dataclass(slots=True)
class Cancellable:
    """A tool call admitted and not yet answered, which a `tool/cancel` from its caller may stop."""

    caller: str
    task: asyncio.Task[None] | None = None  # set once `_serve` runs (a task cancelled earlier never would)
    started: bool = False  # it holds a slot: running, not waiting
    cancelled_by: str | None = None  # the cancel request's id


@dataclass(frozen=True, slots=True)
class Incoming:
    """A command as it came off the wire: what the inbound handlers need of the message."""

    topic: str
    payload: bytes
    retained: bool
    response_topic: str | None  # MQTT 5 only, like the two below
    correlation: bytes | None
    user_properties: list[tuple[str, str]] | None

    @classmethod
    def of(cls, message: aiomqtt.Message) -> Incoming:
        props = message.properties  # None under MQTT 3.1.1
        payload = message.payload if isinstance(message.payload, bytes) else str(message.payload).encode()
        return cls(
            message.topic.value,
            payload,
            message.retain,
            getattr(props, "ResponseTopic", None),
            getattr(props, "CorrelationData", None),
            getattr(props, "UserProperty", None),
        )


class MqttChannel:
    """An async context manager: entering starts the connection loop, leaving stops it cleanly."""

    name = CHANNEL

    def __init__(
        self,
        config: MqttConfig,
        *,
        device_id: str,
        board: str,
        registry: Registry,
        approvals: ApprovalBroker,
        db: Database,
        agent: AgentLoop | None = None,
        agent_factory: Callable[[], AgentLoop] | None = None,
        password: str = "",
        hmac_secret: str = "",
        version: str = __version__,
        health: HealthSources | None = None,
        source: str = "<config>",
        custom_tools: CustomTools | None = None,
        approver_secret: str = "",
        admin_secret: str = "",
        audit: AuditTrail | None = None,
        outlets: Outlets | None = None,
        status_facts: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.config = config
        self.source = source  # the config file, for error messages
        self.device_id = device_id
        self.board = board
        self.registry = registry
        self.approvals = approvals
        self.db = db
        self._agent = agent
        # Or built by the first chat (`edgeclaw run` builds the loop on demand, see daemon.runtime).
        self._agent_factory = agent_factory
        self.custom_tools = custom_tools
        self.outlets = outlets
        self.version = version
        self.topics = DeviceTopics(config.topic_prefix, device_id, config.discovery_prefix)
        problems = [group_problem(g) for g in config.groups]
        if any(problems):
            raise ConfigErrors([ConfigError(source, "mqtt.groups", p) for p in problems if p])
        self.fleet = FleetTopics(config.topic_prefix, tuple(dict.fromkeys(config.groups)))
        # What the daemon adds to the retained status (config hash, firmware, sandbox, providers,
        # MCP servers): asked at every status publish, so it must be cheap and never wait.
        self.status_facts = status_facts
        self.audit = audit
        self.verifier = Verifier(hmac_secret, config.hmac_key_name) if hmac_secret else None
        # Approval responses are signed with their own key: a command key cannot approve.
        self.approver_verifier = (
            Verifier(approver_secret, config.approver_key_name) if approver_secret else None
        )
        if self.verifier and self.approver_verifier and self.verifier.same_secret(self.approver_verifier):
            raise ConfigErrors(
                [
                    ConfigError(
                        source,
                        "mqtt.approver_secret_env"
                        if config.approver_secret_env
                        else "mqtt.approver_secret_file",
                        "the approver key must differ from the command key (hmac_secret_*): "
                        "otherwise whoever may send commands may approve them",
                    )
                ]
            )
        # The admin key, when there is one, is the only key the admin topics take.
        self.admin_verifier = Verifier(admin_secret, config.admin_key_name) if admin_secret else None
        if self.admin_verifier is not None:
            for other, what in ((self.verifier, "command key (hmac_secret_*)"),
                                (self.approver_verifier, "approver key (approver_secret_*)")):  # fmt: skip
                if other is not None and other.same_secret(self.admin_verifier):
                    raise ConfigErrors([ConfigError(
                        source,
                        "mqtt.admin_secret_env" if config.admin_secret_env else "mqtt.admin_secret_file",
                        f"the admin key must differ from the {what}: otherwise whoever holds that "
                        "key could administer the device",
                    )])  # fmt: skip
        t = self.topics
        self._kinds: dict[str, Kind_] = {
            t.tool_call: "tool",
            t.tool_cancel: "cancel",
            t.chat_in: "chat",
            t.admin_tools: "admin",
            t.admin_cron: "admin",
            t.admin_gateway: "admin",
        }
        # The admin topics that are calls of a tool (the rest of `admin` is admin/tools).
        self._admin_calls = {t.admin_cron: "cron", t.admin_gateway: "gateway"}
        # Commands to the whole fleet or a group: the same handling, answered with our device id.
        self._fleet_topics: set[str] = set()
        for topic in self.fleet.tool_calls():
            self._kinds[topic] = "tool"
            self._fleet_topics.add(topic)
        for topic, what in self.fleet.admin().items():
            self._kinds[topic] = "admin"
            self._fleet_topics.add(topic)
            if what != "tools":
                self._admin_calls[topic] = what
        # Where answers go when the request named no (usable) Response Topic.
        self._fallbacks = {
            "tool": t.tool_result,
            "cancel": t.tool_result,
            "chat": t.chat_out,
            "admin": t.admin_result,
        }
        tls = None
        if config.tls is not None:
            tls = TlsSettings(config.tls.ca_file, config.tls.cert_file, config.tls.key_file)
        self.settings = ConnectionSettings(
            host=config.host,
            port=config.port,
            client_id=config.client_id or device_id,
            protocol=config.protocol,
            username=config.username,
            password=password,
            keepalive_s=config.keepalive_s,
            connect_timeout_s=config.connect_timeout_s,
            session_expiry_s=config.session_expiry_s,
            tls=tls,
            # admin/tools is always subscribed, so that even a refused admin command is answered.
            subscriptions=(
                *self.topics.subscriptions(admin=True, discovery=config.discovery),
                *self.fleet.subscriptions(),
            ),
            will_topic=self.topics.status,
            will_payload=lambda: self._status_payload("offline"),
        )
        self.connection = Connection(self.settings, self._on_message, on_connect=self._on_connect)
        self.outbox = Outbox(db, config.outbox_max)
        self.ledger: RequestLedger[Route] = RequestLedger(db, config.dedup_window_s)
        self.sender = Sender(self.connection, self.outbox)
        self.approver = MqttApprover(
            self.connection, self.topics.approval_request, enabled=self.approver_verifier is not None
        )
        self.collector = TelemetryCollector(
            board, version, registry.stats, health or HealthSources(disk=Path(db.path).parent)
        )
        self.counters = {"requests": 0, "answered": 0, "busy": 0, "replayed": 0, "rejected": 0}
        self._slots = asyncio.Semaphore(config.max_concurrent)
        self._admitted = 0
        self._requests: set[asyncio.Task[None]] = set()
        self._background: list[asyncio.Task[None]] = []
        self._spawned: set[asyncio.Task[None]] = set()
        self._runner: asyncio.Task[None] | None = None
        self._events: list[AuditRecord | dict[str, Any]] = []
        # Tool calls by request id, while they may still be cancelled.
        self._cancellable: dict[str, list[Cancellable]] = {}
        self._flush_handle: asyncio.TimerHandle | None = None
        self._closing = False
        self._extensions: list[MqttExtension] = []
        # The board's own Home Assistant entities (homeassistant.py), given a device id: set by the
        # daemon when it carries them on this connection; they join the discovery message.
        self.ha_components: Callable[[str], dict[str, dict[str, Any]]] | None = None
        self._online_since: float | None = None  # when the current connection came up
        self._status_sent: dict[str, Any] | None = None  # the online status last published (no ts)
        self._bad_signatures = 0  # refused since the last report on `events`
        self._bad_signature_reported = float("-inf")

    def extend(self, extension: MqttExtension) -> None:
        """Carry another protocol on this connection (MCP over MQTT): its topics are subscribed with
        ours, its messages handed to it. Before the channel is entered."""
        self._extensions.append(extension)
        self.settings = dataclasses.replace(
            self.settings,
            subscriptions=(*self.settings.subscriptions, *extension.subscriptions()),
            connect_user_properties=(
                *self.settings.connect_user_properties,
                *extension.connect_properties(),
            ),
        )
        self.connection.settings = self.settings

    @property
    def agent(self) -> AgentLoop | None:
        if self._agent is None and self._agent_factory is not None:
            self._agent = self._agent_factory()
        return self._agent

    @agent.setter
    def agent(self, agent: AgentLoop | None) -> None:
        self._agent = agent

    # -- lifecycle -----------------------------------------------------------
    async def __aenter__(self) -> MqttChannel:
        try:
            self.connection.open()
        except (OSError, ssl.SSLError) as e:
            raise ConfigErrors(
                [ConfigError(self.source, "mqtt.tls", f"cannot use the TLS files: {e}")]
            ) from None
        self._answer_unfinished()
        if self.approver_verifier is not None:
            self.approvals.register(CHANNEL, self)
            self.approvals.register(ADMIN_CHANNEL, self)
        else:  # nobody on MQTT is entitled to approve: denied with the reason, nothing published
            self.approvals.refuse(CHANNEL, NO_APPROVER)
            self.approvals.refuse(ADMIN_CHANNEL, NO_APPROVER)
        if self.outlets is not None:
            self.outlets.register(CHANNEL, self)
        if self.config.events:
            self.registry.add_audit_sink(self._audit)
            if self.audit is not None:
                self.audit.add_sink(self._trail_event)
        loop = asyncio.get_running_loop()
        for extension in self._extensions:
            extension.start()
        self._runner = loop.create_task(self.connection.run(), name="mqtt-connection")
        if self.config.telemetry_interval_s > 0:
            self._background.append(loop.create_task(self._telemetry_loop(), name="mqtt-telemetry"))
        if self.ledger.enabled:
            self._background.append(loop.create_task(self._housekeeping(), name="mqtt-housekeeping"))
        if self.config.discovery and not discovery_topic_usable(self.device_id):
            log.warning(
                "Home Assistant will ignore discovery on %s: its device id may hold only letters, digits, "
                "'_' and '-' (set device_id)",
                self.topics.discovery,
            )
        log.info(
            "MQTT channel for %s on %s:%d (prefix %s)",
            self.device_id,
            self.config.host,
            self.config.port,
            self.config.topic_prefix,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing = True
        if self.outlets is not None:
            self.outlets.unregister(CHANNEL, self)
        if self._requests:
            _, running = await asyncio.wait(set(self._requests), timeout=STOP_GRACE_S)
            for task in running:
                task.cancel()
            if running:
                await asyncio.wait(running)
        for task in [*self._background, *self._spawned]:
            task.cancel()
        if self._background or self._spawned:
            await asyncio.wait([*self._background, *self._spawned])
        self.registry.remove_audit_sink(self._audit)
        if self.audit is not None:
            self.audit.remove_sink(self._trail_event)
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        self._flush_after_answers()  # what was still waiting for its moment
        self.approvals.unregister(CHANNEL, None if self.approver_verifier is None else self)
        self.approvals.unregister(ADMIN_CHANNEL, None if self.approver_verifier is None else self)
        await self.sender.close()
        for extension in self._extensions:
            try:
                await extension.before_disconnect()
            except Exception:
                log.exception("stopping %r failed", extension)
        if self._runner is not None:
            await self.connection.stop(self._runner, (self.topics.status, self._status_payload("offline")))
        log.info("MQTT channel stopped (%d message(s) left in the outbox)", self.outbox.depth)

    # -- the Channel protocol ------------------------------------------------
    async def send(self, reply: Reply) -> None:
        """Deliver a reply: to the route of the message it answers, else to `chat/out`."""
        route = Route(self.topics.chat_out)
        request_id = None
        if reply.in_reply_to is not None:
            route = reply.in_reply_to.meta.get("route", route)
            request_id = reply.in_reply_to.meta.get("id")
        self._answer(route, encode(chat_answer(reply.text, reply.session, reply.ok, request_id)))

    async def ask_approval(self, request: ApprovalRequest) -> Decision | Verdict | None:
        return await self.approver.ask_approval(request)

    # -- the Outlet protocol (edgeclaw.tools.outlets) --------------------------
    # Both go through the store-and-forward sender as answers: stored before they are published,
    # kept until the broker acknowledges them, so a broker that is down delays them, never loses them.
    def has_session(self, session_key: str) -> bool:
        return session_key.startswith(CHANNEL + ":")

    async def to_session(self, session_key: str, text: str) -> str:
        """A message into an MQTT chat session: on `chat/out`, with the session's key."""
        if self._closing:
            raise DeliveryFailed("the MQTT channel is stopping")
        self.sender.send(
            Kind.ANSWER, self.topics.chat_out, encode(chat_answer(text, session_key, True, None))
        )
        return f"queued on {self.topics.chat_out} for session {session_key}"

    async def to_target(self, target: str, message: OutletMessage) -> str:
        """A message on `{prefix}/{dev}/message/{target}`: {"text", "from", "title", "priority", "ts"}."""
        try:
            topic = self.topics.message(target)
        except ValueError as e:
            raise DeliveryFailed(str(e)) from None
        if self._closing:
            raise DeliveryFailed("the MQTT channel is stopping")
        payload: dict[str, Any] = {"text": message.text, "from": message.origin or None, "ts": time.time()}
        if message.title:
            payload["title"] = message.title
        if message.priority:
            payload["priority"] = message.priority
        self.sender.send(Kind.ANSWER, topic, encode(payload))
        return f"queued on {topic}"

    # -- status, discovery, telemetry ----------------------------------------
    def _status_payload(self, state: str) -> bytes:
        """The Last Will and the clean stop's status: what was known at connect time, `ts` then."""
        return encode(
            {"state": state, "version": self.version, "board": self.board, "ts": round(time.time(), 3)}
        )

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
        return self.registry.scrubber.scrub(text).encode("utf-8", "surrogatepass")

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

    def _on_connect(self) -> None:
        self._spawn(self._announce())
        for extension in self._extensions:
            extension.on_connect()

    async def _announce(self) -> None:
        """After each connect: status online, discovery, a first telemetry, then the outbox backlog."""
        self._online_since = round(time.time(), 3)
        status = self._online_status()
        try:
            await self.connection.publish(self.topics.status, self._encode_status(status), retain=True)
            self._status_sent = status
            if self.config.discovery:
                await self.connection.publish(self.topics.discovery, self._discovery_payload(), retain=True)
        except PublishFailed as e:
            log.warning("could not announce the device: %s", e)
            return
        self.sender.on_connect()
        if self.config.telemetry_interval_s > 0:
            self._send_telemetry()

    def _send_telemetry(self) -> None:
        snapshot = self.telemetry_snapshot()
        self.sender.send(Kind.TELEMETRY, self.topics.telemetry, encode(snapshot))
        if self.connection.connected:
            # Retained beside it: the last figures with their time (= last seen), for whoever
            # subscribes later. Not stored while offline: the next connect sends fresh ones.
            health = encode({**snapshot, "device": self.device_id})
            self._spawn(self._publish_retained(self.topics.health, health))
            status = self._online_status()
            if self._status_sent is not None and status != self._status_sent:
                # A provider became reachable, an MCP server went down, an address changed.
                self._status_sent = status
                self._spawn(self._publish_retained(self.topics.status, self._encode_status(status)))

    async def _publish_retained(self, topic: str, payload: bytes) -> None:
        try:
            await self.connection.publish(topic, payload, retain=True)
        except PublishFailed as e:
            log.debug("could not publish %s: %s", topic, e)

    async def _telemetry_loop(self) -> None:
        interval = self.config.telemetry_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                self._send_telemetry()
            except Exception:
                log.exception("telemetry failed")

    async def _housekeeping(self) -> None:
        period = max(1.0, min(HOUSEKEEPING_S, self.config.dedup_window_s / 2))
        while True:
            await asyncio.sleep(period)
            try:
                # In chunks, letting requests in between, so a big ledger never stalls the loop.
                for _ in range(MAX_PURGE_CHUNKS):
                    if self.ledger.purge() < PURGE_CHUNK:
                        break
                    await asyncio.sleep(0)
            except Exception:
                log.exception("purging the request ledger failed")

    async def _republish_discovery(self) -> None:
        try:
            await self.connection.publish(self.topics.discovery, self._discovery_payload(), retain=True)
        except PublishFailed as e:
            log.warning("could not re-send discovery: %s", e)

    # -- events ----------------------------------------------------------------
    def _audit(self, record: AuditRecord) -> None:
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

    # -- work kept off the caller's critical path -------------------------------
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

    # -- inbound ---------------------------------------------------------------
    def _on_message(self, message: aiomqtt.Message) -> None:
        msg = Incoming.of(message)
        for extension in self._extensions:
            if extension.handles(msg.topic):
                extension.on_message(msg.topic, msg.payload, msg.user_properties, msg.retained)
                return
        kind = self._kinds.get(msg.topic)
        if kind is not None:
            self._inbound(msg, kind)
        elif msg.topic == self.topics.approval_response:
            self._inbound_approval(msg)
        elif msg.topic == self.topics.ha_status:
            if msg.payload.strip().lower() == b"online":
                self._spawn(self._republish_discovery())
        else:
            log.debug("ignoring a message on %s", msg.topic)

    def _route_problem(self, msg: Incoming) -> str | None:
        """Why the message's Response Topic is refused, or None (also when it has none)."""
        if msg.response_topic is None:
            return None
        return response_topic_problem(
            msg.response_topic, self.config.topic_prefix, self.config.discovery_prefix
        )

    def _inbound(self, msg: Incoming, kind: Kind_) -> None:
        """One command: exactly one answer, whatever goes wrong on the way (see the module doc)."""
        self.counters["requests"] += 1
        route_problem = self._route_problem(msg)
        bad_route = route_problem is not None
        device = self.device_id if msg.topic in self._fleet_topics else None
        if msg.response_topic is None or bad_route:
            route = Route(self._fallbacks[kind], msg.correlation, device)
        else:
            route = Route(msg.response_topic, msg.correlation, device)

        def refusal(code: str, message: str, request_id: str | None) -> bytes:
            """The error answer for a request refused before it was understood."""
            if kind == "tool":
                return encode(tool_error(request_id, None, code, message))
            if kind == "cancel":
                return encode(cancel_error(request_id, None, code, message))
            if kind == "admin":
                return encode(admin_error(request_id, None, code, message))
            return encode(chat_error(request_id, None, code, message))

        answered = self.counters["answered"]
        try:
            self._accept(msg, kind, route, route_problem, refusal)
        except Exception as e:
            # A fault of ours (the state database failing, a bug) must not leave the caller waiting
            # for an answer that never comes. Unless one already went out, this is it.
            log.exception("handling a request on %s failed", msg.topic)
            if self.counters["answered"] == answered:
                problem = f"internal error: {type(e).__name__}: {e}"
                self._answer(route, refusal("internal", problem, peek_id(msg.payload)))

    def _accept(
        self,
        msg: Incoming,
        kind: Kind_,
        route: Route,
        route_problem: str | None,
        refusal: Callable[[str, str, str | None], bytes],
    ) -> None:
        """Check, authenticate and parse a command, then hand it to `_submit` (or refuse it)."""
        problem: WireError | None = None
        if route_problem is not None:
            problem = WireError(
                "bad_response_topic", f"refused Response Topic {msg.response_topic!r}: {route_problem}"
            )
        elif msg.retained:
            # A retained command would run again on every reconnect.
            problem = WireError("retained", "commands must not be published with the retain flag")
        elif kind == "admin" and msg.topic in self._fleet_topics and not self.config.broadcast_admin:
            problem = WireError(
                "broadcast_refused",
                "admin commands are not taken by broadcast or group here: send them to the device's own "
                "admin topics (or set mqtt.broadcast_admin = true)",
            )
        elif kind == "admin" and self._admin_key() is None and not self.config.admin_unsigned:
            problem = WireError(
                "admin_disabled",
                "the admin topics need signed commands: set mqtt.admin_secret_env or "
                "mqtt.admin_secret_file (or the command key; or mqtt.admin_unsigned = true where the "
                "broker's ACLs protect these topics)",
            )
        elif len(msg.payload) > self.config.max_payload_bytes:
            problem = WireError(
                "too_large",
                f"the payload is {len(msg.payload)} bytes; the limit is {self.config.max_payload_bytes}",
            )
        if problem is not None:
            self.counters["rejected"] += 1
            self._answer(route, refusal(problem.code, problem.message, peek_id(msg.payload)))
            return
        key = self._admin_key() if kind == "admin" else self.verifier
        signed = key is not None
        try:
            body = self._authenticate(msg, key)
            if kind == "chat":
                chat = parse_chat(body)
                if signed:
                    # Plain text carries no `ts`: signed chat must be JSON.
                    stamped = parse_json_object(body, "chat/in") if body.lstrip().startswith(b"{") else {}
                    check_fresh(stamped, self.config.hmac_max_age_s)
                self._submit_chat(chat, route, msg, body if signed else None)
                return
            obj = parse_json_object(body, WHAT[kind])
            if signed:
                check_fresh(obj, self.config.hmac_max_age_s)
            if kind == "tool":
                call = parse_tool_call(obj)
                self._submit_tool(call, route, self._caller(call.sender))
            elif kind == "cancel":
                cancel = parse_cancel(obj)
                self._cancel(cancel, route, self._caller(cancel.sender))
            elif msg.topic in self._admin_calls:
                sender = obj.get("sender") if isinstance(obj.get("sender"), str) else ""
                call = parse_admin_call(obj, self._admin_calls[msg.topic])
                self._submit_admin_call(call, route, self._caller(sender, key))
            else:
                sender = obj.get("sender") if isinstance(obj.get("sender"), str) else ""
                self._submit_admin(parse_admin(obj), route, self._caller(sender, key))
        except WireError as e:
            self.counters["rejected"] += 1
            request_id = e.request_id or (peek_id(msg.payload) if e.code == "bad_signature" else None)
            if e.code == "bad_signature":
                self._bad_signature(msg.topic)
            self._answer(route, refusal(e.code, e.message, request_id))

    def _bad_signature(self, topic: str) -> None:
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

    def health_problem(self) -> str | None:
        """What keeps this channel from serving (the daemon's health check), or None."""
        if self.connection.connected:
            return None
        return f"not connected to the broker {self.config.host}:{self.config.port}"

    def _admin_key(self) -> Verifier | None:
        """The key admin commands must be signed with: the admin key, else the command key."""
        return self.admin_verifier if self.admin_verifier is not None else self.verifier

    def _caller(self, sender: str, key: Verifier | None = None) -> str:
        """The caller's identity: the signing key when there is one (a proof), else the declared sender
        (a label), else anonymous. `key`: the one the command was checked against (the command
        key unless said otherwise)."""
        key = self.verifier if key is None else key
        if key is not None:  # every command was checked against it
            return key.identity
        if sender:
            return f"mqtt:sender:{sender}"
        return ANONYMOUS

    # Past parsing the request is understood: its error answers (busy, stopping, ...) name it fully.
    def _submit_tool(self, call: ToolCallRequest, route: Route, caller: str) -> None:
        entry = Cancellable(caller)
        self._submit(
            request_key("tool", call.id, [call.tool, call.args, call.session]),
            route,
            lambda: self._run_tool(call, route, caller),
            lambda code, text: encode(tool_error(call.id, call.tool, code, text)),
            cancel=(call.id, entry),
            about=("tool", call.id, call.tool),
            observes=self.registry.only_observes(call.tool, call.args),
        )

    def _cancel(self, cancel: CancelRequest, route: Route, caller: str) -> None:
        """Stop a call of the same caller: it is answered `cancelled` (by `_serve`), this request with
        what the call was doing. Not through the ledger or admission: a cancel must get through when
        the device is busy, and a repeated cancel is harmless."""
        entries = [
            e for e in self._cancellable.get(cancel.target, ()) if e.caller == caller and not e.cancelled_by
        ]
        if not entries:
            answer = cancel_error(
                cancel.id,
                cancel.target,
                "not_found",
                f"no call with id {cancel.target!r} from this caller is waiting or running "
                "(finished already, never sent, or sent by another caller)",
            )
            self._answer(route, encode(answer))
            return
        state = "running" if any(e.started for e in entries) else "waiting"
        for entry in entries:
            entry.cancelled_by = cancel.id
            if entry.task is not None:  # else `_serve` sees `cancelled_by` when it starts
                entry.task.cancel()
        log.info("call %s cancelled by request %s (%s)", cancel.target, cancel.id, caller)
        self._answer(route, encode(cancel_answer(cancel.id, cancel.target, state)))

    def _submit_admin(self, admin: AdminRequest, route: Route, caller: str) -> None:
        self._submit(
            request_key("admin", admin.id, [admin.action, admin.definition, admin.name]),
            route,
            lambda: self._run_admin(admin, caller),
            lambda code, text: encode(admin_error(admin.id, admin.action, code, text)),
            about=("admin", admin.id, admin.action),
        )

    def _submit_admin_call(self, call: AdminCall, route: Route, caller: str) -> None:
        self._submit(
            request_key("admin", call.id, [call.tool, call.args]),
            route,
            lambda: self._run_admin_call(call, route, caller),
            lambda code, text: encode(admin_error(call.id, call.action, code, text)),
            about=("admin", call.id, call.action),
            observes=self.registry.only_observes(call.tool, call.args),
        )

    async def _run_admin_call(self, call: AdminCall, route: Route, caller: str) -> bytes:
        """`admin/cron`, `admin/gateway`: the tool through the registry, as the admin channel. Jobs
        made here belong to the signing key's identity on that channel."""
        ctx = ToolContext(
            channel=ADMIN_CHANNEL,
            chat_id=route.topic,
            peer_kind="device",
            session_key=ADMIN_CHANNEL,
            caller=caller,
            request_id=call.id,
        )
        outcome = await self.registry.execute(call.tool, call.args, ctx)
        return encode(admin_call_answer(call.id, call.action, outcome))

    # -- scheduled jobs' output (edgeclaw.tools.automation) ------------------------
    async def publish_job_output(self, subtopic: str, delivery: Delivery) -> None:
        """A job's output on `{prefix}/{dev}/SUBTOPIC`, through the store-and-forward sender like
        telemetry: kept while the broker is away (within the outbox bound), dropped first when full."""
        problem = topic_problem(subtopic)
        if problem is not None:
            raise DeliveryError(problem)
        if self._closing or self._runner is None:
            raise DeliveryError("the MQTT channel is not running")
        text = self.registry.scrubber.scrub(json.dumps(delivery.payload(), ensure_ascii=False))
        topic = f"{self.topics.base}/{subtopic}"
        self.sender.send(Kind.TELEMETRY, topic, text.encode("utf-8", "surrogatepass"))

    def _submit_chat(self, chat: ChatRequest, route: Route, msg: Incoming, signed_body: bytes | None) -> None:
        message = self._chat_message(chat, route, msg)
        ledger_id = chat.id
        if ledger_id is None and signed_body is not None:
            # A signed message must never run twice, with or without an id: its signed bytes name it.
            ledger_id = "signed:" + hashlib.sha256(signed_body).hexdigest()[:32]
        self._submit(
            request_key("chat", ledger_id, [chat.text, chat.session, chat.sender]) if ledger_id else None,
            route,
            lambda: self._run_chat(chat, message),
            lambda code, text: encode(chat_error(chat.id, message.session_key, code, text)),
            about=("chat", chat.id, message.session_key),
        )

    def _authenticate(self, msg: Incoming, key: Verifier | None) -> bytes:
        """The request bytes, once the signature checks out against `key` (when signing is on)."""
        if key is None:
            return msg.payload
        try:
            return key.verify(
                msg.topic, msg.payload, msg.user_properties, msg.response_topic, msg.correlation
            )
        except WireError as e:
            if key is self.admin_verifier:
                raise WireError(
                    e.code, f"admin commands must be signed with the admin key: {e.message}"
                ) from None
            raise

    def _submit(
        self,
        key: str | None,
        route: Route,
        work: Callable[[], Awaitable[bytes]],
        error: ErrorAnswer,
        cancel: tuple[str, Cancellable] | None = None,
        *,
        about: tuple[Literal["tool", "chat", "admin"], str | None, str | None],
        observes: bool = False,
    ) -> None:
        """Admit a request: recorded in the ledger (durably, before the broker gets our PUBACK for
        it) with where its answer goes and what it names (`about`: kind, id, and the tool, chat
        session or admin action), so that even a crash leaves it answered."""
        if not self.ledger.enabled:
            key = None
        if self._closing:
            self._answer(route, error("stopping", "the daemon is shutting down; try again shortly"))
            return
        if self._admitted >= self.config.inbound_queue:
            # A repeat of a known request needs no slot: answer it from the ledger even when busy.
            if key is not None and self._answered_from_ledger(key, self.ledger.lookup(key), route, error):
                return
            self.counters["busy"] += 1
            self._answer(
                route,
                error("busy", f"busy: {self._admitted} requests are waiting or running; try again shortly"),
            )
            return
        kind, request_id, label = about
        recorded = Recorded(route.topic, route.correlation, request_id, label)
        # Below max_concurrent admitted, this one gets a slot at once: recorded as running right away.
        started = self._admitted < self.config.max_concurrent
        try:
            if key is None:
                # Nothing to recognise it by: recorded only so that a crash cannot leave it unanswered.
                key = journal_key(kind)
                self.ledger.begin(key, recorded, started=started)
            elif self._answered_from_ledger(
                key, self.ledger.begin(key, recorded, started=started), route, error
            ):
                return
        except StorageFull as e:
            # A full disk: a call that only reads runs unrecorded (a repeat of it is harmless);
            # anything else is refused, since a repeat of an unrecorded call could run it twice.
            if not observes:
                self.counters["rejected"] += 1
                self._answer(route, error("no_space", f"{e}; the request was not run"))
                return
            log.warning("%s; request %s only reads, so it runs without a ledger entry", e, request_id)
            key = None
        self._admitted += 1
        if cancel is not None:
            self._cancellable.setdefault(cancel[0], []).append(cancel[1])
        task = asyncio.get_running_loop().create_task(self._serve(key, route, work, error, cancel))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    def _answered_from_ledger(self, key: str, found: Lookup, route: Route, error: ErrorAnswer) -> bool:
        """Handle a request the ledger already knows; False when it is new (and must run)."""
        if found.seen is Seen.DONE:
            assert found.answer is not None  # a finished request always has its answer stored
            self.counters["replayed"] += 1
            self._answer(route, replayed(found.answer))
            return True
        if found.seen is Seen.RUNNING:
            self.counters["replayed"] += 1
            if not self.ledger.wait(key, route):
                self._answer(route, error("busy", "this request is still running and many copies of it wait"))
            return True
        if found.seen is Seen.INTERRUPTED:
            # Left unfinished by an earlier process, and not answered at start-up (a row from before
            # routes were recorded): answered now, once, and recorded so.
            self.counters["answered"] += 1
            self.sender.launch(
                self._conclude(key, route, self._interrupted(error, found.may_have_run), ran=True)
            )
            return True
        return False

    async def _serve(
        self,
        key: str | None,
        route: Route,
        work: Callable[[], Awaitable[bytes]],
        error: ErrorAnswer,
        cancel: tuple[str, Cancellable] | None = None,
    ) -> None:
        started = False
        ran = True
        entry = cancel[1] if cancel is not None else None
        try:
            if entry is not None:
                entry.task = asyncio.current_task()
                if entry.cancelled_by is not None:  # cancelled before this task first ran
                    raise asyncio.CancelledError
            async with self._slots:
                started = True
                if key is not None:
                    self.ledger.start(key)
                if entry is not None:
                    entry.started = True
                answer = await work()
            self._keep_answer(entry)
        except asyncio.CancelledError:
            if self._cancelled_by_caller(entry):
                assert entry is not None and entry.cancelled_by is not None
                # Like a stop, one that started may have had effects (recorded, not run again);
                # one still waiting never ran and may be sent again.
                ran = started
                answer = error(
                    "cancelled",
                    f"cancelled by request {entry.cancelled_by!r} "
                    + (
                        "while it ran: it may have had part of its effect"
                        if started
                        else "before it started: it did not run (send it again to run it)"
                    ),
                )
            else:
                # Stopping: still one answer. One that started may have had effects, so it is
                # recorded as done and not run again (a retry is told so, from the ledger); one
                # still waiting for a slot never ran, and may be sent again and run.
                if started:
                    answer = self._interrupted(error, True)
                else:
                    answer = error(
                        "stopping", "the daemon stopped before this request started; try again shortly"
                    )
                self.counters["answered"] += 1
                self.sender.launch(self._conclude(key, route, answer, ran=started))
                raise
        except Exception as e:
            log.exception("request failed")
            answer = error("internal", f"internal error: {type(e).__name__}: {e}")
        finally:
            self._admitted -= 1
            self._uncancellable(cancel)  # from here on nothing may interrupt the answer
        out = self._conclude(key, route, answer, ran=ran)
        self.counters["answered"] += 1
        if self._events:
            # The call's event goes out in the same socket write as its answer (it is queued before
            # the write happens): a separate write for every event costs more than the event.
            asyncio.get_running_loop().call_soon(self._publish_events)
        # Published from this task (no hop to another): the answer is what the caller waits for.
        if out is not None:
            await self.sender.publish(out)

    def _cancelled_by_caller(self, entry: Cancellable | None) -> bool:
        """Whether the CancelledError being handled came from a caller's `tool/cancel` (and not from
        a stop, which wins); if so the task's cancellation is taken back, so it can still answer."""
        if entry is None or entry.cancelled_by is None or self._closing:
            return False
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            task.uncancel()
        return True

    def _keep_answer(self, entry: Cancellable | None) -> None:
        """A tool that swallowed the cancel and returned anyway: its answer stands, and the pending
        cancellation must not hit the delivery of it instead."""
        if entry is not None and entry.cancelled_by is not None and not self._closing:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                task.uncancel()

    def _uncancellable(self, cancel: tuple[str, Cancellable] | None) -> None:
        if cancel is None:
            return
        request_id, entry = cancel
        entries = self._cancellable.get(request_id)
        if entries is not None and entry in entries:
            entries.remove(entry)
            if not entries:
                del self._cancellable[request_id]

    def _conclude(self, key: str | None, route: Route, answer: bytes, *, ran: bool) -> Outgoing | None:
        """Store the answer in the outbox and conclude the request in the ledger, in one transaction
        (so a crash leaves the request either unfinished or with its answer on the way, never both),
        then answer the copies that waited on it. Returns what to publish now (see Sender.store)."""
        answer = self._naming_device(route, answer)
        if key is None:
            return self.sender.store(Kind.ANSWER, route.topic, answer, correlation=route.correlation)
        # One that never ran is forgotten: it may be sent again, and the copies get the same refusal.
        finished = self.ledger.finish(key, answer) if ran else self.ledger.abandon(key)
        out = self.sender.store(
            Kind.ANSWER, route.topic, answer, correlation=route.correlation, record=finished.record
        )
        for waiter in finished.waiters:
            self._answer(waiter, replayed(answer) if ran else answer)
        return out

    @staticmethod
    def _interrupted(error: ErrorAnswer, may_have_run: bool) -> bytes:
        """The `interrupted` answer, saying whether the request had started when the daemon stopped."""
        answer = json.loads(error("interrupted", INTERRUPTED if may_have_run else INTERRUPTED_WAITING))
        answer["may_have_run"] = may_have_run
        return encode(answer)

    @staticmethod
    def _error_for(kind: str, request_id: str | None, label: str | None) -> ErrorAnswer:
        """The error answers of a request known only from its ledger row."""
        if kind == "tool":
            return lambda code, text: encode(tool_error(request_id, label, code, text))
        if kind == "admin":
            return lambda code, text: encode(admin_error(request_id, label, code, text))
        return lambda code, text: encode(chat_error(request_id, label, code, text))

    def _answer_unfinished(self) -> None:
        """At start-up, before anything is taken in: answer `interrupted` every request the last
        process recorded and never answered (it was killed, or the machine lost power), to the
        Response Topic and Correlation Data it came with. Published once connected."""
        unfinished = self.ledger.unfinished()
        for row in unfinished:
            error = self._error_for(row.kind, row.recorded.request_id, row.recorded.label)
            answer = self._interrupted(error, row.may_have_run)
            finished = self.ledger.finish(row.key, answer)
            if not row.recorded.topic:
                self.ledger.write(finished)  # recorded before routes were: answered to repeats only
                continue
            self.sender.store(
                Kind.ANSWER,
                row.recorded.topic,
                answer,
                correlation=row.recorded.correlation,
                record=finished.record,
            )
        if unfinished:
            started = sum(row.may_have_run for row in unfinished)
            log.warning(
                "the daemon stopped last time with %d request(s) unanswered (%d had started): "
                "each is answered 'interrupted' and not run again",
                len(unfinished),
                started,
            )

    async def _run_tool(self, call: ToolCallRequest, route: Route, caller: str) -> bytes:
        if call.session:
            session_key = f"mqtt:{call.session}"
        elif call.sender:
            session_key = f"mqtt:{call.sender}"
        else:
            session_key = "mqtt:tools"
        properties = publish_properties(None, route.correlation)

        async def publish(payload: bytes) -> None:
            await self.connection.publish(route.topic, payload, qos=0, properties=properties)

        # What a long call reports as it runs goes out before its answer (channels.mqtt.progress).
        head = {"id": call.id, "tool": call.tool}
        progress = ProgressPublisher(publish, head, self.registry.scrubber.scrub, route.device)
        ctx = ToolContext(
            channel=CHANNEL,
            chat_id=route.topic,
            peer_kind="device",
            session_key=session_key,
            sender=call.sender,
            caller=caller,
            request_id=call.id,
            progress=progress,
        )
        try:
            outcome = await self.registry.execute(call.tool, call.args, ctx)
        finally:
            await progress.close()  # the last progress message is out before the answer is queued
        return encode(tool_answer(call.id, outcome))

    def _chat_message(self, chat: ChatRequest, route: Route, msg: Incoming) -> InboundMessage:
        """The agent's view of a chat request. Its session is the payload's `session`, else the
        sender, else the topic the answer goes to (the Response Topic, else chat/in)."""
        conversation = route.topic if route.topic == msg.response_topic else msg.topic
        return InboundMessage(
            channel=CHANNEL,
            text=chat.text,
            chat_id=chat.sender or conversation,
            sender=chat.sender,
            session=f"mqtt:{chat.session}" if chat.session else "",
            peer_kind="direct",
            caller=self._caller(chat.sender),
            request_id=chat.id or "",
            meta={"route": route, "id": chat.id},
        )

    async def _run_chat(self, chat: ChatRequest, message: InboundMessage) -> bytes:
        """One agent turn; asked for with `stream`, its text goes out as partial answers first."""
        if self.agent is None:
            return encode(chat_error(chat.id, message.session_key, "no_agent", "chat is not available here"))
        route: Route = message.meta["route"]
        properties = publish_properties(None, route.correlation)

        async def publish(payload: bytes) -> None:
            await self.connection.publish(route.topic, payload, qos=0, properties=properties)

        # The turn's tool calls report their progress on the answer's route (channels.mqtt.progress).
        head: dict[str, Any] = {"session": message.session_key}
        if chat.id is not None:
            head["in_reply_to"] = chat.id
        progress = ProgressPublisher(publish, head, self.registry.scrubber.scrub, route.device)
        message = dataclasses.replace(message, on_progress=progress)
        if not chat.stream:
            try:
                reply = await self.agent.handle(message)
            finally:
                await progress.close()  # the last progress message is out before the answer is queued
            return encode(chat_answer(reply.text, reply.session, reply.ok, chat.id))
        partials = PartialPublisher(publish, message.session_key, chat.id)
        try:
            reply = await self.agent.handle(dataclasses.replace(message, on_text=partials))
        finally:
            await progress.close()
            sent = await partials.close()  # the last partial is out before the final answer is queued
        answer = chat_answer(reply.text, reply.session, reply.ok, chat.id)
        answer["seq"] = sent
        return encode(answer)

    async def _run_admin(self, admin: AdminRequest, caller: str) -> bytes:
        """Define, remove or list runtime custom tools. Definitions take effect at once and are kept
        across restarts (edgeclaw.tools.runtime.custom); environment values are never echoed back. Every
        change is an event of the audit trail (who, what, which tool; never the definition)."""
        custom = self.custom_tools
        if custom is None:
            return encode(
                admin_error(admin.id, admin.action, "unavailable", "custom tools are not available here")
            )
        answer: dict[str, Any] = {"id": admin.id, "ok": True, "action": admin.action}
        try:
            if admin.action == "define":
                assert admin.definition is not None
                spec = custom.define(admin.definition)
                answer["tool"] = spec.public()
                self._admin_event("define", spec.name, caller, admin.id)
            elif admin.action == "remove":
                if not custom.remove(admin.name):
                    return encode(
                        admin_error(
                            admin.id, admin.action, "not_found", f"no custom tool named {admin.name!r}"
                        )
                    )
                answer["name"] = admin.name
                self._admin_event("remove", admin.name, caller, admin.id)
            else:
                answer["tools"] = [spec.public() for spec in custom.list()]
        except InvalidDefinition as e:
            self._admin_event(admin.action, None, caller, admin.id, outcome="refused")
            return encode(admin_error(admin.id, admin.action, "invalid_definition", str(e)))
        # A definition may carry a command line with a secret in it: scrubbed like tool output.
        text = json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
        return self.registry.scrubber.scrub(text).encode("utf-8", "surrogatepass")

    def _admin_event(
        self, action: str, tool: str | None, caller: str, request_id: str, outcome: str = "ok"
    ) -> None:
        if self.audit is not None:
            self.audit.emit(
                "admin", action=action, tool=tool, outcome=outcome, by=caller, channel=CHANNEL,
                request_id=request_id,
            )  # fmt: skip
        else:
            log.info("custom tool %s: %s over MQTT by %s (%s)", tool, action, caller, outcome)

    def _inbound_approval(self, msg: Incoming) -> None:
        """A decision for a pending approval, counted only when signed with the approver key.
        Answered only when the sender asked for an answer (a Response Topic); otherwise problems
        are logged."""
        result: dict[str, Any]
        try:
            if msg.retained:
                raise WireError("retained", "approval responses must not be retained")
            approver = self.approver_verifier
            if approver is None:
                raise WireError("unavailable", NO_APPROVER, peek_id(msg.payload))
            obj = parse_json_object(self._approver_signed(approver, msg), "approval/response")
            check_fresh(obj, self.config.hmac_max_age_s)
            decision = parse_approval(obj)
            if self.approver.answer(decision, by=approver.identity):
                result = {"id": decision.id, "ok": True}
            else:
                result = {
                    "id": decision.id,
                    "ok": False,
                    "code": "unknown_approval",
                    "error": f"no approval request {decision.id!r} is waiting (expired or never asked)",
                }
        except WireError as e:
            result = {"id": e.request_id, "ok": False, "code": e.code, "error": e.message}
        if not result["ok"]:
            log.warning("approval response refused: %s", result["error"])
        if msg.response_topic is not None and self._route_problem(msg) is None:
            # Not through `_answer`: an approval response is not one of the requests counted there.
            self.sender.send(Kind.ANSWER, msg.response_topic, encode(result), correlation=msg.correlation)

    def _approver_signed(self, approver: Verifier, msg: Incoming) -> bytes:
        """The approval response's bytes once the approver key's signature checks out."""
        args = (msg.topic, msg.payload, msg.user_properties, msg.response_topic, msg.correlation)
        try:
            return approver.verify(*args)
        except WireError as e:
            request_id = peek_id(msg.payload)
            command_signed = False
            if self.verifier is not None:
                with contextlib.suppress(WireError):
                    command_signed = self.verifier.signed_body(*args) is not None
            if command_signed:
                raise WireError(
                    "bad_signature",
                    "this approval response is signed with the command key; approvals must be signed "
                    "with the approver key (the one who asks may not approve)",
                    request_id,
                ) from None
            raise WireError(
                "bad_signature",
                f"approval responses must be signed with the approver key: {e.message}",
                request_id,
            ) from None

    # -- outbound --------------------------------------------------------------
    def _answer(self, route: Route, payload: bytes) -> None:
        self.counters["answered"] += 1
        payload = self._naming_device(route, payload)
        self.sender.send(Kind.ANSWER, route.topic, payload, correlation=route.correlation)

    @staticmethod
    def _naming_device(route: Route, payload: bytes) -> bytes:
        """The answer to a fleet or group command with `"device"`: whose answer it is."""
        if route.device is None:
            return payload
        try:
            answer = json.loads(payload)
        except ValueError:
            return payload
        if not isinstance(answer, dict) or answer.get("device") == route.device:
            return payload
        answer["device"] = route.device
        return encode(answer)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)
