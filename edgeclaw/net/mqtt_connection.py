"""The broker connection: one aiomqtt `Client`, reconnected forever with jittered backoff.

aiomqtt does not reconnect by itself, so one `Client` is reused in a
`while True: try: async with client: ... except MqttError: backoff` loop and
the subscriptions are made again on every connection. The session is
persistent (clean start off, a configurable session expiry), so QoS 1
commands sent while we are away are queued by the broker and reach us after
reconnecting.

Publishing is only attempted while connected; a publish that is waiting for
its PUBACK when the connection drops fails at once (rather than after
aiomqtt's timeout) so the caller can keep the message in its own outbox.

Each connection attempt gets a fresh `Client` (aiomqtt's client is reusable,
but only through its public constructor can the Last Will be given, and we
want a fresh timestamp in it each time). A fresh client also starts with no
unacknowledged publishes: paho would otherwise re-send those itself after a
reconnect while the outbox re-sends them too, delivering them twice. So the
outbox is the one place a message is retried from.

Inbound QoS 1 commands are acknowledged by us, not by paho: the PUBACK goes
out only after `on_message` has returned, and `on_message` records what the
request needs durably (the request ledger, an answer in the outbox) before it
returns. A daemon killed in between has not acknowledged the command, so the
broker delivers it again. This reaches into aiomqtt's private paho client
(`_client`): aiomqtt 2.x has no manual-acknowledgement option. `_GuardedClient`
reaches in once more, to mend a race in how aiomqtt watches the socket for
writing.

Every inbound message carries the DUP flag of its PUBLISH (`Delivery.dup`): the broker sets it on
a message it sends again, after a reconnect, because we had not acknowledged it; a publisher's fresh
publish reaches us with it clear (MQTT does not forward a publisher's DUP). aiomqtt drops the flag,
so `_GuardedClient` keeps it.

When an established connection ends, the listeners added with `when_lost` are called, before the
next attempt (the sender puts the answers the broker may have lost with it back in the outbox).

Broker problems keep the MQTT reason code (`BrokerError`), for the log,
`Connection.last_error` and `edgeclaw doctor` (`check_broker`).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import random
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import field
from typing import Any, Protocol

import aiomqtt
from aiomqtt.exceptions import MqttConnectError
from paho.mqtt.client import error_string as paho_error_string
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from edgeclaw.net.device_key import SIG_PROPERTY
from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.mqtt")

# The house backoff: 1 s doubling to 60 s.
BACKOFF_FIRST_S = 1.0
BACKOFF_CAP_S = 60.0
# A connection that lived at least this long resets the backoff; one the broker drops at once does not,
# so a broker that accepts and immediately kicks us is not hammered every second.
STABLE_CONNECTION_S = 10.0
# How long stop() waits for the connection task to end before cancelling it again.
STOP_RECANCEL_S = 0.5
# paho's default, and mosquitto's default receive maximum: more in flight is queued inside paho.
MAX_INFLIGHT = 20


class Delivery(aiomqtt.Message):
    """An inbound message with the DUP flag aiomqtt leaves out: True when the broker had sent it to
    us before (a redelivery of a message we never acknowledged), False for a first delivery."""

    dup: bool = False


class _GuardedClient(aiomqtt.Client):
    """aiomqtt's client, keeping each message's DUP flag, and watching the socket for writing only
    while it is still open.

    paho asks for the watch from its own thread; aiomqtt takes the descriptor's number then and
    has the loop add the watch later. When the broker dies in between, the socket is closed by
    the time the loop gets there, and `add_writer` fails inside the loop's callback (a traceback
    in the log, nothing else), or, were the number reused meanwhile, watches someone else's file.
    """

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        delivery = Delivery._from_paho_message(message)
        delivery.dup = bool(message.dup)
        self._queue.put_nowait(delivery)  # dispatched at once (see _dispatching_queue)

    def _on_socket_register_write(self, client: Any, userdata: Any, sock: Any) -> None:
        fileno = sock.fileno()

        def write() -> None:
            try:
                client.loop_write()
            except Exception as exc:  # a broken connection: the reader ends with this
                if not self._disconnected.done():
                    self._disconnected.set_exception(exc)

        def watch() -> None:
            if fileno < 0 or sock.fileno() != fileno:
                return  # closed meanwhile; the lost connection is noticed by the reader
            try:
                self._loop.add_writer(fileno, write)
            except OSError:
                return

        self._loop.call_soon_threadsafe(watch)


def _dispatching_queue(handler: Callable[[aiomqtt.Message], None]) -> type[asyncio.Queue[aiomqtt.Message]]:
    """An aiomqtt `queue_type` that queues nothing: each message goes to `handler` as it is read.

    aiomqtt puts every inbound message on an (unbounded) asyncio.Queue and hands it out through an
    iterator that costs a task and two loop turns per message. Our handler never blocks -- it
    parses, checks, records and starts a task, and answers "busy" past its own bound -- so it runs
    right in the socket's read callback instead.
    """

    class DispatchingQueue(asyncio.Queue):  # type: ignore[type-arg]
        def put_nowait(self, item: aiomqtt.Message) -> None:
            handler(item)

    return DispatchingQueue


class PublishFailed(Exception):
    """The message did not reach the broker (not connected, or the connection dropped before PUBACK)."""


class BrokerError(Exception):
    """A broker problem, with the MQTT reason code when the broker gave one (a CONNACK refusal, a
    DISCONNECT) -- e.g. 135 "Not authorized" -- rather than only a sentence."""

    def __init__(self, message: str, reason_code: int | None = None, reason_name: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason_code = reason_code
        self.reason_name = reason_name

    def __str__(self) -> str:
        if self.reason_code is None:
            return self.message
        return f"{self.message} (reason code {self.reason_code}: {self.reason_name})"

    @classmethod
    def of(cls, error: BaseException) -> BrokerError:
        """aiomqtt's (or the socket's) error as a BrokerError, keeping its reason code."""
        if isinstance(error, BrokerError):
            return error
        rc = getattr(error, "rc", None)
        if isinstance(error, MqttConnectError):
            what = "the broker refused the connection"
        elif isinstance(error, aiomqtt.MqttCodeError):
            what = error.args[0] if error.args and isinstance(error.args[0], str) else "MQTT error"
        else:
            what = str(error) or type(error).__name__
        if isinstance(rc, ReasonCode):
            return cls(what, rc.value, rc.getName())
        if isinstance(error, MqttConnectError) and isinstance(rc, int):
            # An MQTT 3.1.1 CONNACK return code (paho 2 usually converts these to ReasonCodes).
            return cls(what, rc, str(error).split(": ", 1)[-1])
        if isinstance(rc, int):
            # paho's own error numbers (no broker reason code): the connection was lost, refused, ...
            return cls(f"{what}: {paho_error_string(rc)}")
        return cls(what)


@dataclass(frozen=True)
class TlsSettings:
    ca_file: str = ""  # empty = the system's CA store
    cert_file: str = ""
    key_file: str = ""


@dataclass(frozen=True)
class ConnectionSettings:
    host: str
    port: int
    client_id: str
    protocol: str = "5"  # "5" or "3.1.1"
    username: str = ""
    password: str = ""
    keepalive_s: int = 60
    connect_timeout_s: float = 10.0
    session_expiry_s: int = 3600
    tls: TlsSettings | None = None
    subscriptions: tuple[str, ...] = ()
    # `$share/GROUP/...` filters (MQTT 5 only): made in a SUBSCRIBE of their own carrying the
    # Subscription Identifier SHARED_SUBSCRIPTION_ID, so `shared_delivery` tells their copies apart
    # from those of an ordinary subscription to the same topics.
    shared_subscriptions: tuple[str, ...] = ()
    will_topic: str = ""
    will_retain: bool = True  # the status Will is retained; Sparkplug's NDEATH is not
    # A session that ends with the connection (Sparkplug edge nodes); off = the persistent one.
    clean_start: bool = False
    # CONNECT's user properties (MCP over MQTT names the connection an MCP server with them).
    connect_user_properties: tuple[tuple[str, str], ...] = ()
    # Called before every connection attempt, so the Last Will carries a fresh timestamp.
    will_payload: Callable[[], bytes] | None = field(default=None, compare=False)

    @property
    def v5(self) -> bool:
        return self.protocol == "5"


class ReconnectBackoff:
    """Exponential backoff with "equal jitter": half the delay fixed, half random.

    The jitter spreads a fleet's reconnects after a broker restart instead of
    having every device knock at the same second.
    """

    def __init__(
        self,
        first_s: float = BACKOFF_FIRST_S,
        cap_s: float = BACKOFF_CAP_S,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.first_s = first_s
        self.cap_s = cap_s
        self._rng = rng
        self._attempt = 0

    def next(self) -> float:
        delay = min(self.cap_s, self.first_s * (2**self._attempt))
        if delay < self.cap_s:
            self._attempt += 1
        return delay / 2 + self._rng() * delay / 2

    def reset(self) -> None:
        self._attempt = 0


def _tls_context(tls: TlsSettings | None) -> ssl.SSLContext | None:
    """The TLS context for these settings (None: plain TCP). Raises OSError/ssl.SSLError for bad files."""
    if tls is None:
        return None
    context = ssl.create_default_context(cafile=tls.ca_file or None)
    if tls.cert_file:
        context.load_cert_chain(tls.cert_file, tls.key_file or None)
    return context


SHARED_SUBSCRIPTION_ID = 1


def shared_delivery(message: aiomqtt.Message) -> bool:
    """Whether `message` came through one of the settings' `shared_subscriptions`."""
    ids = getattr(message.properties, "SubscriptionIdentifier", None) if message.properties else None
    return isinstance(ids, list) and SHARED_SUBSCRIPTION_ID in ids


