"""Registry names for MCP servers' tools: `mcp_{server}_{tool}`, safe for every provider.

Providers accept tool names of `[A-Za-z0-9_-]` up to 64 characters; a server
may name its tools anything. Other characters become `_`, and a name that
is too long (or would collide) is cut and given a short digest of the full
name, so the same tool always gets the same name.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME_CHARS = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_DIGEST_CHARS = 8


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]


def tool_name(server: str, tool: str, taken: frozenset[str] | set[str] = frozenset()) -> str:
    """The registry name of `tool` on `server`, avoiding the names in `taken`."""
    full = f"mcp_{server}_{tool}"
    name = _UNSAFE.sub("_", full)
    if len(name) <= MAX_NAME_CHARS and name not in taken:
        return name
    return name[: MAX_NAME_CHARS - _DIGEST_CHARS - 1] + "_" + _digest(full)
