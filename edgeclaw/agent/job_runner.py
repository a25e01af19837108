"""One run of a job: the call or the turn, as the job's owner, then the output to its targets.

A tool job goes through `Registry.execute` with its owner's context
(`tools.automation.authority`): the policy of that owner's channel, agent and
tools profile as it is *now*, within the tools the owner had when it made the
job, the owner's rate-limit bucket, approvals asked on the owner's channel
(denied when nobody there can answer), the sandbox, the audit record and the
event. A prompt job is a turn of the named agent in the job's own session
(`job:ID`), with the same owner and the same tools at most (the turn's
`tool_ceiling`): naming an agent whose policy is wider than the owner's own
gives the job nothing more. An owner who may no longer operate the device
gets its runs refused.

The output goes to each target in turn; a target that cannot take it (its
channel is off, the broker is away for longer than the outbox holds) is on
the run's record, the others still get it.

A run an edge started carries a `note` saying which (`GPIO 27 (button):
falling edge ...`): a prompt job's turn is told of it, and a tool job's
output starts with it, so a notice into a session (`message:session:KEY`)
says what happened before what the call found.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from edgeclaw.errors import ToolRefused
from edgeclaw.store.jobs import Job
from edgeclaw.tools.automation.authority import JobAuthority
from edgeclaw.tools.automation.targets import Delivery, DeliveryError, JobOutlets, TargetError, parse_target
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.registry import Registry

if TYPE_CHECKING:
    from edgeclaw.agent.loop import AgentLoop

log = logging.getLogger("edgeclaw.scheduler")

DETAIL_CHARS = 300


class JobRunner:
    def __init__(
        self,
        registry: Registry,
        outlets: JobOutlets,
        agents: Callable[[str], AgentLoop | None],
        authority: JobAuthority | None = None,
    ) -> None:
        self.registry = registry
        self.authority = authority or JobAuthority(registry.policy)
        self.outlets = outlets
        self.agents = agents

    async def run(
        self, job: Job, run_id: int, trigger: str, slot: float | None, note: str = ""
    ) -> tuple[str, str]:
        try:
            ctx = self.authority.run_context(job, str(run_id))
        except ToolRefused as e:
            return "refused", str(e)[: DETAIL_CHARS * 2]
        if job.kind == "tool":
            outcome = await self.registry.execute(job.tool, job.args, ctx)
            text = outcome.for_user if outcome.for_user is not None else outcome.for_llm
            if note:
                text = f"{note}\n{text}"
            ok, error = outcome.ok, outcome.error
            state = "ok" if ok else ("refused" if outcome.refused else "error")
            delivery = Delivery(
                job.id,
                job.name,
                ok,
                text,
                error,
                outcome.data,
                job.tool,
                slot,
                run_id,
                job.owner.caller,
                job.owner.channel,
            )
        else:
            agent = self.agents(job.agent)
            if agent is None:
                text, ok = f"no agent named {job.agent!r} on this device", False
            else:
                # With the agent, which loads it anyway: a scheduler of tool jobs never needs it.
                from edgeclaw.agent.channel import InboundMessage

                reply = await agent.handle(
                    InboundMessage(
                        channel=job.owner.channel,
                        text=f"{job.prompt}\n\n(This run was started by {note}.)" if note else job.prompt,
                        chat_id=job.owner.chat_id,
                        session=f"job:{job.id}",
                        peer_kind=job.owner.peer_kind,
                        caller=job.owner.caller,
                        request_id=ctx.request_id,
                        tool_ceiling=ctx.tool_ceiling,
                    )
                )
                text, ok = reply.text, reply.ok
            state = "ok" if ok else "error"
            error = None if ok else text
            delivery = Delivery(
                job.id, job.name, ok, text, error, None, "", slot, run_id, job.owner.caller, job.owner.channel
            )
        undelivered = await self.deliver_to(job.targets, delivery, ctx)
        detail = (error or "") if not ok else _first_line(text)
        if undelivered:
            detail = "; ".join([*([detail] if detail else []), *undelivered])
            if ok:
                state = "undelivered"
        return state, detail[: DETAIL_CHARS * 2]

    async def deliver_to(self, targets: Sequence[str], delivery: Delivery, ctx: ToolContext) -> list[str]:
        """Hand the output to every target; returns what could not be delivered, one line each."""
        problems: list[str] = []
        for text in targets:
            try:
                target = parse_target(text)
                if target.scheme == "message":
                    await self._message(ctx, target.rest, delivery)
                else:
                    await self.outlets.deliver(target, delivery)
            except (DeliveryError, TargetError) as e:
                problems.append(f"not delivered to {text}: {e}")
            except Exception as e:
                log.exception("delivering %s's output to %s failed", delivery.job_id, text)
                problems.append(f"not delivered to {text}: {type(e).__name__}: {e}")
        return problems

    async def _message(self, owner: ToolContext, rest: str, delivery: Delivery) -> None:
        """`message:CHANNEL[:TARGET]`: the message tool, called as the job's owner (its policy applies)."""
        if self.registry.get("message") is None:
            raise DeliveryError(
                "message targets are not implemented on this device yet (there is no message tool)"
            )
        channel, _, to = rest.partition(":")
        ctx = dataclasses.replace(owner, request_id=f"{owner.request_id}:message")
        args = {
            "channel": channel,
            "text": delivery.line()[:4000],
            "title": f"job {delivery.job_name or delivery.job_id}",
        }
        if to:
            args["target"] = to
        outcome = await self.registry.execute("message", args, ctx)
        if not outcome.ok:
            raise DeliveryError(outcome.error or "the message tool failed")


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:DETAIL_CHARS]
