"""Whether a shell command may run, and who must say yes first.

Shared by exec, process and custom tools. In order:

1. the text is normalised (`command_text.normalise`): what is checked is what runs;
2. the deny groups: a `deny` group refuses outright, naming the group; the
   `approve` group (package installs) needs a person's yes;
3. the security mode (per agent): `deny` refuses every exec, `allowlist`
   lets listed programs run and treats others as a miss, `full` lets any
   command through (custom tools, defined by an administrator, skip this);
4. the ask mode: `off` never asks (a command that needs approval is
   refused), `on-miss` asks for misses and package installs, `always` asks
   for every command.

Asking goes through the `ApprovalBroker` to the caller's channel; no
approver, no answer in time, or a failure all mean deny. An allow-always
answer is stored (keyed on tool, agent and the exact normalised command) and
stands in for the question next time, across restarts, until revoked.
`check` does everything that needs no person (a dry run stops there);
`approve` asks, in `execute`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field

from edgeclaw.config.schema import AgentPolicy, ExecConfig
from edgeclaw.errors import ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.store.approvals import ApprovalStore
from edgeclaw.tools.approval import ApprovalBroker, Decision
from edgeclaw.tools.base import PendingApproval, ToolContext
from edgeclaw.tools.runtime.command_text import normalise, program_of, simple_commands
from edgeclaw.tools.runtime.denylist import DenyList
from edgeclaw.tools.runtime.program_specs import runs_program_option


@dataclass(frozen=True)
class AgentExecPolicy:
    """The effective exec settings of one agent."""

    agent_id: str
    security: str
    ask: str
    allowlist: tuple[str, ...]
    deny: DenyList
    network: bool

    def allowlisted(self, command: str) -> bool:
        """True when every program in the command line is on the allowlist (globs allowed)."""
        return not self.allowlist_miss(command)

    def allowlist_miss(self, command: str) -> str:
        """Why the command line is not allowlisted ("" when every program in it is).

        A program given with a path counts only from a system directory (`./ls`
        is whatever the workspace holds), a program that runs another one
        (`env`, `xargs`, `timeout`, ...) never counts, and neither does an
        allowlisted program with an option that runs a program
        (`sort --compress-program=sh`): all of those are misses.
        """
        commands = simple_commands(command)
        if commands is None:
            return "a command or process substitution cannot be allowlisted"
        if not commands:
            return "no program in it is on the allowlist"
        for words in commands:
            program = program_of(words)
            if not program or any(c in program for c in "$`\\{}*?["):
                return "its program name is computed when it runs, so it cannot be allowlisted"
            path = next(w for w in words if not _ASSIGNMENT.fullmatch(w))
            if "/" in path and path.rsplit("/", 1)[0] not in _SYSTEM_BIN_DIRS:
                return f"{path!r} is not a program from a system directory"
            if program in _RUNS_PROGRAMS:
                return f"{program!r} runs other programs, so it is never on the allowlist"
            if runs_program_option(program, words[1:]):
                return f"{program!r} is given an option that runs another program"
            if not any(fnmatch.fnmatchcase(program, pattern) for pattern in self.allowlist):
                return f"{program!r} is not on the allowlist (tools.exec.allowlist)"
        return ""


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)
_SYSTEM_BIN_DIRS = frozenset({"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"})
# Programs whose job is to run another program, or that run commands from their input or script
# (less's `!`, awk's `system()`, GNU sed's `e`): on an allowlist they would let anything through.
_RUNS_PROGRAMS = frozenset(
    {"env", "xargs", "nice", "nohup", "timeout", "stdbuf", "setsid", "ionice", "chrt", "taskset",
     "time", "exec", "command", "builtin", "eval", "busybox", "sudo", "doas", "su", "flock",
     "watch", "script", "unbuffer", "parallel", "strace", "ltrace", "gdb", "chroot", "unshare",
     "nsenter", "runuser", "sh", "bash", "dash", "zsh", "ksh", "ash",
     "less", "more", "man", "vi", "vim", "awk", "gawk", "mawk", "sed"}
)  # fmt: skip


class ExecPolicies:
    """Per-agent policies from [tools.exec] and [tools.agents.ID.exec]; ValueError for bad names."""

    def __init__(
        self, exec_config: ExecConfig, agents: Mapping[str, AgentPolicy], workspace: Iterable[str] = ()
    ) -> None:
        self.base = exec_config
        self.agents = dict(agents)
        self.workspace = tuple(workspace)  # as configured and as real path: see DenyList
        self._cache: dict[str, AgentExecPolicy] = {}
        # Build every configured agent now so a bad group name fails at start-up.
        self.for_agent("")
        for agent_id in self.agents:
            self.for_agent(agent_id)

    def for_agent(self, agent_id: str) -> AgentExecPolicy:
        cached = self._cache.get(agent_id)
        if cached is not None:
            return cached
        base = self.base
        agent = self.agents.get(agent_id)
        over = agent.exec if agent is not None else None
        switches = DenyList.resolve_switches(base.deny_groups, over.deny_groups if over else {})
        policy = AgentExecPolicy(
            agent_id=agent_id,
            security=(over.security if over and over.security else base.security),
            ask=(over.ask if over and over.ask else base.ask),
            allowlist=tuple(over.allowlist if over and over.allowlist is not None else base.allowlist),
            deny=DenyList(switches, self.workspace),
            network=(over.network if over and over.network is not None else base.network),
        )
        self._cache[agent_id] = policy
        return policy


@dataclass(frozen=True)
class Assessment:
    """A command that passed the checks, and why (if at all) a person must approve it."""

    command: str
    reasons: tuple[str, ...] = ()
    policy: AgentExecPolicy | None = field(default=None, compare=False)

    @property
    def needs_approval(self) -> bool:
        return bool(self.reasons)


class CommandGate:
    def __init__(
        self,
        policies: ExecPolicies,
        *,
        store: Callable[[], ApprovalStore],
        broker: Callable[[], ApprovalBroker],
        scrub: Callable[[str], str] = lambda s: s,
        approval_timeout_s: float = 120.0,
    ) -> None:
        self.policies = policies
        self._store = store
        self._broker = broker
        self.scrub = scrub
        self.approval_timeout_s = approval_timeout_s

    def check(
        self, raw: str, ctx: ToolContext, *, tool: str, trusted: bool = False, reading: str | None = None
    ) -> Assessment:
        """Everything short of asking. Raises ToolRefused; returns what approval (if any) is needed.

        `trusted` is for commands an administrator wrote (custom tools): the
        security and ask-always modes do not apply, the deny groups do.
        `reading` is what the deny groups check instead of the command itself
        (a custom tool's template with each value as the one word of data it is).
        """
        command = normalise(raw)
        policy = self.policies.for_agent(ctx.agent_id)
        if policy.security == "deny" and not trusted:
            raise ToolRefused(
                f"shell commands are disabled for agent {ctx.agent_id!r} (tools.exec.security = 'deny')"
            )
        hits = policy.deny.check(normalise(reading) if reading is not None else command)
        for hit in hits:
            if hit.group.action == "deny":
                raise ToolRefused(f"refused command: {hit.describe()}")
        reasons = [
            f"{hit.group.name}: {hit.group.description} (risk {hit.group.risk})"
            for hit in hits
            if hit.group.action == "approve"
        ]
        if not trusted:
            if policy.ask == "always":
                reasons.append("tools.exec.ask = 'always'")
            elif policy.security == "allowlist" and (miss := policy.allowlist_miss(command)):
                reasons.append(miss)
        assessment = Assessment(command, tuple(reasons), policy)
        if reasons and policy.ask == "off" and not self._remembered(tool, ctx, command):
            raise ToolRefused(
                f"refused command: it needs approval ({'; '.join(reasons)}) and tools.exec.ask = 'off'"
            )
        return assessment

    def dry_run_note(self, assessment: Assessment, ctx: ToolContext, *, tool: str) -> PendingApproval | None:
        """For a dry run: the approval the call would ask for (None when it would just run)."""
        if not assessment.needs_approval or self._remembered(tool, ctx, assessment.command):
            return None
        return PendingApproval("; ".join(assessment.reasons))

    def _remembered(self, tool: str, ctx: ToolContext, command: str) -> bool:
        return self._store().find(tool, ctx.agent_id, command) is not None

    async def approve(self, assessment: Assessment, ctx: ToolContext, *, tool: str) -> str:
        """Ask when needed; returns how it was allowed ("" = no approval needed). Raises ToolRefused."""
        if not assessment.needs_approval:
            return ""
        store = self._store()
        if store.use(tool, ctx.agent_id, assessment.command) is not None:
            return "allowed always (stored decision)"
        lines = assessment.command.count("\n") + 1
        # Said first: a pager or a narrow console may show only the top of a long command, and a
        # harmless first line must not stand for the rest.
        size = f"[a command of {lines} lines]\n" if lines > 1 else ""
        summary = self.scrub(f"{size}{assessment.command}\n(why: {'; '.join(assessment.reasons)})")
        decision, why = await self._broker().request(
            tool, summary, ctx, timeout_s=self.approval_timeout_s, args={"command": assessment.command}
        )
        if not decision.allows:
            raise ToolRefused(f"not approved: {why}")
        if decision is Decision.ALLOW_ALWAYS:
            who = f"{ctx.channel}:{ctx.sender}" if ctx.sender else ctx.channel
            store.add(tool, ctx.agent_id, assessment.command, created_by=who)
            return "allowed always (decision stored)"
        return "allowed once"
