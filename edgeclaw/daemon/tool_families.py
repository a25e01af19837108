"""The tool families the daemon builds on first use, by name and group.

Each family's modules (and what they import: HTTP and extraction for the web
tools, speech and images for the media tools, one module per bus for the
hardware tools) load when one of its tools is first looked up, listed or
called, not at start-up: `edgeclaw run` reaches READY=1 sooner and holds less
while idle. Policies, `tools list` counts and status see the names and groups
from the start; the registry checks, when it builds a family, that it built
exactly these (see `Registry.register_deferred`).
"""

from __future__ import annotations

from edgeclaw.config.schema import Config
from edgeclaw.config.secrets import search_chain

# Subagents, sessions_send and message: their modules bring in the agent loop's.
AGENT_TOOLS = {
    "spawn": "sessions",
    "sessions_spawn": "sessions",
    "subagents": "sessions",
    "delegate": "sessions",
    "agents_list": "sessions",
    "sessions_send": "sessions",
    "message": "messaging",
}

HARDWARE_TOOLS = dict.fromkeys(
    ("hardware_info", "i2c", "spi", "gpio", "hardware_memory", "probe", "esp32", "serial", "sensor"),
    "hardware",
)

# The camera is a board device (group hardware); read_bytes reads workspace files (group fs).
MEDIA_TOOLS = {"tts": "media", "image": "media", "camera": "hardware", "read_bytes": "fs"}


MEMORY_TOOLS = dict.fromkeys(
    ("memory_search", "memory_get", "memory_store", "memory_list", "memory_forget"), "memory"
)


def memory_tool_groups(config: Config) -> dict[str, str]:
    """The memory tools; skill_search too when [skills] is on (`daemon.memory_on_demand`)."""
    groups = dict(MEMORY_TOOLS)
    if config.skills.enabled:
        groups["skill_search"] = "skills"
    return groups


def web_tool_groups(config: Config) -> dict[str, str]:
    """web_fetch and http_request; web_search too when [tools.web.search] names a provider."""
    groups = {"web_fetch": "web", "http_request": "web"}
    if search_chain(config.tools.web.search):
        groups["web_search"] = "web"
    return groups
