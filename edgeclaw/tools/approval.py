"""Asking a person before a risky tool call runs.

Tools ask through the `ApprovalBroker`; channels (MQTT, the serial console,
the local terminal) register an `Approver` for their name when they start.
The question goes to the channel the call came from (`ctx.channel`). A channel
that cannot ask, an approver that fails, and a question nobody answers in
time all mean **deny**: fail closed.

Every question and every decision (who asked, for which request, who decided
or why nobody could) goes to the audit trail, so all channels' approvals are
on record in one form: one info line on `edgeclaw.audit` and an `approval`
event on MQTT `events`. The summary is not in the event: it quotes the
command, an argument value.

Each question names the action it is about by a digest (`action_digest`): SHA-256 of the
canonical JSON of ``{"tool": TOOL, "args": ARGS}`` (keys sorted, no spaces, UTF-8), where ARGS
is what is being approved (for a shell command: ``{"command": COMMAND}``). A channel whose
answers come from elsewhere (MQTT) takes an answer only when it names that digest, so a decision
made for one action never lets another run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Protocol

from edgeclaw.records import dataclass
from edgeclaw.tools.audit import AuditTrail
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


def action_digest(tool: str, args: Mapping[str, Any]) -> str:
    """The hex SHA-256 of the canonical action: ``{"tool", "args"}`` as JSON with sorted keys."""
    import hashlib  # at the first question asked, not at every start

    canonical = json.dumps(
        {"tool": tool, "args": dict(args)}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class ApprovalRequest:
    """A question to a person: may this tool call run? Answered once, or it expires."""

    id: str
    tool: str
    summary: str  # what will run, as the person should see it (already scrubbed by the caller)
    ctx: ToolContext
    expires_at: float  # wall clock
    action_digest: str = ""  # of the tool and the arguments approved (`action_digest`)

    @property
    def seconds_left(self) -> float:
        return max(0.0, self.expires_at - time.time())


@dataclass(frozen=True)
class Verdict:
    """A decision and who made it, for channels where the approver is not simply the person on the
    channel (MQTT: the holder of the approver key)."""

    decision: Decision
    by: str


class ApprovalUnavailable(Exception):
    """Raised by an approver that must not ask on this channel; the message says why (it becomes
    the deny reason the caller sees)."""


class Approver(Protocol):
    """A channel's way of putting the question to the person on that channel."""

    async def ask_approval(self, request: ApprovalRequest) -> Decision | Verdict | None:
        """The person's decision (a bare Decision: decided by the person on the calling channel),
        or None when nobody could be asked. May be cancelled at the deadline."""
        ...


class ApprovalBroker:
    def __init__(
        self, timeout_s: float = DEFAULT_APPROVAL_TIMEOUT_S, audit: AuditTrail | None = None
    ) -> None:
        self.timeout_s = timeout_s
        self.audit = audit if audit is not None else AuditTrail()
        self._approvers: dict[str, Approver] = {}
        self._refusals: dict[str, str] = {}  # channels whose approvals are off, and why

    def register(self, channel: str, approver: Approver) -> None:
        self._refusals.pop(channel, None)
        self._approvers[channel] = approver

    def refuse(self, channel: str, reason: str) -> None:
        """Approvals on this channel are off: deny every question with `reason`, asking nobody."""
        self._approvers.pop(channel, None)
        self._refusals[channel] = reason

    def unregister(self, channel: str, approver: Approver | None = None) -> None:
        if approver is None or self._approvers.get(channel) is approver:
            self._approvers.pop(channel, None)
            self._refusals.pop(channel, None)

    async def request(
        self,
        tool: str,
        summary: str,
        ctx: ToolContext,
        timeout_s: float | None = None,
        *,
        args: Mapping[str, Any] | None = None,
    ) -> tuple[Decision, str]:
        """Ask and wait. Returns the decision and a reason fit for an error message when it is a deny.

        `args` is what is being approved (digested into the question's `action_digest`)."""
        import secrets  # at the first question asked, not at every start

        timeout = self.timeout_s if timeout_s is None else timeout_s
        request = ApprovalRequest(
            id=secrets.token_hex(8),
            tool=tool,
            summary=summary,
            ctx=ctx,
            expires_at=time.time() + timeout,
            action_digest=action_digest(tool, args or {}),
        )
        refusal = self._refusals.get(ctx.channel)
        if refusal is not None:
            return self._decided(request, "unavailable", refusal)
        approver = self._approvers.get(ctx.channel)
        if approver is None:
            return self._decided(
                request, "unavailable", f"approval required, and channel {ctx.channel!r} cannot ask anyone"
            )
        self._record(request, "asked", expires_at=round(request.expires_at, 3))
        try:
            async with asyncio.timeout(timeout):
                answer = await approver.ask_approval(request)
        except TimeoutError:
            return self._decided(
                request, "timeout", f"approval request {request.id} timed out after {timeout:g} s"
            )
        except ApprovalUnavailable as e:
            return self._decided(request, "unavailable", str(e))
        except Exception:
            log.exception("approver for channel %s failed", ctx.channel)
            return self._decided(request, "failed", "approval could not be asked (the channel failed)")
        if answer is None:
            return self._decided(request, "unavailable", "nobody could be asked for approval")
        if isinstance(answer, Verdict):
            verdict, who = answer, answer.by
        else:  # the person on the calling channel
            verdict, who = Verdict(answer, ctx.identity), "the person asked"
        if not verdict.decision.allows:
            return self._decided(request, "deny", f"denied by {who}", by=verdict.by)
        self._record(request, verdict.decision.value, by=verdict.by)
        return verdict.decision, ""

    def _decided(
        self, request: ApprovalRequest, decision: str, reason: str, *, by: str | None = None
    ) -> tuple[Decision, str]:
        """A deny, on record with its reason."""
        self._record(request, decision, by=by, reason=reason)
        return Decision.DENY, reason

    def _record(self, request: ApprovalRequest, decision: str, **fields: Any) -> None:
        ctx = request.ctx
        self.audit.emit(
            "approval",
            decision=decision,
            approval=request.id,
            tool=request.tool,
            channel=ctx.channel,
            caller=ctx.identity,
            session=ctx.session_key,
            request_id=ctx.request_id or None,
            **fields,
        )
