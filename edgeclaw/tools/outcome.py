"""What a call through the registry gives back: its outcome, and its outputs made safe to show.

Every text a tool returns is scrubbed of credentials, then capped (so a cut never leaves half a secret
showing); structured data is copied as plain JSON, scrubbed string by string and left out when over
the limit; bytes join it only when nothing in them looks like a secret.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from edgeclaw.records import dataclass
from edgeclaw.tools.base import ProgressSink

# Output beyond this many characters is never scrubbed, because it is never shown.
SCRUB_WINDOW_CHARS = 1 << 20


@dataclass(slots=True)
class CallOutcome:
    """The result of one call through the registry, in the shape every channel reports."""

    tool: str
    ok: bool
    for_llm: str
    for_user: str | None
    error: str | None
    duration_ms: float
    refused: bool = False
    stage: str = "ok"
    data: dict[str, Any] | None = None  # the tool's structured result, scrubbed like the texts

    def as_dict(self) -> dict[str, Any]:
        shape = {
            "ok": self.ok,
            "tool": self.tool,
            "for_llm": self.for_llm,
            "for_user": self.for_user,
            "error": self.error,
            "duration_ms": round(self.duration_ms, 3),
        }
        if self.data is not None:  # only when there is some: the documented keys stay as they are
            shape["data"] = self.data
        return shape


# How the cut announces itself, as the last line of a capped text. Channels that cut again for their
# own reasons (the console's row limit) look for it, so the note survives their cut.
TRUNCATION_NOTE = re.compile(r"\[output truncated: \d+ of \d+ bytes not shown\]")
# Structured data nested deeper than this is a tool's bug, not a result.
MAX_DATA_DEPTH = 32


def cap_text(text: str, max_bytes: int) -> str:
    """Cut text to at most `max_bytes` of UTF-8, on a character boundary, saying how much was cut."""
    # Fast path: a character is at most 4 bytes, so short text cannot be over.
    if len(text) * 4 <= max_bytes:
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    note = f"\n[output truncated: {len(data) - max_bytes} of {len(data)} bytes not shown]"
    if len(note) >= max_bytes:  # no room for the note (it is ASCII: characters are bytes)
        return data[:max_bytes].decode("utf-8", "ignore")
    keep = data[: max_bytes - len(note)]
    return keep.decode("utf-8", "ignore") + note


def clean_text(text: str, scrub: Callable[[str], str], max_bytes: int) -> str:
    """Scrub, then cap: scrubbing first means the cut never leaves half a secret showing.

    A huge output is first trimmed (at whitespace, where secrets do not run on)
    so the scrubber's work stays bounded.
    """
    limit = max(2 * max_bytes, SCRUB_WINDOW_CHARS)
    if len(text) > limit:
        text = text[:limit]
        cut = max(text.rfind(" "), text.rfind("\n"))
        if cut > 0:
            text = text[:cut]
    return cap_text(scrub(text), max_bytes)


def clean_data(
    data: dict[str, Any] | None, binary: bytes | None, scrub: Callable[[str], str], max_bytes: int
) -> tuple[dict[str, Any] | None, str]:
    """Structured data scrubbed string by string (never as JSON text, where a pattern could eat a
    quote), and left out, with a note for the texts, when it is over the output limit. A tool's
    `binary` joins it base64-encoded when the scrubber finds nothing in the bytes themselves
    (read as Latin-1, so every byte is one character and a secret in them reads as text)."""
    if binary is not None:
        import base64
        import hashlib

        as_text = binary.decode("latin-1")
        if scrub(as_text) != as_text:
            return None, "\n[the bytes were withheld: they contain what looks like a secret]"
        clean, dropped = clean_data(data or {}, None, scrub, max_bytes)
        if clean is not None:
            clean["sha256"] = hashlib.sha256(binary).hexdigest()
            clean["base64"] = base64.b64encode(binary).decode("ascii")
            size = len(json.dumps(clean, separators=(",", ":")))
            if size > max_bytes:
                limit = max_bytes
                return None, f"\n[the bytes were left out: {size} bytes, over the {limit}-byte limit]"
        return clean, dropped
    if data is None:
        return None, ""
    size = len(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace"))
    if size > max_bytes:
        return None, (f"\n[structured data left out: {size} bytes, over the {max_bytes}-byte limit]")
    return _scrub_tree(data, scrub), ""


def json_copy(data: Any) -> dict[str, Any]:
    """A plain JSON copy of a tool's structured data (dict, list, str, int, float, bool, None only)."""
    if not isinstance(data, dict):
        raise TypeError(f"the tool's structured data is a {type(data).__name__}, not a dict")

    def copy(value: Any, depth: int) -> Any:
        if depth > MAX_DATA_DEPTH:
            raise TypeError(f"the tool's structured data is nested over {MAX_DATA_DEPTH} levels")
        if value is None or isinstance(value, str | bool):
            return value
        if isinstance(value, int):
            if value.bit_length() > 1024:  # would not even print (int_max_str_digits)
                raise TypeError("the tool's structured data holds an integer too long for JSON")
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise TypeError("the tool's structured data holds a NaN or infinity (not JSON)")
            return value
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise TypeError("the tool's structured data has a key that is not a str")
            return {k: copy(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [copy(v, depth + 1) for v in value]
        raise TypeError(f"the tool's structured data holds a {type(value).__name__} (not JSON)")

    result: dict[str, Any] = copy(data, 0)
    return result


def _scrub_tree(value: Any, scrub: Callable[[str], str]) -> Any:
    """Every string in a JSON tree (keys included) through the scrubber; depth is bounded by `json_copy`."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub(k): _scrub_tree(v, scrub) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_tree(v, scrub) for v in value]
    return value


def scrubbed_progress(sink: ProgressSink, scrub: Callable[[str], str]) -> ProgressSink:
    """`sink`, handed each message scrubbed: a secret a tool (or its MCP server) puts in a progress
    message is caught on every channel, the way the answer's text is."""

    def scrubbed(progress: float, total: float | None, message: str) -> None:
        sink(progress, total, scrub(message) if message else message)

    return scrubbed