def _log_refused(topics: tuple[str, ...], granted: Any) -> None:
    refused = [
        f"{topic} ({code})"
        for topic, code in zip(topics, granted, strict=False)
        # paho 2 (VERSION2 callbacks) reports ReasonCodes for MQTT 3.1.1 too (0x80 = failure).
        if isinstance(code, ReasonCode) and code.is_failure
    ]
    if refused:
        log.error("the broker refused the subscription to %s: check its ACL", ", ".join(refused))


def _is_lost(error: aiomqtt.MqttError) -> bool:
    """aiomqtt's "Disconnected during message iteration", whose cause says why (a reason code)."""
    return type(error) is aiomqtt.MqttError and isinstance(error.__cause__, aiomqtt.MqttError)


def publish_properties(
    response_topic: str | None = None, correlation: bytes | None = None
) -> Properties | None:
    """MQTT 5 PUBLISH properties carrying a request's Correlation Data (and a Response Topic)."""
    if response_topic is None and correlation is None:
        return None
    props = Properties(PacketTypes.PUBLISH)
    if response_topic is not None:
        props.ResponseTopic = response_topic
    if correlation is not None:
        props.CorrelationData = correlation
    return props


class MessageSigner(Protocol):
    """Signs what a connection publishes (the device's key, net/device_key.py)."""

    @property
    def loaded(self) -> bool: ...
    def load(self) -> None: ...
    def sign(self, topic: str, payload: bytes, correlation: bytes | None = None) -> str | None: ...


