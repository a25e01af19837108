"""Asking a person before a risky tool call runs.

Tools ask through the `ApprovalBroker`; channels (MQTT, the serial console,
the local terminal) register an `Approver` for their name when they start.
The question goes to the channel the call came from (`ctx.channel`). A channel
that cannot ask, an approver that fails, and a question nobody answers in
time all mean **deny**: fail closed.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from edgeclaw.tools.base import ToolContext

log = logging.getLogger("edgeclaw.approval")

DEFAULT_APPROVAL_TIMEOUT_S = 120.0


class Decision(StrEnum):
    ALLOW_ONCE = "allow-once"
    ALLOW_ALWAYS = "allow-always"
    DENY = "deny"

    @property
    def allows(self) -> bool:
        return self is not Decision.DENY


@dataclass(frozen=True)
class ApprovalRequest:
    id: str
    tool: str
    summary: str  # what will run, as the person should see it (already scrubbed by the caller)
    ctx: ToolContext
    expires_at: float  # wall clock

    @property
    def seconds_left(self) -> float:
        return max(0.0, self.expires_at - time.time())


class Approver(Protocol):
    """A channel's way of putting the question to the person on that channel."""

    async def ask_approval(self, request: ApprovalRequest) -> Decision | None:
        """The person's decision, or None when nobody could be asked. May be cancelled at the deadline."""
        ...


class ApprovalBroker:
    def __init__(self, timeout_s: float = DEFAULT_APPROVAL_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._approvers: dict[str, Approver] = {}

    def register(self, channel: str, approver: Approver) -> None:
        self._approvers[channel] = approver

    def unregister(self, channel: str, approver: Approver | None = None) -> None:
        if approver is None or self._approvers.get(channel) is approver:
            self._approvers.pop(channel, None)

    async def request(
        self, tool: str, summary: str, ctx: ToolContext, timeout_s: float | None = None
    ) -> tuple[Decision, str]:
        """Ask and wait. Returns the decision and a reason fit for an error message when it is a deny."""
        approver = self._approvers.get(ctx.channel)
        if approver is None:
            return Decision.DENY, f"approval required, and channel {ctx.channel!r} cannot ask anyone"
        timeout = self.timeout_s if timeout_s is None else timeout_s
        request = ApprovalRequest(
            id=secrets.token_hex(8), tool=tool, summary=summary, ctx=ctx, expires_at=time.time() + timeout
        )
        try:
            async with asyncio.timeout(timeout):
                decision = await approver.ask_approval(request)
        except TimeoutError:
            return Decision.DENY, f"approval request {request.id} timed out after {timeout:g} s"
        except Exception:
            log.exception("approver for channel %s failed", ctx.channel)
            return Decision.DENY, "approval could not be asked (the channel failed)"
        if decision is None:
            return Decision.DENY, "nobody could be asked for approval"
        if not decision.allows:
            return Decision.DENY, "denied by the person asked"
        return decision, ""
