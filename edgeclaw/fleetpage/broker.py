"""The fleet page's side of the broker: what it reads into the window, and the commands it sends.

One connection (clean start: nothing of the page's is kept on the broker) reads
the devices' `status`, `health`, `events` and `approval/request` into the
`FleetWindow`, and the answers to the page's own commands:

- a tool call or a chat message to one device goes to its `tool/call` or
  `chat/in` with the MQTT 5 Response Topic `reply/{dev}/fleetpage/{server}` (the
  space docs/mqtt.md's ACL lets each device write) and random Correlation Data,
  signed with the command key the server holds (unsigned without one);
- an approval decision goes to `approval/response`, signed with the approver
  key (refused here, before anything is published, without one);
- an update (a rollout's, `fleetpage.update_rollout`) goes to `admin/gateway`,
  signed with the admin key (refused here without one: a page holds it only
  when its operator gives it one, apart from the keys it calls and approves with);
- each signature names its key (the `key` user property beside `hmac`): the page
  is the caller of that name on the devices, `mqtt:NAME` (docs/security.md), so
  its calls and decisions are its own, never another caller's;
- a broadcast goes to `{prefix}/_all/tool/call` or `_group/{group}/tool/call`
  with the Response Topic `reply/fleetpage/{server}/broadcast`, and collects
  every device's answer until all online devices (of the group) have answered
  or the wait ends.

With a `share_group`, the topics whose messages the history keeps (`health`, `events`,
`approval/request`) are subscribed a second time as `$share/GROUP/...`: of several pages in one
group on one broker, one gets each message's shared copy and writes it to the history they share
(`on_history`), while every page's window still takes every message from its ordinary subscription
(and the retained `status`, which a shared subscription is never sent). So every page shows every
device, event and approval, and the shared database holds each once.

Answers are matched by their Correlation Data, which only the server knows; each
request also expires on the broker when the wait for it ends, so a device that
comes back later does not run a command nobody waits for.

What the devices publish is judged against their pinned keys (`trust.DeviceKeys`, through the
window). An answer that does not verify with its device's pinned key is dropped (a broadcast
answer in another device's name included); a broadcast answer from a device with no pinned key is
kept, marked `"verified": false`. An approval is answered only for a question its device signed,
and the answer names that question's `action_digest`, so the device takes it for that action only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import field
from typing import Any

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgeclaw.fleetpage.window import FleetWindow, Update
from edgeclaw.net.device_key import signature_of
from edgeclaw.net.device_trust import UNVERIFIABLE, VERIFIED
from edgeclaw.net.mqtt_connection import Connection, ConnectionSettings, PublishFailed, shared_delivery
from edgeclaw.net.signing import KEY_PROPERTY, USER_PROPERTY, mac
from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.fleetpage")

MAX_WAITING = 256  # commands waiting for answers at once
MAX_ANSWER_BYTES = 256 * 1024
REPLY_ROOT = "reply"
DECISIONS = ("allow-once", "allow-always", "deny")


class CommandRefused(Exception):
    """A command the server does not send: the reason is for the page's user."""


@dataclass
class _Waiting:
    device: str  # "" for a broadcast
    answers: list[dict[str, Any]] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    expect: set[str] = field(default_factory=set)  # a broadcast's devices still to answer
    # A broadcast ends early once `expect` is empty; one that expected nobody (no retained status
    # seen, e.g. an ACL that hides them) collects for its whole wait instead.
    until_all: bool = False


