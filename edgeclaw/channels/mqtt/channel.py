"""The MQTT channel: chat and tool calls in, answers, status, telemetry and events out.

The channel owns the connection and the lifecycle, and routes what arrives; the work is done by
role modules, each with a class of its own:

  `keys` (`Keys`)              the command, admin and approver keys; who the caller is
  `reader` (`RequestReader`)   a command parsed once into a `Command` (`inbound`), or refused
  `serving` (`RequestServer`)  admission, the request ledger, cancel: one answer per request
  `work` (`RequestWork`)       what a request does: a tool call, a chat turn, `admin` topics
  `reporting` (`Reporter`)     status and Last Will, discovery, telemetry, events

Answers, events and telemetry go through the store-and-forward `Sender`, so nothing produced
while the broker is unreachable is lost (within the outbox bound).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import aiomqtt

from edgeclaw import __version__
from edgeclaw.agent.channel import Reply
from edgeclaw.channels.mqtt.admin import ADMIN_CHANNEL, AdminTopics, CustomToolCatalog
from edgeclaw.channels.mqtt.approvals import NO_APPROVER, MqttApprover
from edgeclaw.channels.mqtt.dedup import RequestLedger
from edgeclaw.channels.mqtt.discovery import discovery_topic_usable
from edgeclaw.channels.mqtt.inbound import CHANNEL, Incoming
from edgeclaw.channels.mqtt.keys import Keys
from edgeclaw.channels.mqtt.outbox import Kind, Outbox
from edgeclaw.channels.mqtt.protocol import (
    Route,
    chat_answer,
    check_fresh,
    encode,
    parse_approval,
    parse_json_object,
    peek_id,
)
from edgeclaw.channels.mqtt.reader import RequestReader
from edgeclaw.channels.mqtt.reporting import Reporter
from edgeclaw.channels.mqtt.resend import RecentAnswers
from edgeclaw.channels.mqtt.sender import Sender
from edgeclaw.channels.mqtt.serving import RequestServer
from edgeclaw.channels.mqtt.telemetry import HealthSources, TelemetryCollector
from edgeclaw.channels.mqtt.topics import DeviceTopics, FleetTopics, group_problem
from edgeclaw.channels.mqtt.work import RequestWork
from edgeclaw.config.schema import MqttConfig
from edgeclaw.errors import ConfigError, ConfigErrors
from edgeclaw.net.device_key import DeviceSigner
from edgeclaw.net.mqtt_connection import Connection, ConnectionSettings, TlsSettings
from edgeclaw.net.wire import WireError
from edgeclaw.store.db import Database
from edgeclaw.tools.approval import ApprovalBroker, ApprovalRequest, Decision, Verdict
from edgeclaw.tools.audit import AuditTrail
from edgeclaw.tools.outlets import DeliveryFailed, Outgoing, Outlets
from edgeclaw.tools.registry import Registry

if TYPE_CHECKING:
    from edgeclaw.agent.loop import AgentLoop

log = logging.getLogger("edgeclaw.mqtt")

# On a clean stop, requests still running get this long before they are cancelled (and answered so).
STOP_GRACE_S = 5.0


class ChannelNotRunning(Exception):
    """The channel is not running (not yet entered, or stopping): nothing can be published."""


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


def connection_settings(
    config: MqttConfig,
    device_id: str,
    password: str,
    subscriptions: tuple[str, ...],
    will: tuple[str, Callable[[], bytes]],
) -> ConnectionSettings:
    """The broker connection of `[mqtt]`: its subscriptions, and its Last Will (topic, payload)."""
    tls = None
    if config.tls is not None:
        tls = TlsSettings(config.tls.ca_file, config.tls.cert_file, config.tls.key_file)
    return ConnectionSettings(
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
        subscriptions=subscriptions,
        will_topic=will[0],
        will_payload=will[1],
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
        keys: Keys | None = None,
        version: str = __version__,
        health: HealthSources | None = None,
        source: str = "<config>",
        custom_tools: CustomToolCatalog | None = None,
        audit: AuditTrail | None = None,
        outlets: Outlets | None = None,
        status_facts: Callable[[], dict[str, Any]] | None = None,
        signer: DeviceSigner | None = None,
    ) -> None:
        self.config = config
        self.source = source  # the config file, for error messages
        self.device_id = device_id
        self.registry = registry
        self.approvals = approvals
        self.db = db
        self._agent = agent
        # Or built by the first chat (`edgeclaw run` builds the loop on demand, see daemon.runtime).
        self._agent_factory = agent_factory
        self.outlets = outlets
        self.topics = DeviceTopics(config.topic_prefix, device_id, config.discovery_prefix)
        problems = [group_problem(g) for g in config.groups]
        if any(problems):
            raise ConfigErrors([ConfigError(source, "mqtt.groups", p) for p in problems if p])
        self.fleet = FleetTopics(config.topic_prefix, tuple(dict.fromkeys(config.groups)))
        self.keys = keys if keys is not None else Keys(config)  # no keys: nothing is signed
        self.settings = connection_settings(
            config,
            device_id,
            password,
            # admin/tools is always subscribed, so that even a refused admin command is answered.
            (*self.topics.subscriptions(admin=True, discovery=config.discovery), *self.fleet.subscriptions()),
            will=(self.topics.status, lambda: self.reporter.status_payload("offline")),
        )
        # The device's own key signs everything published (net/device_key.py); None: nothing is signed.
        self.signer = signer
        self.connection = Connection(
            self.settings, self._on_message, on_connect=self._on_connect, signer=signer
        )
        self.outbox = Outbox(db, config.outbox_max)
        self.ledger: RequestLedger[Route] = RequestLedger(db, config.dedup_window_s)
        self.sender = Sender(
            self.connection,
            self.outbox,
            RecentAnswers(config.resend_window_s, config.resend_max_messages, config.resend_max_bytes),
        )
        self.approver = MqttApprover(
            self.connection, self.topics.approval_request, enabled=self.keys.approver is not None
        )
        self.collector = TelemetryCollector(
            board, version, registry.stats, health or HealthSources(disk=Path(db.path).parent)
        )
        work = RequestWork(
            registry, self.connection, AdminTopics(registry, custom_tools, audit), lambda: self.agent
        )
        self.requests = RequestServer(
            config,
            reader=RequestReader(
                config, self.topics, self.fleet, self.keys, device_id, registry.policy.profile_members
            ),
            ledger=self.ledger,
            sender=self.sender,
            run=work.run,
            only_observes=registry.only_observes,
        )
        self.counters = self.requests.counters
        self.reporter = Reporter(
            config,
            topics=self.topics,
            fleet=self.fleet,
            device_id=device_id,
            board=board,
            version=version,
            registry=registry,
            connection=self.connection,
            sender=self.sender,
            outbox=self.outbox,
            collector=self.collector,
            counters=self.counters,
            audit=audit,
            status_facts=status_facts,
            signer=signer,
        )
        self.requests.after_answer = self.reporter.with_answer
        self.requests.on_bad_signature = self.reporter.bad_signature
        self._background: list[asyncio.Task[None]] = []
        self._runner: asyncio.Task[None] | None = None
        self._closing = False
        self._extensions: list[MqttExtension] = []

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

    @property
    def ha_components(self) -> Callable[[str], dict[str, dict[str, Any]]] | None:
        """The board's own Home Assistant entities, given a device id: set by the daemon when it
        carries them on this connection; they join the discovery message."""
        return self.reporter.ha_components

    @ha_components.setter
    def ha_components(self, components: Callable[[str], dict[str, dict[str, Any]]] | None) -> None:
        self.reporter.ha_components = components

    def telemetry_snapshot(self) -> dict[str, Any]:
        return self.reporter.telemetry_snapshot()

    # -- lifecycle -----------------------------------------------------------
    async def __aenter__(self) -> MqttChannel:
        try:
            self.connection.open()
        except (OSError, ssl.SSLError) as e:
            raise ConfigErrors(
                [ConfigError(self.source, "mqtt.tls", f"cannot use the TLS files: {e}")]
            ) from None
        self.requests.answer_unfinished()
        if self.keys.approver is not None:
            self.approvals.register(CHANNEL, self)
            self.approvals.register(ADMIN_CHANNEL, self)
        else:  # nobody on MQTT is entitled to approve: denied with the reason, nothing published
            self.approvals.refuse(CHANNEL, NO_APPROVER)
            self.approvals.refuse(ADMIN_CHANNEL, NO_APPROVER)
        if self.outlets is not None:
            self.outlets.register(CHANNEL, self)
        if self.config.events:
            self.reporter.start_events()
        loop = asyncio.get_running_loop()
        for extension in self._extensions:
            extension.start()
        self._runner = loop.create_task(self.connection.run(), name="mqtt-connection")
        if self.config.telemetry_interval_s > 0:
            self._background.append(loop.create_task(self.reporter.telemetry_loop(), name="mqtt-telemetry"))
        if self.ledger.enabled:
            self._background.append(loop.create_task(self.requests.housekeeping(), name="mqtt-housekeeping"))
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
        self.requests.closing = True
        if self.outlets is not None:
            self.outlets.unregister(CHANNEL, self)
        await self.requests.stop(STOP_GRACE_S)
        for task in self._background:
            task.cancel()
        self.reporter.tasks.cancel()
        if self._background:
            await asyncio.wait(self._background)
        await self.reporter.tasks.wait()
        self.reporter.stop_events()
        approver = None if self.keys.approver is None else self
        self.approvals.unregister(CHANNEL, approver)
        self.approvals.unregister(ADMIN_CHANNEL, approver)
        await self.sender.close()
        for extension in self._extensions:
            try:
                await extension.before_disconnect()
            except Exception:
                log.exception("stopping %r failed", extension)
        if self._runner is not None:
            await self.connection.stop(
                self._runner, (self.topics.status, self.reporter.status_payload("offline"))
            )
        log.info("MQTT channel stopped (%d message(s) left in the outbox)", self.outbox.depth)

    def status_snapshot(self) -> dict[str, Any]:
        """What `edgeclaw status` and the metrics show of this channel."""
        return {
            "connected": self.connection.connected,
            "broker": f"{self.config.host}:{self.config.port}",
            "outbox": self.outbox.depth,
        }

    def health_problem(self) -> str | None:
        """What keeps this channel from serving (the daemon's health check), or None."""
        if self.connection.connected:
            return None
        return f"not connected to the broker {self.config.host}:{self.config.port}"

    # -- the Channel protocol ------------------------------------------------
    async def send(self, reply: Reply) -> None:
        """Deliver a reply: to the route of the message it answers, else to `chat/out`."""
        route = Route(self.topics.chat_out)
        request_id = None
        if reply.in_reply_to is not None:
            route = reply.in_reply_to.meta.get("route", route)
            request_id = reply.in_reply_to.meta.get("id")
        self.requests.answer(route, encode(chat_answer(reply.text, reply.session, reply.ok, request_id)))

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

    async def to_target(self, target: str, message: Outgoing) -> str:
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

    # -- a scheduled job's output -------------------------------------------------
    def publish_under(self, subtopic: str, payload: dict[str, Any]) -> None:
        """`payload` on `{prefix}/{dev}/SUBTOPIC` (a checked topic level), through the store-and-forward
        sender like telemetry; ChannelNotRunning when the channel does not run."""
        if self._closing or self._runner is None:
            raise ChannelNotRunning("the MQTT channel is not running")
        self.reporter.publish_under(subtopic, payload)

    # -- inbound ---------------------------------------------------------------
    def _on_connect(self) -> None:
        self.reporter.on_connect()
        for extension in self._extensions:
            extension.on_connect()

    def _on_message(self, message: aiomqtt.Message) -> None:
        msg = Incoming.of(message)
        for extension in self._extensions:
            if extension.handles(msg.topic):
                extension.on_message(msg.topic, msg.payload, msg.user_properties, msg.retained)
                return
        kind = self.requests.reader.kind_of(msg.topic)
        if kind is not None:
            self.requests.take(msg, kind)
        elif msg.topic == self.topics.approval_response:
            self._on_approval(msg)
        elif msg.topic == self.topics.ha_status:
            if msg.payload.strip().lower() == b"online":
                self.reporter.home_assistant_online()
        else:
            log.debug("ignoring a message on %s", msg.topic)

    def _on_approval(self, msg: Incoming) -> None:
        """A decision for a pending approval, counted only when signed with the approver key.
        Answered only when the sender asked for an answer (a Response Topic); otherwise problems
        are logged."""
        result: dict[str, Any]
        try:
            if msg.retained:
                raise WireError("retained", "approval responses must not be retained")
            if self.keys.approver is None:
                raise WireError("unavailable", NO_APPROVER, peek_id(msg.payload))
            proof = self.keys.prove(msg, "approver")
            obj = parse_json_object(proof.body, "approval/response")
            check_fresh(obj, self.config.hmac_max_age_s)
            decision = parse_approval(obj)
            if self.approver.answer(decision, by=proof.caller()):
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
        if msg.response_topic is not None and self.requests.reader.route_problem(msg) is None:
            # Not through `answer`: an approval response is not one of the requests counted there.
            self.sender.send(Kind.ANSWER, msg.response_topic, encode(result), correlation=msg.correlation)
