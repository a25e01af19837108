"""The other devices on the broker, for the `nodes` tool: their retained status and health, and
calls of their tools.

Carried on the MQTT channel's connection (`MqttChannel.extend`). It subscribes
to `{prefix}/+/status` and `{prefix}/+/health` (both retained, so the broker
hands over every device's last word at each connect) and to the answers meant
for this device, `reply/+/nodes/{dev}`.

A call is an ordinary `tool/call` to the peer, with a fresh random id,
`reply/{peer}/nodes/{dev}` as its MQTT 5 Response Topic and the id as its
Correlation Data,
signed with this device's command key (the peer's channel sees the caller as
"mqtt:NAME" and applies its own policy to it). The peer answers exactly
once; the answer is matched by the id it echoes. Without a command key the call
goes unsigned (a peer that requires signatures answers `bad_signature`, which
comes back as the call's error). Answers need a Response Topic, so calls need
MQTT 5; listing works under 3.1.1 too.

The answer is taken only from the topic under the called peer's own level
(`reply/{peer}/...`) and only with the id of a call waiting for that peer. With
the broker ACL of docs/mqtt.md (a device may write only `reply/{its id}/#`),
no other device can pose as the peer's answer; without ACLs, whoever can
publish could, if they knew the call's id (128 random bits, sent to the peer).

Beyond the broker, every peer's messages are checked against its device key
(net/device_trust.py: pinned at first sight in `peer-device-keys` in the state
directory): a status or health not signed with the peer's pinned key is dropped
(the one before it stays), and so is an answer, which must be signed over its
call's Correlation Data. A peer with no key pinned (it signs nothing: an older
edgeclaw, MQTT 3.1.1) is listed as `unverifiable` and is not called, unless
`[tools.nodes] unsigned_peers = true` takes its answers, marked unverified.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Sequence
from typing import Any

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgeclaw.channels.mqtt.topics import DeviceTopics
from edgeclaw.net.device_key import signature_of, verify
from edgeclaw.net.device_trust import FORGED, KEY_CHANGED, UNVERIFIABLE, DeviceKeys
from edgeclaw.net.mqtt_connection import Connection, PublishFailed
from edgeclaw.net.signing import USER_PROPERTY, mac
from edgeclaw.tools.nodes.tool import Peer, PeerUnavailable

log = logging.getLogger("edgeclaw.mqtt.peers")

MAX_PEERS = 4096  # devices remembered; beyond that new ones are ignored (and logged once)
MAX_REPORT_BYTES = 64 * 1024  # a status or health message larger than this is not kept
MAX_WAITING = 64  # calls waiting for an answer at once
# Answers to a device go under the answering device's level of this root (`reply/{peer}/...`), the
# space docs/mqtt.md's broker ACL gives each device for its answers.
REPLY_ROOT = "reply"


class PeerDirectory:
    """The peers seen on the broker and the calls waiting for their answers (a `PeerLink`)."""

    def __init__(
        self,
        connection: Connection,
        topics: DeviceTopics,
        *,
        command_secret: str = "",
        v5: bool = True,
        keys: DeviceKeys | None = None,
        unsigned_peers: bool = False,
    ) -> None:
        self.connection = connection
        self.keys = keys if keys is not None else DeviceKeys()
        self.unsigned_peers = unsigned_peers
        self.topics = topics
        self._secret = command_secret.encode("utf-8") if command_secret else b""
        self._v5 = v5
        self._head = topics.prefix.split("/")
        self.reply_filter = f"{REPLY_ROOT}/+/nodes/{topics.device}"
        self._status: dict[str, dict[str, Any]] = {}
        self._health: dict[str, dict[str, Any]] = {}
        self._trust: dict[str, str] = {}  # device -> the verdict on its latest status
        self._dropped_logged: set[tuple[str, str]] = set()
        # Call id -> (the peer called, its answer to come).
        self._waiting: dict[str, tuple[str, asyncio.Future[dict[str, Any]]]] = {}
        self._full_logged = False

    # -- PeerLink ------------------------------------------------------------
    @property
    def device(self) -> str:
        return self.topics.device

    def peers(self) -> Sequence[Peer]:
        names = sorted(set(self._status) | set(self._health))
        return [
            Peer(n, self._status.get(n), self._health.get(n), self._trust.get(n, UNVERIFIABLE)) for n in names
        ]

    async def call(self, peer: str, tool: str, args: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        if peer == self.device:
            raise PeerUnavailable(f"{peer!r} is this device: call the tool directly, not through nodes")
        if not self._v5:
            raise PeerUnavailable(
                'calling a peer needs MQTT 5 (mqtt.protocol = "5"): its answer comes back on a Response Topic'
            )
        if not self.connection.connected:
            raise PeerUnavailable(f"cannot call {tool} on {peer}: not connected to the broker")
        if self._peer_key(peer) is None and not self.unsigned_peers:
            raise PeerUnavailable(
                f"peer {peer!r} cannot be verified (no device key pinned for it: it signs nothing, or its "
                "signed status has not been seen), so anyone on the broker could answer in its name: not "
                "called ([tools.nodes] unsigned_peers = true takes such answers, marked unverified)"
            )
        if len(self._waiting) >= MAX_WAITING:
            raise PeerUnavailable(
                f"cannot call {tool} on {peer}: {MAX_WAITING} peer calls are already waiting"
            )
        request_id = secrets.token_hex(16)
        request = {
            "id": request_id,
            "tool": tool,
            "args": args,
            "sender": self.device,
            "ts": round(time.time(), 3),
        }
        payload = json.dumps(request, separators=(",", ":")).encode("utf-8")
        topic = DeviceTopics(self.topics.prefix, peer).tool_call
        reply_topic = self.reply_topic(peer)
        correlation = request_id.encode("ascii")
        props = Properties(PacketTypes.PUBLISH)
        props.ResponseTopic = reply_topic
        props.CorrelationData = correlation
        if self._secret:
            props.UserProperty = (
                USER_PROPERTY,
                mac(self._secret, topic, payload, reply_topic, correlation),
            )
        # The request expires with the wait: a peer that comes back later must not run a call whose
        # caller has given up on it.
        props.MessageExpiryInterval = max(1, int(timeout_s + 0.999))
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = (peer, answer)
        try:
            try:
                await self.connection.publish(topic, payload, qos=1, properties=props)
            except PublishFailed as e:
                raise PeerUnavailable(f"cannot call {tool} on {peer}: {e}") from None
            try:
                async with asyncio.timeout(timeout_s):
                    return await answer
            except TimeoutError:
                raise PeerUnavailable(
                    f"peer {peer!r} did not answer {tool} within {timeout_s:g} s (offline, busy, or not "
                    "listening on its tool/call)"
                ) from None
        finally:
            self._waiting.pop(request_id, None)

    def reply_topic(self, peer: str) -> str:
        """Where `peer` answers this device: under the peer's own level, which the broker's ACL lets
        only the peer write."""
        return f"{REPLY_ROOT}/{peer}/nodes/{self.device}"

    def _answering_peer(self, topic: str) -> str | None:
        levels = topic.split("/")
        if len(levels) == 4 and levels[0] == REPLY_ROOT and levels[2:] == ["nodes", self.device]:
            return levels[1]
        return None

    # -- MqttExtension ---------------------------------------------------------
    def subscriptions(self) -> list[str]:
        prefix = self.topics.prefix
        return [f"{prefix}/+/status", f"{prefix}/+/health", self.reply_filter]

    def connect_properties(self) -> list[tuple[str, str]]:
        return []

    def _report(self, topic: str) -> tuple[str, str] | None:
        """(device, "status" | "health") for a device's report topic, else None."""
        levels = topic.split("/")
        head = len(self._head)
        if len(levels) != head + 2 or levels[:head] != self._head:
            return None
        device, what = levels[head], levels[head + 1]
        if what not in ("status", "health") or device.startswith("_") or device == self.device:
            return None
        return device, what

    def handles(self, topic: str) -> bool:
        return self._answering_peer(topic) is not None or self._report(topic) is not None

    def on_message(
        self, topic: str, payload: bytes, user_properties: list[tuple[str, str]] | None, retained: bool
    ) -> None:
        peer = self._answering_peer(topic)
        if peer is not None:
            self._on_answer(peer, topic, payload, signature_of(user_properties))
            return
        report = self._report(topic)
        if report is None:
            return
        device, what = report
        table = self._status if what == "status" else self._health
        if not payload:  # a retained message cleared: the device is gone from the broker
            table.pop(device, None)
            if what == "status":
                self._trust.pop(device, None)
            return
        if len(payload) > MAX_REPORT_BYTES:
            log.debug("ignoring a %d-byte %s of %s", len(payload), what, device)
            return
        try:
            value = json.loads(payload)
        except ValueError:
            return
        if not isinstance(value, dict):
            return
        if device not in table and len(self._status) + len(self._health) >= 2 * MAX_PEERS:
            if not self._full_logged:
                log.warning("more than %d devices on the broker: new ones are not listed", MAX_PEERS)
                self._full_logged = True
            return
        announced = value.get("device_key") if what == "status" else None
        signature = signature_of(user_properties)
        verdict = self.keys.judge(device, topic, payload, None, signature, announced=announced)
        if verdict in (FORGED, KEY_CHANGED):
            self._log_dropped(device, f"a {what} not signed with its pinned key ({verdict})")
            return
        table[device] = value
        if what == "status":
            self._trust[device] = verdict

    def _peer_key(self, peer: str) -> bytes | None:
        return None if self.keys.problem else self.keys.pinned(peer)

    def _log_dropped(self, device: str, what: str) -> None:
        if (device, what) not in self._dropped_logged:
            self._dropped_logged.add((device, what))
            log.warning("dropped %s from the broker in the name of %s", what, device)

    def _on_answer(self, peer: str, topic: str, payload: bytes, signature: str | None) -> None:
        try:
            answer = json.loads(payload)
        except ValueError:
            return
        if not isinstance(answer, dict):
            return
        request_id = answer.get("id")
        entry = self._waiting.get(request_id) if isinstance(request_id, str) else None
        if entry is None or entry[0] != peer or entry[1].done():
            # Late (the call timed out), repeated, or not from the peer that was called.
            log.debug("an answer from %s for no call waiting for it", peer)
            return
        assert isinstance(request_id, str)
        key = self._peer_key(peer)
        # Signed over the call's Correlation Data (its id): a genuine answer to another call does not
        # verify here. A forged answer is dropped, so the peer's own can still arrive.
        verified = key is not None and verify(key, topic, payload, request_id.encode("ascii"), signature)
        if not verified and (key is not None or not self.unsigned_peers):
            self._log_dropped(peer, "an answer not signed with its device key")
            return
        answer["verified"] = verified  # what the peer's payload says of this is not taken
        entry[1].set_result(answer)

    def start(self) -> None:
        pass

    def on_connect(self) -> None:
        pass

    async def before_disconnect(self) -> None:
        for _, waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_exception(PeerUnavailable("the MQTT channel stopped before the peer answered"))
