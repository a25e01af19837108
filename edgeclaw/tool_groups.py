"""The built-in tools by group, declared once, and the families the daemon builds on first use.

Plain names, below every layer: the config loader checks a file's policy lists against them
(`edgeclaw.config.policy_rules` builds the policy's groups from `TOOL_GROUPS`) without reaching up
into the tools; the daemon registers the deferred families by name and group from here before their
modules load; the registry refuses a tool whose declared group disagrees with this table, and a test
checks that every tool class in `edgeclaw.tools` is listed here under its own group.

Deferred families: their modules (and what they import: HTTP and extraction for the web tools,
speech and images for the media tools, one module per bus for the hardware tools) load when one of
their tools is first looked up, listed or called, not at start-up: `edgeclaw run` reaches READY=1
sooner and holds less while idle. Policies, `tools list` counts and status see the names and groups
from the start; the registry checks, when it builds a family, that it built exactly these (see
`Registry.register_deferred`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgeclaw.config.schema import Config

# Each group's tools. A group with no names here is open: its members are whatever registers with
# it at run time (`mcp`, `mcp:SERVER`, `custom`).
TOOL_GROUPS: dict[str, tuple[str, ...]] = {
    "fs": (
        "read_file",
        "read_bytes",
        "write_file",
        "edit_file",
        "file_append",
        "list_files",
        "search",
        "glob",
    ),
    "runtime": ("exec", "process"),
    "vcs": ("git",),
    "integrations": ("composio",),
    "web": ("web_search", "web_fetch", "http_request"),
    "memory": ("memory_search", "memory_get", "memory_store", "memory_list", "memory_forget"),
    "sessions": (
        "sessions_list",
        "sessions_history",
        "sessions_send",
        "sessions_spawn",
        "spawn",
        "subagents",
        "session_status",
        "agents_list",
        "delegate",
    ),
    # The board's own screen, drawn on (canvas) and read back (screenshot); and a headless browser.
    "ui": ("canvas", "screenshot", "browser"),
    "automation": ("cron", "gateway", "schedule"),
    "messaging": ("message",),
    "hardware": (
        "hardware_info",
        "hardware_memory",
        "i2c",
        "spi",
        "gpio",
        "sensor",
        "probe",
        "esp32",
        "serial",
        "camera",
    ),
    # Peers on the broker: listing them and calling their tools ([tools.nodes] says which).
    "nodes": ("nodes",),
    "media": ("image", "tts"),
    "skills": ("skill_search",),
    "mcp": (),
    "custom": (),
}

# A name that older configs name: no custom tool may take it, and a policy list may name it (it
# matches nothing), as it always could.
RESERVED_NAMES: frozenset[str] = frozenset({"memory_recall"})

# Each built-in tool's group.
GROUP_OF: dict[str, str] = {name: group for group, names in TOOL_GROUPS.items() for name in names}


def declared_group_problem(name: str, group: str) -> str | None:
    """Why a tool named `name` may not declare `group` (its name is listed under another), or None."""
    declared = GROUP_OF.get(name)
    if declared is None or declared == group:
        return None
    return f"tool {name!r} declares group {group!r}, but edgeclaw.tool_groups lists it under {declared!r}"


def _family(*names: str) -> dict[str, str]:
    return {name: GROUP_OF[name] for name in names}


# Subagents, sessions_send, delegate and message: their modules bring in the agent loop's.
AGENT_TOOLS = _family(
    "spawn", "sessions_spawn", "subagents", "delegate", "agents_list", "sessions_send", "message"
)

# Every hardware tool but the camera, which comes with the media tools (it shares their files).
HARDWARE_TOOLS = _family(*(name for name in TOOL_GROUPS["hardware"] if name != "camera"))

# The camera is a board device (group hardware); read_bytes reads workspace files (group fs).
MEDIA_TOOLS = _family("tts", "image", "camera", "read_bytes")

MEMORY_TOOLS = _family(*TOOL_GROUPS["memory"])

VCS_TOOLS = _family(*TOOL_GROUPS["vcs"])
INTEGRATION_TOOLS = _family(*TOOL_GROUPS["integrations"])

# canvas, screenshot and browser: Pillow and the display drivers load with them (the browser's
# backend only on its first call).
UI_TOOLS = _family(*TOOL_GROUPS["ui"])


def memory_tool_groups(config: Config) -> dict[str, str]:
    """The memory tools; skill_search too when [skills] is on (`daemon.memory_service`)."""
    groups = dict(MEMORY_TOOLS)
    if config.skills.enabled:
        groups.update(_family("skill_search"))
    return groups


def web_tool_groups(config: Config) -> dict[str, str]:
    """web_fetch and http_request; web_search too when [tools.web.search] names a provider."""
    from edgeclaw.config.secrets import search_chain

    groups = _family("web_fetch", "http_request")
    if search_chain(config.tools.web.search):
        groups.update(_family("web_search"))
    return groups
