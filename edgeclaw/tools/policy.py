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

Where the seed fails open we fail closed: an unknown profile, group or tool
name is a configuration error, and a tool named in a deny list stays denied
even when an alsoAllow list names it. alsoAllow cannot widen the caller's
channel either: `tools.channels.mqtt` is what MQTT callers may use at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from edgeclaw.tools.base import ToolContext

# Groups and their members as the inventory defines them. A tool registered
# with one of these group names joins it; runtime groups (`mcp`, `mcp:server`,
# custom) are added with PolicyEngine.register_group.
BUILTIN_GROUPS: dict[str, tuple[str, ...]] = {
    "fs": ("read_file", "write_file", "edit_file", "file_append", "list_files", "search", "glob"),
    "runtime": ("exec", "process"),
    "web": ("web_search", "web_fetch", "http_request"),
    "memory": (
        "memory_search",
        "memory_get",
        "memory_store",
        "memory_recall",
        "memory_list",
        "memory_forget",
    ),
    "sessions": (
        "sessions_list",
        "sessions_history",
        "sessions_send",
        "sessions_spawn",
        "subagents",
        "session_status",
    ),
    "ui": ("browser", "canvas"),
    "automation": ("cron", "gateway", "schedule"),
    "messaging": ("message",),
    "hardware": ("hardware_info", "hardware_memory", "i2c", "spi", "gpio", "probe", "esp32"),
    "media": ("image", "tts"),
    "skills": ("skill_search",),
    "mcp": (),
    "custom": (),
}

# None = no restriction (every tool).
PROFILES: dict[str, tuple[str, ...] | None] = {
    "full": None,
    "coding": ("group:fs", "group:runtime", "group:sessions", "group:memory", "group:skills", "image"),
    "messaging": ("group:messaging", "sessions_list", "sessions_history", "sessions_send", "session_status"),
    "minimal": ("session_status",),
    # Boards without a shell: hardware, files and messages, nothing that runs programs.
    "device": ("group:hardware", "group:fs", "group:messaging", "session_status"),
    # What a caller on a network wire gets unless the config widens it: reading files, the hardware
    # (which the board profile bounds: writes only where it grants them) and its own status. No
    # shell, no background processes, no file writes, no custom tools.
    "remote": ("read_file", "list_files", "search", "glob", "group:hardware", "session_status"),
}

# The channel step a channel gets when the config has no [tools.channels.NAME] rules for it. MQTT
# callers are remote machines, often unsigned: they get the `remote` profile unless the config says
# otherwise (`[tools.channels.mqtt] profile = "full"` gives them everything the global steps allow).
DEFAULT_CHANNEL_PROFILES: dict[str, str] = {"mqtt": "remote"}

# A subagent never gets these: they act on the parent's behalf or reach people directly.
SUBAGENT_ALWAYS_DENY: tuple[str, ...] = (
    "gateway",
    "cron",
    "schedule",
    "session_status",
    "sessions_send",
    "message",
    "memory_search",
    "memory_get",
)
# A subagent at the maximum depth cannot spawn or steer further.
SUBAGENT_LEAF_DENY: tuple[str, ...] = ("sessions_list", "sessions_history", "sessions_spawn", "subagents")

KNOWN_TOOL_NAMES: frozenset[str] = frozenset(n for members in BUILTIN_GROUPS.values() for n in members)


class PolicyNameError(ValueError):
    """An entry in a policy list names no known profile, group or tool."""


@dataclass(frozen=True)
class PolicyLayer:
    profile: str = ""
    allow: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgentLayer:
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    also_allow: tuple[str, ...] = ()
    providers: Mapping[str, PolicyLayer] = None  # type: ignore[assignment]

    def provider(self, name: str) -> PolicyLayer | None:
        return (self.providers or {}).get(name)


@dataclass(frozen=True)
class PolicyRules:
    """The policy as configured, independent of the config file format."""

    profile: str = "full"
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    also_allow: tuple[str, ...] = ()
    providers: Mapping[str, PolicyLayer] = None  # type: ignore[assignment]
    channels: Mapping[str, PolicyLayer] = None  # type: ignore[assignment]
    agents: Mapping[str, AgentLayer] = None  # type: ignore[assignment]
    subagent_max_depth: int = 1
    subagent_deny: tuple[str, ...] = ()
    subagent_leaf_deny: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("providers", "channels", "agents"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, {})


