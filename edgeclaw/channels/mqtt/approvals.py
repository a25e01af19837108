"""Approvals over MQTT: publish the question on `approval/request`, wait for `approval/response`.

The channel registers this approver with the `ApprovalBroker` for channel
"mqtt", so a tool that needs approval for a call that came over MQTT asks
here. The broker owns the deadline (2 minutes by default; no answer = deny)
and cancels the wait; this side only matches answers to questions. A
question that cannot be published (no broker) means nobody can be asked,
which the broker turns into a deny.
"""

from __future__ import annotations

import asyncio
import logging

from edgeclaw.channels.mqtt.connection import Connection, PublishFailed
from edgeclaw.channels.mqtt.protocol import ApprovalAnswer, encode
from edgeclaw.tools.approval import ApprovalRequest, Decision

log = logging.getLogger("edgeclaw.mqtt")


class MqttApprover:
    def __init__(self, connection: Connection, topic: str) -> None:
        self.connection = connection
        self.topic = topic
        self._pending: dict[str, asyncio.Future[Decision]] = {}

    @property
    def pending(self) -> list[str]:
        return list(self._pending)

    async def ask_approval(self, request: ApprovalRequest) -> Decision | None:
        question = {
            "id": request.id,
            "tool": request.tool,
            "summary": request.summary,
            "session": request.ctx.session_key,
            "expires_at": round(request.expires_at, 3),
        }
        answer: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
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

    def answer(self, response: ApprovalAnswer) -> bool:
        """Deliver a decision; False when no question with that id is waiting (expired, or never asked)."""
        waiting = self._pending.get(response.id)
        if waiting is None or waiting.done():
            return False
        waiting.set_result(response.decision)
        return True
