"""Which tools a caller may use: the policy pipeline.

The steps, in order (each restricting step only narrows the set):

 1. global profile            tools.profile
 2. provider profile          tools.providers.P.profile (replaces step 1 when set)
 3. global allow              tools.allow
 4. provider allow            tools.providers.P.allow
 5. agent allow               tools.agents.A.allow
 6. agent+provider allow      tools.agents.A.providers.P.allow
 7. group allow               tools.channels.C.profile / .allow (the caller's channel; without
                              rules of its own, mqtt gets the `remote` profile: DEFAULT_CHANNEL_PROFILES)
 8. deny                      tools.deny, then tools.agents.A.deny
 9. alsoAllow                 tools.also_allow, tools.agents.A.also_allow (adds back)
10. subagent deny             always for subagents; the leaf list too at max depth
11. subagent ceiling          a subagent keeps only tools its parent had (`ToolContext.tool_ceiling`)

Where a looser design would fail open we fail closed: an unknown profile, group or tool
name is a configuration error, and a tool named in a deny list stays denied
even when an alsoAllow list names it. alsoAllow cannot widen the caller's
channel either: `tools.channels.mqtt` is what MQTT callers may use at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# The vocabulary lives with the config (the loader checks names without reaching up here); the
# engine's users get it from here too.
from edgeclaw.config.policy_rules import (
    BUILTIN_GROUPS,
    DEFAULT_CHANNEL_PROFILES,
    KNOWN_TOOL_NAMES,
    PROFILES,
    SUBAGENT_ALWAYS_DENY,
    SUBAGENT_LEAF_DENY,
    AgentLayer,
    PolicyLayer,
    PolicyNameError,
    PolicyRules,
    check_entry,
    check_profile,
    rule_problems,
)
from edgeclaw.tools.base import ToolContext

__all__ = [
    "BUILTIN_GROUPS",
    "DEFAULT_CHANNEL_PROFILES",
    "KNOWN_TOOL_NAMES",
    "PROFILES",
    "SUBAGENT_ALWAYS_DENY",
    "SUBAGENT_LEAF_DENY",
    "AgentLayer",
    "PolicyEngine",
    "PolicyLayer",
    "PolicyNameError",
    "PolicyRules",
    "check_entry",
    "check_profile",
    "rule_problems",
]


class PolicyEngine:
    """Evaluates the pipeline for a caller. Results are cached per (agent, provider, channel, depth)."""

    def __init__(self, rules: PolicyRules) -> None:
        self.rules = rules
        self._tool_groups: dict[str, str] = {}
        self._runtime_groups: dict[str, set[str]] = {}
        self._scopes: dict[str, str] = {}  # tool name -> the only agent id that may see it
        self._cache: dict[tuple[str, str, str, int], frozenset[str]] = {}
        # The configured MCP servers, for checking names of their tools and groups (None: any).
        self.mcp_servers: frozenset[str] | None = None

    # -- what exists -------------------------------------------------------
    def set_tools(self, tool_groups: Mapping[str, str]) -> None:
        """Tell the engine which tools exist (name -> group). Clears the cache."""
        self._tool_groups = dict(tool_groups)
        self._cache.clear()

    def register_group(self, name: str, members: Iterable[str]) -> None:
        """Add or replace a runtime group (e.g. `mcp:weather`)."""
        self._runtime_groups[name] = set(members)
        self._cache.clear()

    def replace_rules(self, rules: PolicyRules) -> None:
        """Evaluate with new rules from now on (a config reloaded in place); clears the cache."""
        self.rules = rules
        self._cache.clear()

    def set_scope(self, name: str, agent_id: str | None) -> None:
        """Limit a tool to one agent (per-agent custom tools), after every step; None lifts it."""
        if agent_id:
            self._scopes[name] = agent_id
        else:
            self._scopes.pop(name, None)
        self._cache.clear()

    def validate(self) -> list[tuple[str, str]]:
        """Every (key, problem) in the rules, checked against the tools that exist now."""
        groups = set(self._runtime_groups) | set(self._tool_groups.values())
        return rule_problems(self.rules, set(self._tool_groups), groups, self.mcp_servers)

    # -- evaluation --------------------------------------------------------
    def _expand(self, entries: Iterable[str]) -> set[str]:
        everything = self._tool_groups.keys()
        out: set[str] = set()
        for entry in entries:
            if entry == "*":
                out.update(everything)
            elif entry.startswith("group:"):
                group = entry.removeprefix("group:")
                out.update(n for n in BUILTIN_GROUPS.get(group, ()) if n in self._tool_groups)
                out.update(n for n, g in self._tool_groups.items() if g == group)
                out.update(n for n in self._runtime_groups.get(group, ()) if n in self._tool_groups)
            elif entry in self._tool_groups:
                out.add(entry)
        return out

    def _profile_set(self, name: str) -> set[str]:
        members = PROFILES[name]
        return set(self._tool_groups) if members is None else self._expand(members)

    def profile_members(self, name: str) -> frozenset[str]:
        """The registered tools a profile names (PolicyNameError for an unknown profile)."""
        check_profile(name)
        return frozenset(self._profile_set(name))

    def _steps(
        self, agent_id: str, provider: str, channel: str, depth: int
    ) -> list[tuple[str, str, set[str]]]:
        """The pipeline as (label, operation, operand) triples; operations: base, keep, drop, add."""
        r = self.rules
        agent = r.agents.get(agent_id) or AgentLayer()
        prov = r.providers.get(provider) if provider else None
        steps: list[tuple[str, str, set[str]]] = []
        if prov is not None and prov.profile:
            steps.append(
                (
                    f"tools.providers.{provider}.profile = {prov.profile!r}",
                    "base",
                    self._profile_set(prov.profile),
                )
            )
        else:
            steps.append((f"tools.profile = {r.profile!r}", "base", self._profile_set(r.profile)))
        if r.allow:
            steps.append(("tools.allow", "keep", self._expand(r.allow)))
        if prov is not None and prov.allow:
            steps.append((f"tools.providers.{provider}.allow", "keep", self._expand(prov.allow)))
        if agent.allow:
            steps.append((f"tools.agents.{agent_id}.allow", "keep", self._expand(agent.allow)))
        agent_prov = agent.provider(provider) if provider else None
        if agent_prov is not None and agent_prov.allow:
            steps.append(
                (
                    f"tools.agents.{agent_id}.providers.{provider}.allow",
                    "keep",
                    self._expand(agent_prov.allow),
                )
            )
        chan = r.channels.get(channel)
        channel_admits: set[str] | None = None  # what the caller's channel lets through; None = no rule
        chan_profile = chan.profile if chan is not None else ""
        label = f"tools.channels.{channel}.profile = {chan_profile!r}"
        if (chan is None or not (chan.profile or chan.allow)) and channel in DEFAULT_CHANNEL_PROFILES:
            # A channel the config says nothing about (no table, or an empty one) gets its built-in
            # default; a table of its own (a profile, an allow list) replaces the default.
            chan_profile = DEFAULT_CHANNEL_PROFILES[channel]
            label = (
                f"the {channel} channel's default profile {chan_profile!r} "
                f'(widen with [tools.channels.{channel}] profile = "full")'
            )
        if chan_profile:
            channel_admits = self._profile_set(chan_profile)
            steps.append((label, "keep", channel_admits))
        if chan is not None and chan.allow:
            members = self._expand(chan.allow)
            steps.append((f"tools.channels.{channel}.allow", "keep", members))
            channel_admits = members if channel_admits is None else channel_admits & members
        denied = self._expand(r.deny) | self._expand(agent.deny)
        if r.deny:
            steps.append(("tools.deny", "drop", self._expand(r.deny)))
        if agent.deny:
            steps.append((f"tools.agents.{agent_id}.deny", "drop", self._expand(agent.deny)))
        also = self._expand(r.also_allow) | self._expand(agent.also_allow)
        if also:
            # A deny list always wins over alsoAllow, and so does the caller's channel: its rules
            # are what callers on that wire (MQTT, say) may use at all.
            also -= denied
            if channel_admits is not None:
                also &= channel_admits
            steps.append(("tools.also_allow", "add", also))
        if depth > 0:
            steps.append(
                ("subagent deny list", "drop", self._expand((*SUBAGENT_ALWAYS_DENY, *r.subagent_deny)))
            )
            if depth >= r.subagent_max_depth:
                steps.append(
                    (
                        f"subagent leaf deny list (depth {depth} >= max {r.subagent_max_depth})",
                        "drop",
                        self._expand((*SUBAGENT_LEAF_DENY, *r.subagent_leaf_deny)),
                    )
                )
        return steps

    @staticmethod
    def _apply(current: set[str], op: str, operand: set[str]) -> set[str]:
        if op == "base":
            return set(operand)
        if op == "keep":
            return current & operand
        if op == "drop":
            return current - operand
        return current | operand

    def allowed(self, ctx: ToolContext) -> frozenset[str]:
        """The names of the tools this caller may use."""
        depth = min(ctx.subagent_depth, self.rules.subagent_max_depth + 1)
        key = (ctx.agent_id, ctx.provider, ctx.channel, depth)
        cached = self._cache.get(key)
        if cached is not None:
            return cached if ctx.tool_ceiling is None else cached & ctx.tool_ceiling
        current: set[str] = set()
        for _label, op, operand in self._steps(*key):
            current = self._apply(current, op, operand)
        current -= {n for n, agent in self._scopes.items() if agent != ctx.agent_id}
        result = frozenset(current)
        self._cache[key] = result
        return result if ctx.tool_ceiling is None else result & ctx.tool_ceiling

    def explain(self, name: str, ctx: ToolContext) -> str:
        """Why `name` is refused for this caller: the last step that took it away."""
        current: set[str] = set()
        reason = "no step allows it"
        for label, op, operand in self._steps(ctx.agent_id, ctx.provider, ctx.channel, ctx.subagent_depth):
            before = name in current
            current = self._apply(current, op, operand)
            if before and name not in current:
                reason = f"removed by {label}"
            elif not before and name not in current and op == "base":
                reason = f"not in {label}"
        scope = self._scopes.get(name)
        if name in current and scope is not None and scope != ctx.agent_id:
            return f"the tool belongs to agent {scope!r}"
        if name in current and ctx.tool_ceiling is not None and name not in ctx.tool_ceiling:
            return "not among the tools of the session that spawned this subagent"
        if name in current:
            return "allowed"
        return reason
