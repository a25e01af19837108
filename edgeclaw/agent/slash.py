"""Slash commands: always available, on every channel, with or without a language model.

They are the field technician's and the offline path, so they go through the
same registry and policy as the model's own tool calls.
"""

from __future__ import annotations

from edgeclaw.records import dataclass

HELP = """Commands:
  /help                 this list
  /help TOOL            a tool's arguments: names, types, which are required
  /tools                the tools you may call here
  /call TOOL {json}     call a tool, e.g. /call session_status {}
  /status               this session's state, then the device's
  /stop                 stop the turn in progress (the model's, or a /call)
  /new                  start a fresh conversation (the old one is archived)"""

# What Tab completes on the console and what `/help` lists; kept beside HELP so they cannot drift.
COMMANDS = ("help", "tools", "call", "status", "stop", "new")


@dataclass(frozen=True)
class SlashCommand:
    name: str
    argument: str


def parse(text: str) -> SlashCommand | None:
    """`/name rest…` → SlashCommand; anything else → None."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    head, _, rest = stripped[1:].partition(" ")
    return SlashCommand(head.lower(), rest.strip())


def split_call(argument: str) -> tuple[str, str]:
    """`TOOL {json}` → (tool, json text); missing JSON means no arguments."""
    name, _, args = argument.partition(" ")
    return name.strip(), args.strip() or "{}"
