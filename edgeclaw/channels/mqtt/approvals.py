"""Approvals over MQTT: publish the question on `approval/request`, wait for `approval/response`.

The channel registers this approver with the `ApprovalBroker` for channel
"mqtt", so a tool that needs approval for a call that came over MQTT asks
here. The broker owns the deadline (2 minutes by default; no answer = deny),
the audit record of every decision, and cancels the wait; this side only
matches answers to questions.

Whoever can publish a command must not be able to approve it, so an answer
counts only when it is signed with the approver key (`mqtt.approver_secret_*`,
checked by the channel before `answer` is called), never the command key.
Without an approver key nobody on MQTT is entitled to approve: the question
is not published and the call is denied, saying so. A question that cannot
be published (no broker) means nobody can be asked, which is a deny too.
"""

from __future__ import annotations

import asyncio
import logging

from edgeclaw.channels.mqtt.protocol import ApprovalAnswer, encode
from edgeclaw.net.mqtt_connection import Connection, PublishFailed
from edgeclaw.tools.approval import ApprovalRequest, ApprovalUnavailable, Verdict

log = logging.getLogger("edgeclaw.mqtt")

NO_APPROVER = (
    "approvals over MQTT are off: no approver key is configured (set mqtt.approver_secret_env or "
    "mqtt.approver_secret_file), and whoever sends a command may not approve it"
)


class MqttApprover:
    def __init__(self, connection: Connection, topic: str, *, enabled: bool = True) -> None:
        self.connection = connection
        self.topic = topic
        self.enabled = enabled  # False when no approver key is configured
        self._pending: dict[str, asyncio.Future[Verdict]] = {}

    @property
    def pending(self) -> list[str]:
        return list(self._pending)

    async def ask_approval(self, request: ApprovalRequest) -> Verdict | None:
        if not self.enabled:
            raise ApprovalUnavailable(NO_APPROVER)
        ctx = request.ctx
        question = {
            "id": request.id,
            "tool": request.tool,
            "summary": request.summary,
            "session": ctx.session_key,
            "expires_at": round(request.expires_at, 3),
            # So a backend can match the question to the request it (or someone) sent.
            "request_id": ctx.request_id or None,
            "sender": ctx.sender or None,
            "caller": ctx.identity,
            "channel": ctx.channel,
        }
        answer: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self._pending[request.id] = answer
        try:
            try:
                await self.connection.publish(self.topic, encode(question))
            except PublishFailed as e:
                log.warning("approval request %s could not be published: %s", request.id, e)
                return None
            return await answer
        finally:
            self._pending.pop(request.id, None)

    def answer(self, response: ApprovalAnswer, by: str) -> bool:
        """Deliver a decision made by `by` (the approver key's identity); False when no question
        with that id is waiting (expired, or never asked)."""
        waiting = self._pending.get(response.id)
        if waiting is None or waiting.done():
            return False
        waiting.set_result(Verdict(response.decision, by))
        return True
