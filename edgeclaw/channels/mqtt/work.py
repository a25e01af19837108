"""What an admitted request does: a tool call through the registry, a chat turn of the agent, an
admin request (channels.mqtt.admin). Each returns the request's answer; what a long one reports
as it runs (progress, partial answers) goes out on the answer's route before it."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from edgeclaw.agent.channel import InboundMessage
from edgeclaw.channels.mqtt.admin import AdminTopics
from edgeclaw.channels.mqtt.inbound import CHANNEL, Command, session_key, shown_session
from edgeclaw.channels.mqtt.partials import PartialPublisher
from edgeclaw.channels.mqtt.progress import ProgressPublisher
from edgeclaw.channels.mqtt.protocol import (
    AdminCall,
    AdminRequest,
    ChatRequest,
    Route,
    ToolCallRequest,
    chat_answer,
    chat_error,
    encode,
    tool_answer,
)
from edgeclaw.net.mqtt_connection import Connection, publish_properties
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.registry import Registry

if TYPE_CHECKING:
    from edgeclaw.agent.loop import AgentLoop


class RequestWork:
    """Runs commands: `run` is the answer of one."""

    def __init__(
        self,
        registry: Registry,
        connection: Connection,
        admin: AdminTopics,
        agent: Callable[[], AgentLoop | None],
    ) -> None:
        self.registry = registry
        self.connection = connection
        self.admin = admin
        self._agent = agent  # asked at each chat: the loop may be built on the first one

    async def run(self, command: Command) -> bytes:
        asked = command.asked
        if isinstance(asked, ToolCallRequest):
            return await self._tool(asked, command)
        if isinstance(asked, ChatRequest):
            assert command.message is not None
            return await self._chat(asked, command.message)
        assert isinstance(asked, AdminRequest | AdminCall)
        return await self.admin.run(asked, command.route, command.caller)

    def _publisher(self, route: Route) -> Callable[[bytes], Awaitable[None]]:
        """Publish on the answer's route at QoS 0, best effort (progress and partial answers)."""
        properties = publish_properties(None, route.correlation)

        async def publish(payload: bytes) -> None:
            await self.connection.publish(route.topic, payload, qos=0, properties=properties)

        return publish

    async def _tool(self, call: ToolCallRequest, command: Command) -> bytes:
        """One tool call, as its proven caller: the session, rate limit, processes and memory are the
        caller's (`sender` is only a label), within the caller's tools profile when it has one."""
        route, caller = command.route, command.caller
        publish = self._publisher(route)
        # What a long call reports as it runs goes out before its answer (channels.mqtt.progress).
        head = {"id": call.id, "tool": call.tool}
        progress = ProgressPublisher(publish, head, self.registry.scrubber.scrub, route.device)
        ctx = ToolContext(
            channel=CHANNEL,
            chat_id=route.topic,
            peer_kind="device",
            session_key=session_key(caller, call.session or "tools"),
            sender=call.sender,
            caller=caller,
            request_id=call.id,
            tool_ceiling=self.registry.policy.profile_members(command.profile) if command.profile else None,
            progress=progress,
        )
        try:
            outcome = await self.registry.execute(call.tool, call.args, ctx)
        finally:
            await progress.close()  # the last progress message is out before the answer is queued
        return encode(tool_answer(call.id, outcome))

    async def _chat(self, chat: ChatRequest, message: InboundMessage) -> bytes:
        """One agent turn; asked for with `stream`, its text goes out as partial answers first."""
        agent = self._agent()
        if agent is None:
            shown = shown_session(message.caller, message.session_key)
            return encode(chat_error(chat.id, shown, "no_agent", "chat is not available here"))
        route: Route = message.meta["route"]
        publish = self._publisher(route)
        # The turn's tool calls report their progress on the answer's route (channels.mqtt.progress).
        # Answers name the session as the caller does, without its identity (reader.shown_session).
        shown = shown_session(message.caller, message.session_key)
        head: dict[str, Any] = {"session": shown}
        if chat.id is not None:
            head["in_reply_to"] = chat.id
        progress = ProgressPublisher(publish, head, self.registry.scrubber.scrub, route.device)
        message = dataclasses.replace(message, on_progress=progress)
        if not chat.stream:
            try:
                reply = await agent.handle(message)
            finally:
                await progress.close()  # the last progress message is out before the answer is queued
            shown = shown_session(message.caller, reply.session)
            return encode(chat_answer(reply.text, shown, reply.ok, chat.id))
        partials = PartialPublisher(publish, shown, chat.id)
        try:
            reply = await agent.handle(dataclasses.replace(message, on_text=partials))
        finally:
            await progress.close()
            sent = await partials.close()  # the last partial is out before the final answer is queued
        answer = chat_answer(reply.text, shown_session(message.caller, reply.session), reply.ok, chat.id)
        answer["seq"] = sent
        return encode(answer)
