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

The question carries the digest of the action it is about (`action_digest`, see
tools/approval.py), and an answer counts only when it names that same digest: a
decision made on a question someone else published in this device's name (another
action, a harmless summary) is refused (`wrong_action`) and the question keeps
waiting. The question itself is signed with the device's key (net/device_key.py),
so whoever shows it can tell it from such a forgery.
"""

from __future__ import annotations

import asyncio
import hmac
import logging

from edgeclaw.channels.mqtt.protocol import ApprovalAnswer, encode
from edgeclaw.net.mqtt_connection import Connection, PublishFailed
from edgeclaw.net.wire import WireError
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
        # Question id -> (the action's digest, the decision to come).
        self._pending: dict[str, tuple[str, asyncio.Future[Verdict]]] = {}

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
            # What an answer must name: the digest of the tool and the arguments to be approved.
            "action_digest": request.action_digest,
            # So a backend can match the question to the request it (or someone) sent.
            "request_id": ctx.request_id or None,
            "sender": ctx.sender or None,
            "caller": ctx.identity,
            "channel": ctx.channel,
        }
        answer: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self._pending[request.id] = (request.action_digest, answer)
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
        with that id is waiting (expired, or never asked). WireError("wrong_action") when the answer
        names another action than the question's: refused, and the question keeps waiting."""
        entry = self._pending.get(response.id)
        if entry is None or entry[1].done():
            return False
        digest, waiting = entry
        if not hmac.compare_digest(digest.encode(), response.action_digest.encode()):
            raise WireError(
                "wrong_action",
                f"approval response for {response.id!r} names the action {response.action_digest[:16]}..., "
                f"but the action waiting for approval is {digest[:16]}...: a decision counts only for the "
                "action asked about (was the question forged or changed?); nothing was decided",
                response.id,
            )
        waiting.set_result(Verdict(response.decision, by))
        return True