class FleetBroker:
    def __init__(
        self,
        settings: ConnectionSettings,
        window: FleetWindow,
        *,
        command_secret: str = "",
        approver_secret: str = "",
        admin_secret: str = "",
        command_key_name: str = "",
        approver_key_name: str = "",
        admin_key_name: str = "",
        on_update: Callable[[list[Update]], None] = lambda updates: None,
        on_history: Callable[[list[Update]], None] = lambda updates: None,
        server_id: str = "",
        share_group: str = "",
    ) -> None:
        self.window = window
        self.prefix = window.prefix
        self.server_id = server_id or secrets.token_hex(6)
        self._command_key = command_secret.encode("utf-8")
        self._approver_key = approver_secret.encode("utf-8")
        self._admin_key = admin_secret.encode("utf-8")
        # The caller names its keys have on the devices ("" = unnamed: the devices' legacy key).
        self._key_names = {
            self._command_key: command_key_name,
            self._approver_key: approver_key_name,
            self._admin_key: admin_key_name,
        }
        self.on_update = on_update
        self.on_history = on_history  # the shared subscription's copies (with a share_group only)
        self.share_group = share_group
        self.reply_filter = f"{REPLY_ROOT}/+/fleetpage/{self.server_id}"
        self.broadcast_reply = f"{REPLY_ROOT}/fleetpage/{self.server_id}/broadcast"
        subscriptions = (*window.subscriptions, self.reply_filter, self.broadcast_reply)
        shared = (
            tuple(f"$share/{share_group}/{t}" for t in window.history_subscriptions) if share_group else ()
        )
        self.connection = Connection(
            dataclasses.replace(
                settings,
                subscriptions=subscriptions,
                shared_subscriptions=shared,
                clean_start=True,
                session_expiry_s=0,
            ),
            self._message,
        )
        self._waiting: dict[bytes, _Waiting] = {}

    @property
    def approvals_enabled(self) -> bool:
        return bool(self._approver_key)

    @property
    def signing(self) -> bool:
        return bool(self._command_key)

    @property
    def administering(self) -> bool:
        """Whether this page may send admin requests (updates): it holds an admin key."""
        return bool(self._admin_key)

    # -- inbound ------------------------------------------------------------------
    def _message(self, message: aiomqtt.Message) -> None:
        topic = message.topic.value
        payload = message.payload if isinstance(message.payload, bytes) else str(message.payload).encode()
        if topic.startswith(REPLY_ROOT + "/"):
            self._answer(topic, payload, message.properties)
            return
        props = message.properties
        correlation = getattr(props, "CorrelationData", None) if props is not None else None
        correlation = correlation if isinstance(correlation, bytes) else None
        signature = signature_of(getattr(props, "UserProperty", None) if props is not None else None)
        if shared_delivery(message):
            if history := self.window.history_of(topic, payload, signature, correlation):
                self.on_history(history)
            return
        updates = self.window.take(topic, payload, signature, correlation)
        if updates:
            self.on_update(updates)

    def _answer(self, topic: str, payload: bytes, properties: Properties | None) -> None:
        correlation = getattr(properties, "CorrelationData", None) if properties is not None else None
        waiting = self._waiting.get(correlation) if isinstance(correlation, bytes) else None
        if waiting is None or len(payload) > MAX_ANSWER_BYTES:
            return
        try:
            answer = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            return
        if not isinstance(answer, dict):
            return
        assert isinstance(correlation, bytes)
        signature = signature_of(getattr(properties, "UserProperty", None))
        if waiting.device:
            # Only from under the called device's own level (`reply/{dev}/...`), which the ACL of
            # docs/mqtt.md lets no other device write, and signed by it when its key is pinned.
            if topic != f"{REPLY_ROOT}/{waiting.device}/fleetpage/{self.server_id}":
                return
            trust = self.window.keys.judge(waiting.device, topic, payload, correlation, signature)
            if trust not in (VERIFIED, UNVERIFIABLE):
                log.info("dropped an answer in the name of %s that it did not sign", waiting.device)
                return
            waiting.answers.append(answer)
            waiting.done.set()
            return
        device = answer.get("device")
        if not isinstance(device, str) or any(a.get("device") == device for a in waiting.answers):
            return
        trust = self.window.keys.judge(device, topic, payload, correlation, signature)
        if trust not in (VERIFIED, UNVERIFIABLE):
            # Another client answering in this device's name: dropped, and the device's own answer
            # still counts when it comes.
            log.warning("dropped a broadcast answer in the name of %s that it did not sign", device)
            return
        waiting.answers.append({**answer, "verified": trust == VERIFIED})
        waiting.expect.discard(device)
        if waiting.until_all and not waiting.expect:
            waiting.done.set()

    # -- commands -------------------------------------------------------------------
    async def call(self, device: str, tool: str, args: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        request = {"id": _request_id(), "tool": tool, "args": args, "sender": "fleetpage"}
        return await self._one(device, "tool/call", request, self._command_key, timeout_s)

    async def chat(self, device: str, text: str, session: str, timeout_s: float) -> dict[str, Any]:
        request = {"id": _request_id(), "text": text, "session": session, "sender": "fleetpage"}
        return await self._one(device, "chat/in", request, self._command_key, timeout_s)

    async def admin(self, device: str, action: str, args: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """An `admin/gateway` request (e.g. `update`) to one device, signed with the admin key."""
        if not self._admin_key:
            raise CommandRefused(
                "this fleet page holds no admin key (mqtt.admin_secret_env or admin_secret_file): "
                "it cannot update devices"
            )
        request = {"id": _request_id(), "action": action, **args}
        return await self._one(device, "admin/gateway", request, self._admin_key, timeout_s)

    async def decide(self, device: str, question_id: str, decision: str, timeout_s: float) -> dict[str, Any]:
        if decision not in DECISIONS:
            raise CommandRefused(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")
        if not self._approver_key:
            raise CommandRefused(
                "this fleet page holds no approver key (mqtt.approver_secret_env or approver_secret_file): "
                "it cannot approve"
            )
        question = self.window.question(device, question_id)
        if question is None:
            raise CommandRefused(
                f"no approval request {question_id!r} signed by {device} is waiting: a question another "
                "client published in its name, or one from a device whose key is not pinned, is not "
                "answered from this page (docs/fleet.md#device-keys)"
            )
        digest = question.get("action_digest")
        if not isinstance(digest, str) or not digest:
            raise CommandRefused(
                f"{device}'s approval request names no action_digest (an older edgeclaw): not answered here"
            )
        request = {"id": question_id, "decision": decision, "action_digest": digest}
        answer = await self._one(device, "approval/response", request, self._approver_key, timeout_s)
        if answer.get("ok"):
            self.window.decided(device, question_id)
        return answer

    async def broadcast(
        self, group: str, tool: str, args: dict[str, Any], wait_s: float
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """Every answer within `wait_s`, and the devices online then that did not answer."""
        expect = set(self.window.online(group))
        base = f"{self.prefix}/_group/{group}" if group else f"{self.prefix}/_all"
        request = {"id": _request_id(), "tool": tool, "args": args, "sender": "fleetpage"}
        waiting = _Waiting("", expect=set(expect), until_all=bool(expect))
        await self._send(
            f"{base}/tool/call", request, self._command_key, self.broadcast_reply, waiting, wait_s
        )
        # Each answer names the broadcast it answers: the history keeps one answer a device for it.
        return [{**a, "request": request["id"]} for a in waiting.answers], sorted(waiting.expect)

    async def _one(
        self, device: str, what: str, request: dict[str, Any], key: bytes, timeout_s: float
    ) -> dict[str, Any]:
        if device not in self.window.devices:
            raise CommandRefused(f"no device {device!r} on the broker")
        reply = f"{REPLY_ROOT}/{device}/fleetpage/{self.server_id}"
        waiting = _Waiting(device)
        await self._send(f"{self.prefix}/{device}/{what}", request, key, reply, waiting, timeout_s)
        if not waiting.answers:
            raise TimeoutError(
                f"{device} did not answer within {timeout_s:g} s (offline, busy or not listening)"
            )
        return waiting.answers[0]

    async def _send(
        self,
        topic: str,
        request: dict[str, Any],
        key: bytes,
        reply: str,
        waiting: _Waiting,
        wait_s: float,
    ) -> None:
        if len(self._waiting) >= MAX_WAITING:
            raise CommandRefused(f"{MAX_WAITING} commands are already waiting for answers: try again shortly")
        correlation = secrets.token_bytes(16)
        body = json.dumps({**request, "ts": round(time.time(), 3)}, separators=(",", ":")).encode()
        props = Properties(PacketTypes.PUBLISH)
        props.ResponseTopic = reply
        props.CorrelationData = correlation
        props.MessageExpiryInterval = max(1, int(wait_s))  # nobody waits for it after that
        if key:
            props.UserProperty = (USER_PROPERTY, mac(key, topic, body, reply, correlation))
            if self._key_names.get(key):
                props.UserProperty = (KEY_PROPERTY, self._key_names[key])
        self._waiting[correlation] = waiting
        try:
            try:
                await self.connection.publish(topic, body, properties=props)
            except PublishFailed as e:
                raise CommandRefused(f"not sent: {e}") from None
            try:
                async with asyncio.timeout(wait_s):
                    await waiting.done.wait()
            except TimeoutError:
                pass
        finally:
            del self._waiting[correlation]

    # -- lifecycle ---------------------------------------------------------------------
    async def run(self) -> None:
        await self.connection.run()


def _request_id() -> str:
    return "fp-" + secrets.token_hex(8)
