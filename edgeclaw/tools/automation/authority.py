"""What a job may do: its owner's tools, whatever agent it names.

A job acts for its owner. Its owner's tools are recorded when the job is made
(`record`: the policy of the owner's channel and agent, within the caller's own
tools profile, as `PolicyEngine.allowed` gave them to the call that made it)
and evaluated again at every run (`run_context`): the run's calls stay within
the intersection of both, the `tool_ceiling` a subagent gets from the session
that spawned it. A prompt job naming another agent (`agent: "ops"`) runs that
agent's turn, but the turn's tools never go beyond its owner's: a caller whose
own agent denies `exec` cannot get `exec` by naming an agent that allows it, and a
caller whose roles or profile were narrowed since gets the narrower set.

Administrators' jobs (the local CLI, the signed `admin/cron` topic:
`ADMIN_CHANNELS`) have no ceiling: they run with the full policy of the agent
they name, as they always did.
"""

from __future__ import annotations

from collections.abc import Callable

from edgeclaw.errors import ToolRefused
from edgeclaw.store.jobs import Job, Owner
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.policy import PolicyEngine, PolicyNameError

# Channels whose callers administer the device: they see and change every job.
ADMIN_CHANNELS = frozenset({"cli", "mqtt-admin"})

# identity -> the tools profile the caller has now ("" = its channel's rules), or None when it may
# no longer have anything run for it (it is no longer a caller of the device, or lost the operate role).
CallerProfile = Callable[[str], str | None]


def owner_context(job: Job, request: str) -> ToolContext:
    """The context a job's calls run in: its owner's identity, channel and conversation, its own
    session, and the tools its owner had when it made the job (`run_context` narrows them to now)."""
    o = job.owner
    return ToolContext(
        channel=o.channel,
        chat_id=o.chat_id,
        peer_kind=o.peer_kind,
        session_key=f"job:{job.id}",
        agent_id=o.agent,
        caller=o.caller,
        request_id=f"job:{job.id}:{request}",
        tool_ceiling=o.ceiling,
    )


class JobAuthority:
    """Records an owner's tools when a job is made and works them out again when it runs."""

    def __init__(self, policy: PolicyEngine, profile_of: CallerProfile = lambda identity: "") -> None:
        self.policy = policy
        self.profile_of = profile_of

    def record(self, ctx: ToolContext) -> frozenset[str] | None:
        """The ceiling a job made by this call keeps: the tools the caller may use now (None for an
        administrator, whose jobs keep its full authority)."""
        if ctx.channel in ADMIN_CHANNELS:
            return None
        return self.policy.allowed(ctx)

    def run_context(self, job: Job, request: str) -> ToolContext:
        """The context of one run: the owner's tools now, within those it had at the job's making.
        Raises ToolRefused when the owner may no longer have anything run for it."""
        ctx = owner_context(job, request)
        o = job.owner
        if o.channel in ADMIN_CHANNELS:
            return ctx
        return ctx.derive(tool_ceiling=self.ceiling_now(o, ctx))

    def ceiling_now(self, owner: Owner, ctx: ToolContext) -> frozenset[str]:
        profile = self.profile_of(owner.caller)
        if profile is None:
            raise ToolRefused(
                f"the job's owner {owner.caller} may no longer operate this device (it is not a caller "
                "with the operate role in the config now); an administrator may take the job over "
                "(cron update) or remove it"
            )
        try:
            profile_ceiling = self.policy.profile_members(profile) if profile else None
        except PolicyNameError as e:
            lacks = f"the job's owner {owner.caller} has a tools profile this device lacks: {e}"
            raise ToolRefused(lacks) from None
        # The owner's own agent and channel, as they are now, within the caller's profile.
        now = self.policy.allowed(ctx.derive(agent_id=owner.agent, tool_ceiling=profile_ceiling))
        return now if owner.ceiling is None else now & owner.ceiling
