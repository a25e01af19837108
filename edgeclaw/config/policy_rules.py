"""The policy's vocabulary: profiles, groups, the rules as configured, and checking their names.

Plain data, below every layer: the config loader checks a file's policy lists
against it without reaching up into the tools, and the policy engine
(`edgeclaw.tools.policy`) evaluates the same rules for each caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from edgeclaw.records import dataclass
from edgeclaw.tool_groups import RESERVED_NAMES, TOOL_GROUPS

if TYPE_CHECKING:
    from edgeclaw.config.schema import Config

# Groups and their members, as `edgeclaw.tool_groups` declares them. A tool registered with one of
# these group names joins it; runtime groups (`mcp`, `mcp:server`, custom) are added with
# PolicyEngine.register_group.
BUILTIN_GROUPS: dict[str, tuple[str, ...]] = TOOL_GROUPS

# None = no restriction (every tool).
PROFILES: dict[str, tuple[str, ...] | None] = {
    "full": None,
    "coding": (
        "group:fs",
        "group:runtime",
        "group:vcs",
        "group:sessions",
        "group:memory",
        "group:skills",
        "image",
    ),
    "messaging": ("group:messaging", "sessions_list", "sessions_history", "sessions_send", "session_status"),
    "minimal": ("session_status",),
    # Boards without a shell: hardware, the board's own screen (canvas, screenshot), files and
    # messages, nothing that runs programs (so not the browser, which runs chromium and reaches the web).
    "device": ("group:hardware", "canvas", "screenshot", "group:fs", "group:messaging", "session_status"),
    # What a caller on a network wire gets unless the config widens it: reading files, the hardware
    # (which the board profile bounds: writes only where it grants them) and its own status. No
    # shell, no background processes, no file writes, no custom tools; so no ui tools either (both
    # write a PNG to the workspace, and canvas draws on a screen people look at).
    "remote": ("read_file", "read_bytes", "list_files", "search", "glob", "group:hardware", "session_status"),
    # Home Assistant's commands (unsigned: whoever may write its topics): the board's switches only.
    "homeassistant": ("gpio",),
    # Sparkplug B NCMDs (unsigned as well): metric writes to the board's outputs only.
    "sparkplug": ("gpio",),
}

# The channel step a channel gets when the config has no [tools.channels.NAME] rules for it. MQTT
# callers are remote machines, often unsigned: they get the `remote` profile unless the config says
# otherwise (`[tools.channels.mqtt] profile = "full"` gives them everything the global steps allow).
# MCP clients (`edgeclaw mcp serve`, the daemon's MCP endpoints) get the `device` profile: the
# hardware, files and messages, no shell. Home Assistant's entity commands get `gpio` alone.
DEFAULT_CHANNEL_PROFILES: dict[str, str] = {
    "mqtt": "remote",
    "mcp": "device",
    "homeassistant": "homeassistant",
    "sparkplug": "sparkplug",
}

# A subagent never gets these, at any depth: they administer the device or schedule work that
# outlives the child (gateway, cron, schedule, process), reach people or other sessions directly
# (message, sessions_send), read or change what the parent's conversations remember (the memory
# tools), or describe the parent's session and the agents it could hand work to (session_status,
# agents_list).
SUBAGENT_ALWAYS_DENY: tuple[str, ...] = (
    "gateway",
    "cron",
    "schedule",
    "process",
    "agents_list",
    "session_status",
    "sessions_send",
    "message",
    "memory_search",
    "memory_get",
    "memory_store",
    "memory_list",
    "memory_forget",
)
# A subagent at the maximum depth cannot see other sessions, spawn, steer or hand work on.
SUBAGENT_LEAF_DENY: tuple[str, ...] = (
    "sessions_list",
    "sessions_history",
    "sessions_spawn",
    "spawn",
    "subagents",
    "delegate",
)

KNOWN_TOOL_NAMES: frozenset[str] = (
    frozenset(n for members in BUILTIN_GROUPS.values() for n in members) | RESERVED_NAMES
)


class PolicyNameError(ValueError):
    """An entry in a policy list names no known profile, group or tool."""


@dataclass(frozen=True)
class PolicyLayer:
    """A profile and an allow list: one provider's or channel's override of the tool policy."""

    profile: str = ""
    allow: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgentLayer:
    """One agent's tool policy: its allow, deny and also_allow lists and per-provider overrides."""

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


def check_entry(
    entry: str,
    extra_tools: Iterable[str] = (),
    extra_groups: Iterable[str] = (),
    mcp_servers: Iterable[str] | None = None,
) -> None:
    """Raise PolicyNameError unless `entry` names a known tool, group (`group:x`) or `*`.

    `mcp_servers`: the configured MCP servers; `group:mcp:NAME` and `mcp_NAME_TOOL` must name one
    (their tools are only known once connected). None: any `mcp:` group is taken.
    """
    if entry == "*":
        return
    servers = None if mcp_servers is None else set(mcp_servers)
    if entry.startswith("group:mcp:") and servers is not None:
        server = entry.removeprefix("group:mcp:")
        if server in servers:
            return
        known = ", ".join(sorted(servers)) or "none"
        raise PolicyNameError(f"unknown group {entry!r}: no [mcp.servers.{server}] (configured: {known})")
    if servers is not None and any(entry.startswith(f"mcp_{s}_") for s in servers):
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


def rule_problems(
    rules: PolicyRules,
    tools: Iterable[str] = (),
    groups: Iterable[str] = (),
    mcp_servers: Iterable[str] | None = None,
) -> list[tuple[str, str]]:
    """Every (key, problem) in the rules; `tools` and `groups`: names known besides the built-in ones;
    `mcp_servers`: see `check_entry`."""
    tools = set(tools)
    groups = set(groups)
    servers = None if mcp_servers is None else list(mcp_servers)
    problems: list[tuple[str, str]] = []

    def entries(key: str, values: Iterable[str]) -> None:
        for i, entry in enumerate(values):
            try:
                check_entry(entry, tools, groups, servers)
            except PolicyNameError as e:
                problems.append((f"{key}[{i}]", str(e)))

    def profile(key: str, name: str) -> None:
        if name:
            try:
                check_profile(name)
            except PolicyNameError as e:
                problems.append((key, str(e)))

    r = rules
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


def rules_from_config(config: Config) -> PolicyRules:
    """The policy rules a configuration sets."""
    t = config.tools

    def layer(o: Any) -> PolicyLayer:
        return PolicyLayer(profile=o.profile, allow=tuple(o.allow))

    return PolicyRules(
        profile=t.profile,
        allow=tuple(t.allow),
        deny=tuple(t.deny),
        also_allow=tuple(t.also_allow),
        providers={k: layer(v) for k, v in t.providers.items()},
        channels={k: layer(v) for k, v in t.channels.items()},
        agents={
            k: AgentLayer(
                allow=tuple(a.allow),
                deny=tuple(a.deny),
                also_allow=tuple(a.also_allow),
                providers={p: layer(v) for p, v in a.providers.items()},
            )
            for k, v in t.agents.items()
            for a in (v,)
        },
        subagent_max_depth=t.subagents.max_depth,
        subagent_deny=tuple(t.subagents.deny),
        subagent_leaf_deny=tuple(t.subagents.leaf_deny),
    )