def check_entry(entry: str, extra_tools: Iterable[str] = (), extra_groups: Iterable[str] = ()) -> None:
    """Raise PolicyNameError unless `entry` names a known tool, group (`group:x`) or `*`."""
    if entry == "*":
        return
    if entry.startswith("group:"):
        group = entry.removeprefix("group:")
        if group in BUILTIN_GROUPS or group in set(extra_groups) or group.startswith("mcp:"):
            return
        known = ", ".join(sorted({*BUILTIN_GROUPS, *extra_groups}))
        raise PolicyNameError(f"unknown group {entry!r} (known groups: {known}; and mcp:SERVER)")
    if entry in KNOWN_TOOL_NAMES or entry in set(extra_tools):
        return
    raise PolicyNameError(f"unknown tool {entry!r} (use a tool name, 'group:NAME' or '*')")


def check_profile(name: str) -> None:
    if name not in PROFILES:
        raise PolicyNameError(f"unknown profile {name!r} (expected one of: {', '.join(PROFILES)})")


class PolicyEngine:
    """Evaluates the pipeline for a caller. Results are cached per (agent, provider, channel, depth)."""

    def __init__(self, rules: PolicyRules) -> None:
        self.rules = rules
        self._tool_groups: dict[str, str] = {}
        self._runtime_groups: dict[str, set[str]] = {}
        self._scopes: dict[str, str] = {}  # tool name -> the only agent id that may see it
        self._cache: dict[tuple[str, str, str, int], frozenset[str]] = {}

    # -- what exists -------------------------------------------------------
    def set_tools(self, tool_groups: Mapping[str, str]) -> None:
        """Tell the engine which tools exist (name -> group). Clears the cache."""
        self._tool_groups = dict(tool_groups)
        self._cache.clear()

    def register_group(self, name: str, members: Iterable[str]) -> None:
        """Add or replace a runtime group (e.g. `mcp:weather`)."""
        self._runtime_groups[name] = set(members)
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
        problems: list[tuple[str, str]] = []
        tools = set(self._tool_groups)
        groups = set(self._runtime_groups) | set(self._tool_groups.values())

        def entries(key: str, values: Iterable[str]) -> None:
            for i, entry in enumerate(values):
                try:
                    check_entry(entry, tools, groups)
                except PolicyNameError as e:
                    problems.append((f"{key}[{i}]", str(e)))

        def profile(key: str, name: str) -> None:
            if name:
                try:
                    check_profile(name)
                except PolicyNameError as e:
                    problems.append((key, str(e)))

        r = self.rules
        if not r.profile:
            problems.append(("tools.profile", f"expected one of: {', '.join(PROFILES)}"))
        profile("tools.profile", r.profile)
        entries("tools.allow", r.allow)
        entries("tools.deny", r.deny)
        entries("tools.also_allow", r.also_allow)
        for section, layers in (("providers", r.providers), ("channels", r.channels)):
            for name, layer in layers.items():
                profile(f"tools.{section}.{name}.profile", layer.profile)
                entries(f"tools.{section}.{name}.allow", layer.allow)
        for agent_id, agent in r.agents.items():
            entries(f"tools.agents.{agent_id}.allow", agent.allow)
            entries(f"tools.agents.{agent_id}.deny", agent.deny)
            entries(f"tools.agents.{agent_id}.also_allow", agent.also_allow)
            for provider, layer in (agent.providers or {}).items():
                entries(f"tools.agents.{agent_id}.providers.{provider}.allow", layer.allow)
        entries("tools.subagents.deny", r.subagent_deny)
        entries("tools.subagents.leaf_deny", r.subagent_leaf_deny)
        return problems

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
            return cached
        current: set[str] = set()
        for _label, op, operand in self._steps(*key):
            current = self._apply(current, op, operand)
        current -= {n for n, agent in self._scopes.items() if agent != ctx.agent_id}
        result = frozenset(current)
        self._cache[key] = result
        return result

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
        if name in current:
            return "allowed"
        return reason
