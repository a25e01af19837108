"""Reading a command: which topic asks what, where its answer goes, and the request parsed once.

`RequestReader.read` takes a message off a command topic through every check — the Response
Topic, the retain flag, broadcast admin, the admin key, the size, the signature and its `ts` —
and returns the `Command` it asks for, or raises the `WireError` it is refused with.
"""

from __future__ import annotations

from collections.abc import Callable

from edgeclaw.agent.channel import InboundMessage
from edgeclaw.channels.mqtt.inbound import CHANNEL, Command, CommandKind, Incoming, session_key
from edgeclaw.channels.mqtt.keys import HOW_TO_ADMIN, Keys, forbidden
from edgeclaw.channels.mqtt.protocol import (
    ChatRequest,
    Route,
    check_fresh,
    parse_admin,
    parse_admin_call,
    parse_cancel,
    parse_chat,
    parse_json_object,
    parse_tool_call,
    peek_id,
    response_topic_problem,
)
from edgeclaw.channels.mqtt.topics import DeviceTopics, FleetTopics
from edgeclaw.config.schema import MqttConfig
from edgeclaw.net.wire import WireError

WHAT = {"tool": "tool/call", "cancel": "tool/cancel", "chat": "chat/in", "admin": "admin/tools"}


class RequestReader:
    """The command topics of one device (its own, the fleet's and its groups') and how each is read."""

    def __init__(
        self,
        config: MqttConfig,
        topics: DeviceTopics,
        fleet: FleetTopics,
        keys: Keys,
        device_id: str,
        profile_members: Callable[[str], frozenset[str]] = lambda profile: frozenset(),
    ) -> None:
        self.config = config
        self.keys = keys
        # The registry policy's: the tools a profile names (a caller's `profile`).
        self.profile_members = profile_members
        self.device_id = device_id
        t = topics
        self._kinds: dict[str, CommandKind] = {
            t.tool_call: "tool",
            t.tool_cancel: "cancel",
            t.chat_in: "chat",
            t.admin_tools: "admin",
            t.admin_cron: "admin",
            t.admin_gateway: "admin",
        }
        # The admin topics that are calls of a tool (the rest of `admin` is admin/tools).
        self._admin_calls: dict[str, str] = {
            t.admin_cron: "cron",
            t.admin_gateway: "gateway",
        }
        # Commands to the whole fleet or a group: the same handling, answered with our device id.
        self._fleet_topics: set[str] = set()
        for topic in fleet.tool_calls():
            self._kinds[topic] = "tool"
            self._fleet_topics.add(topic)
        for topic, what in fleet.admin().items():
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

    def kind_of(self, topic: str) -> CommandKind | None:
        """What a message on this topic asks for; None for a topic that takes no commands."""
        return self._kinds.get(topic)

    def route_problem(self, msg: Incoming) -> str | None:
        """Why the message's Response Topic is refused, or None (also when it has none)."""
        if msg.response_topic is None:
            return None
        return response_topic_problem(
            msg.response_topic, self.config.topic_prefix, self.config.discovery_prefix
        )

    def route(self, msg: Incoming, kind: CommandKind, problem: str | None) -> Route:
        """Where the answer goes: the Response Topic (unless refused), else the kind's result topic."""
        device = self.device_id if msg.topic in self._fleet_topics else None
        if msg.response_topic is None or problem is not None:
            return Route(self._fallbacks[kind], msg.correlation, device)
        return Route(msg.response_topic, msg.correlation, device)

    def read(self, msg: Incoming, kind: CommandKind, route: Route, route_problem: str | None) -> Command:
        """Check, authenticate and parse a command; WireError for whatever refuses it. Its caller is
        the proven identity (channels.mqtt.keys), never the `sender` it declares."""
        self._check(msg, kind, route_problem)
        proof = self.keys.prove(msg, "admin" if kind == "admin" else "command")
        body = proof.body
        caller = proof.caller()
        if kind == "chat":
            chat = parse_chat(body)
            if proof.signed:
                # Plain text carries no `ts`: signed chat must be JSON.
                stamped = parse_json_object(body, "chat/in") if body.lstrip().startswith(b"{") else {}
                check_fresh(stamped, self.config.hmac_max_age_s)
            if "operate" not in proof.roles:
                raise forbidden(caller, "operate", "chat", chat.id)
            message = self._chat_message(chat, route, msg, caller, self._ceiling(proof.profile))
            return Command(
                chat, route, caller, message, body if proof.signed else None, proof.roles, proof.profile
            )
        obj = parse_json_object(body, WHAT[kind])
        if proof.signed:
            check_fresh(obj, self.config.hmac_max_age_s)
        if kind == "tool":
            # Whether an observer's call only observes is the server's question (it knows the tools).
            return Command(parse_tool_call(obj), route, caller, roles=proof.roles, profile=proof.profile)
        if kind == "cancel":
            cancel = parse_cancel(obj)
            if not proof.roles & {"observe", "operate"}:
                raise forbidden(caller, "operate", "tool/cancel", cancel.id)
            return Command(cancel, route, caller, roles=proof.roles, profile=proof.profile)
        asked = (
            parse_admin_call(obj, self._admin_calls[msg.topic])
            if msg.topic in self._admin_calls
            else parse_admin(obj)
        )
        return Command(asked, route, caller, roles=proof.roles, profile=proof.profile)

    def _check(self, msg: Incoming, kind: CommandKind, route_problem: str | None) -> None:
        """The refusals that need no parsing: named by the id the payload seems to carry."""
        problem: tuple[str, str] | None = None
        if route_problem is not None:
            problem = (
                "bad_response_topic",
                f"refused Response Topic {msg.response_topic!r}: {route_problem}",
            )
        elif msg.retained:
            # A retained command would run again on every reconnect.
            problem = ("retained", "commands must not be published with the retain flag")
        elif kind == "admin" and msg.topic in self._fleet_topics and not self.config.broadcast_admin:
            problem = (
                "broadcast_refused",
                "admin commands are not taken by broadcast or group here: send them to the device's own "
                "admin topics (or set mqtt.broadcast_admin = true)",
            )
        elif kind == "admin" and not self.keys.admin_enabled():
            # No caller may administer: the admin topics are off. Never the command key instead.
            problem = ("admin_disabled", f"the admin topics are off on this device: {HOW_TO_ADMIN}")
        elif len(msg.payload) > self.config.max_payload_bytes:
            problem = (
                "too_large",
                f"the payload is {len(msg.payload)} bytes; the limit is {self.config.max_payload_bytes}",
            )
        if problem is not None:
            raise WireError(*problem, peek_id(msg.payload))

    def _ceiling(self, profile: str) -> frozenset[str] | None:
        """The tools a caller's profile admits (None: no profile of its own, the channel's rules)."""
        return self.profile_members(profile) if profile else None

    @staticmethod
    def _chat_message(
        chat: ChatRequest, route: Route, msg: Incoming, caller: str, ceiling: frozenset[str] | None
    ) -> InboundMessage:
        """The agent's view of a chat request. Its session belongs to the caller (`session_key`):
        the payload's `session`, else the topic the answer goes to (the Response Topic, else
        chat/in); never the declared `sender`, a label that anyone may claim."""
        conversation = route.topic if route.topic == msg.response_topic else msg.topic
        return InboundMessage(
            channel=CHANNEL,
            text=chat.text,
            chat_id=conversation,
            sender=chat.sender,
            session=session_key(caller, chat.session or conversation),
            peer_kind="direct",
            caller=caller,
            request_id=chat.id or "",
            meta={"route": route, "id": chat.id},
            tool_ceiling=ceiling,
        )