def signed_properties(
    signer: MessageSigner, topic: str, payload: bytes, properties: Properties | None, packet: int
) -> Properties | None:
    """`properties` plus the `sig` user property over this message; a copy, so a caller that
    publishes the same properties again (a retry) never carries two signatures."""
    correlation = getattr(properties, "CorrelationData", None) if properties is not None else None
    signature = signer.sign(topic, payload, correlation if isinstance(correlation, bytes) else None)
    if signature is None:
        return properties
    signed = copy.copy(properties) if properties is not None else Properties(packet)
    signed.UserProperty = (SIG_PROPERTY, signature)  # appended to a new list: the original keeps its own
    return signed


class Connection:
    """Owns the client and its reconnect loop; hands every inbound message to `on_message`.

    `on_message` is called on the receive loop and must not block: it is the
    caller's job to queue real work elsewhere. `on_connect` is called after
    each successful connect and subscribe.
    """

    def __init__(
        self,
        settings: ConnectionSettings,
        on_message: Callable[[aiomqtt.Message], None],
        *,
        on_connect: Callable[[], None] | None = None,
        backoff: ReconnectBackoff | None = None,
        signer: MessageSigner | None = None,
    ) -> None:
        self.settings = settings
        self._on_message = on_message
        # Signs every message published (and the Last Will) when it has a key: MQTT 5 only.
        self.signer = signer
        self._on_connect = on_connect
        self.backoff = backoff or ReconnectBackoff()
        # The client of the current connection, or the one the next attempt will use.
        self._client: aiomqtt.Client | None = None
        self._client_used = False
        self._lost: asyncio.Future[None] | None = None  # resolved when the current connection ends
        self._connected = asyncio.Event()
        self._lost_listeners: list[Callable[[], None]] = []
        self.connects = 0  # successful connections since start
        self.last_error: BrokerError | None = None  # why the last attempt or connection ended
        self._stopping = False

    # -- state ---------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def wait_connected(self, within_s: float | None = None) -> bool:
        try:
            async with asyncio.timeout(within_s):
                await self._connected.wait()
        except TimeoutError:
            return False
        return True

    def when_lost(self, listener: Callable[[], None]) -> None:
        """Call `listener` each time an established connection ends (on the loop, before the next
        connection attempt); never for an attempt that failed, nor for the end `stop` makes."""
        self._lost_listeners.append(listener)

    def _tell_lost(self) -> None:
        for listener in self._lost_listeners:
            try:
                listener()
            except Exception:
                log.exception("error handling the lost connection")

    # -- the client ----------------------------------------------------------
    def open(self) -> None:
        """Build the first client now, so bad settings (an unreadable certificate) fail at start-up.

        Raises OSError or ssl.SSLError for TLS files that cannot be used.
        """
        if self._client is None:
            self._client = self._build_client()
            self._client_used = False

    def _next_client(self) -> aiomqtt.Client:
        """The client for this connection attempt: the one `open` built, else a fresh one."""
        if self._client is None or self._client_used:
            self._client = self._build_client()
        self._client_used = True
        return self._client

    def _build_client(self) -> aiomqtt.Client:
        s = self.settings
        properties = None
        if s.v5:
            properties = Properties(PacketTypes.CONNECT)
            # The broker keeps our subscriptions and queues QoS 1 commands this long after we go away.
            properties.SessionExpiryInterval = s.session_expiry_s
            if s.connect_user_properties:
                properties.UserProperty = list(s.connect_user_properties)
        tls_context = _tls_context(s.tls)
        will = None
        if s.will_topic and s.will_payload is not None:
            # Evaluated now, once per connection: the Last Will carries this connection's timestamp.
            payload = s.will_payload()
            will_properties = None
            if self.signer is not None and s.v5:
                will_properties = signed_properties(
                    self.signer, s.will_topic, payload, None, PacketTypes.WILLMESSAGE
                )
            will = aiomqtt.Will(
                s.will_topic, payload, qos=1, retain=s.will_retain, properties=will_properties
            )
        acknowledge: list[Callable[[int, int], object]] = []

        def dispatch(message: aiomqtt.Message) -> None:
            try:
                self._on_message(message)
            except Exception:
                # Never into paho: an exception there would tear down the connection.
                log.exception("error handling a message on %s", message.topic)
            # After the handler, which has recorded what the request needs (see the module doc).
            # Acknowledged even when handling failed: held back, a message that always fails would
            # come back on every reconnect and hold a slot of the broker's in-flight window forever.
            if message.qos > 0 and acknowledge:
                acknowledge[0](message.mid, message.qos)

        client = _GuardedClient(
            s.host,
            s.port,
            identifier=s.client_id,
            username=s.username or None,
            password=s.password or None,
            protocol=aiomqtt.ProtocolVersion.V5 if s.v5 else aiomqtt.ProtocolVersion.V311,
            # A persistent session unless asked for a clean one: MQTT 5 says so with clean start
            # off (paho refuses that flag for 3.1.1, where clean session off says the same).
            clean_session=None if s.v5 else s.clean_start,
            **({"clean_start": s.clean_start} if s.v5 else {}),
            keepalive=s.keepalive_s,
            timeout=s.connect_timeout_s,
            properties=properties,
            will=will,
            tls_context=tls_context,
            max_inflight_messages=MAX_INFLIGHT,
            logger=logging.getLogger("edgeclaw.mqtt.client"),
            # Requests and answers are small and answered at once: without TCP_NODELAY, Nagle's
            # algorithm meets the peer's delayed ACK and every round trip gains ~40 ms.
            socket_options=((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),),
            queue_type=_dispatching_queue(dispatch),
        )
        # aiomqtt warns past 10 pending publishes; we keep many in flight on purpose.
        client.pending_calls_threshold = 1 << 30
        # Private, and only here: aiomqtt 2.x offers no manual acknowledgement, paho 2 does.
        paho = client._client
        paho.manual_ack_set(True)
        acknowledge.append(paho.ack)
        return client

    async def _subscribe(self, client: aiomqtt.Client) -> None:
        topics = self.settings.subscriptions
        if self.settings.shared_subscriptions and self.settings.v5:
            await self._subscribe_shared(client)
        if not topics:
            return
        if self.settings.v5:
            # no_local: defence in depth -- were an answer ever published to one of our own command
            # topics (safe_response_topic refuses that), it would not come back to us as a command.
            # retain_as_published: keep the retain flag on live deliveries too, so a retained
            # command is recognised at once.
            options = SubscribeOptions(qos=1, noLocal=True, retainAsPublished=True)
            granted = await client.subscribe([(t, options) for t in topics])
        else:
            granted = await client.subscribe([(t, 1) for t in topics])
        # A broker ACL may refuse a subscription in the SUBACK, which aiomqtt does not raise for:
        # without this the device would sit connected and deaf to that topic, with nothing logged.
        _log_refused(topics, granted)

    async def _subscribe_shared(self, client: aiomqtt.Client) -> None:
        topics = self.settings.shared_subscriptions
        properties = Properties(PacketTypes.SUBSCRIBE)
        properties.SubscriptionIdentifier = SHARED_SUBSCRIPTION_ID
        # No Local must be off on a shared subscription (MQTT 5, 3.8.3.1: a protocol error otherwise).
        options = SubscribeOptions(qos=1, noLocal=False, retainAsPublished=True)
        granted = await client.subscribe([(t, options) for t in topics], properties=properties)
        _log_refused(topics, granted)

    async def run(self) -> None:
        """Connect, serve, reconnect; forever, until cancelled."""
        if self.signer is not None and not self.signer.loaded:
            # Off the loop: loading the key imports a package that takes a while, and the daemon's
            # start does not wait for it. The client `open` built has an unsigned Will: a new one.
            await asyncio.to_thread(self.signer.load)
            self._client_used = True
        while not self._stopping:
            started = time.monotonic()
            try:
                client = self._next_client()
                async with client:
                    if self._stopping:
                        # stop() cancelled us while connecting, and the cancellation was lost (see
                        # stop()): leave now rather than serve a connection nobody will close.
                        return
                    self._lost = asyncio.get_running_loop().create_future()
                    await self._subscribe(client)
                    self.connects += 1
                    self.last_error = None
                    self._connected.set()
                    log.info(
                        "connected to %s:%d as %s (MQTT %s)",
                        self.settings.host,
                        self.settings.port,
                        self.settings.client_id,
                        self.settings.protocol,
                    )
                    if self._on_connect is not None:
                        self._on_connect()
                    # Messages are dispatched as they are read (see _dispatching_queue), so this
                    # iterator yields nothing: it is how aiomqtt tells us the connection is gone.
                    async for _ in client.messages:
                        pass
            except aiomqtt.MqttError as e:
                cause = e.__cause__ if _is_lost(e) else None
                self.last_error = BrokerError.of(cause if cause is not None else e)
                if self._connected.is_set():
                    log.warning("connection to the broker lost: %s", self.last_error)
                else:
                    log.warning(
                        "cannot connect to %s:%d: %s", self.settings.host, self.settings.port, self.last_error
                    )
            except Exception as e:
                # Anything else (a TLS handshake failure surfacing as ssl.SSLError, a paho surprise)
                # must not end the loop: the device has to come back by itself.
                self.last_error = BrokerError(f"{type(e).__name__}: {e}")
                log.exception("unexpected error in the MQTT connection")
            finally:
                was_connected = self._connected.is_set()
                self._connected.clear()
                if self._lost is not None and not self._lost.done():
                    self._lost.set_result(None)
                if was_connected and not self._stopping:  # a clean stop loses nothing at the broker
                    self._tell_lost()
            if time.monotonic() - started >= STABLE_CONNECTION_S:
                self.backoff.reset()
            delay = self.backoff.next()
            log.info("reconnecting in %.1f s", delay)
            await asyncio.sleep(delay)

    # -- publishing ----------------------------------------------------------
    async def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        qos: int = 1,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> None:
        """Publish and wait for the broker's PUBACK; PublishFailed if it cannot be confirmed.

        A message that fails here may still have reached the broker (the PUBACK
        was lost): QoS 1 is at-least-once, and the request ledger on the other
        side of the wire is what keeps that from running anything twice.
        """
        client, lost = self._client, self._lost
        if client is None or lost is None or lost.done() or not self._connected.is_set():
            raise PublishFailed("not connected to the broker")
        if not self.settings.v5:
            properties = None
        elif self.signer is not None:
            properties = signed_properties(self.signer, topic, payload, properties, PacketTypes.PUBLISH)
        # When the connection drops, the wait for the PUBACK is cancelled at once (aiomqtt itself
        # would wait for its timeout). Cancelling this task, rather than racing a second task
        # against `lost`, keeps the common path at one task per message.
        me = asyncio.current_task()
        assert me is not None
        waiting = True
        dropped = False

        def on_lost(_: object) -> None:
            nonlocal dropped
            # Future callbacks run a loop turn after the result is set: by then this publish may be
            # done and the task doing something else, which must not be cancelled.
            if waiting:
                dropped = True
                me.cancel()

        lost.add_done_callback(on_lost)
        try:
            await client.publish(
                topic, payload, qos=qos, retain=retain, properties=properties, timeout=math.inf
            )
        except asyncio.CancelledError:
            # Ours (the connection dropped) unless someone else cancelled the task as well.
            if dropped and me.uncancel() == 0:
                raise PublishFailed(
                    "the connection dropped before the broker confirmed the message"
                ) from None
            raise
        except aiomqtt.MqttError as e:
            raise PublishFailed(str(e) or type(e).__name__) from e
        finally:
            waiting = False
            lost.remove_done_callback(on_lost)

    async def stop(self, runner: asyncio.Task[None], goodbye: tuple[str, bytes] | None = None) -> None:
        """Publish `goodbye` (topic, payload; retained) if connected, then disconnect cleanly.

        A clean DISCONNECT means the broker does not send the Last Will, so the
        offline status is published here by us instead.
        """
        self._stopping = True
        if goodbye is not None and self.connected:
            try:
                async with asyncio.timeout(5):
                    await self.publish(goodbye[0], goodbye[1], retain=True)
            except (PublishFailed, TimeoutError) as e:
                log.warning("could not publish the offline status: %s", e)
        # Cancelled again until it ends: on Python 3.11 asyncio.wait_for (aiomqtt waits for the CONNACK
        # with it) swallows a cancellation that lands as the awaited future completes, and the task
        # would serve on with nobody left to stop it. wait() rather than awaiting the task: its
        # CancelledError is expected, ours would not be.
        while not runner.done():
            runner.cancel()
            await asyncio.wait((runner,), timeout=STOP_RECANCEL_S)
        if not runner.cancelled() and runner.exception() is not None:
            log.debug("error while disconnecting: %s", runner.exception())


async def check_broker(settings: ConnectionSettings, timeout_s: float) -> BrokerError | None:
    """Connect once as the daemon would -- host, port, protocol, user name and password, TLS -- and
    disconnect. None when the broker accepted (CONNACK success); else why not, with the CONNACK
    reason code when the broker refused.

    Under a client id of its own (`{client_id}-doctor`) and a session that ends with the
    connection, so a check never takes over or disturbs the running daemon's persistent session.
    Raises OSError or ssl.SSLError for TLS files that cannot be used.
    """
    s = settings
    tls_context = _tls_context(s.tls)
    properties = None
    if s.v5:
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = 0
    client = aiomqtt.Client(
        s.host,
        s.port,
        identifier=f"{s.client_id}-doctor",
        username=s.username or None,
        password=s.password or None,
        protocol=aiomqtt.ProtocolVersion.V5 if s.v5 else aiomqtt.ProtocolVersion.V311,
        clean_session=None if s.v5 else True,
        timeout=timeout_s,
        properties=properties,
        tls_context=tls_context,
        logger=logging.getLogger("edgeclaw.mqtt.client"),
    )
    no_connack = BrokerError(
        f"no MQTT answer (CONNACK) from {s.host}:{s.port} within {timeout_s:g} s: "
        f"is this an MQTT broker{' with TLS' if s.tls is not None else ' without TLS'} on that port?"
    )
    try:
        # Our own bound too: aiomqtt's covers the CONNACK, not the TCP connect and TLS handshake.
        async with asyncio.timeout(timeout_s * 2), client:
            pass
    except TimeoutError:
        return no_connack
    except MqttConnectError as e:
        return BrokerError.of(e)
    except aiomqtt.MqttError as e:
        if str(e) == "Operation timed out":
            return no_connack
        return BrokerError.of(e)
    return None
