"""What the hardware tools share: argument helpers, output shapes and the per-call facts they pass.

Numbers for addresses, registers and values may be given as JSON integers or
as "0x..." strings (models and people write hex for hardware); anything else
is refused by the schema before a tool runs. Outputs follow one pattern: one
short readable text (for the model and the person alike, so it travels once)
and the figures as structured `data` (the same dict on every channel).
"""

from __future__ import annotations

from typing import Any

from edgeclaw.backends.hub import BoardBackends
from edgeclaw.board import BoardProfile
from edgeclaw.config.schema import HardwareConfig
from edgeclaw.errors import ToolRefused
from edgeclaw.tools.base import Args, Tool, ToolResult


class HardwareTool(Tool):
    """A tool bounded by the board profile, reaching devices through the board's backends."""

    group = "hardware"

    def __init__(self, profile: BoardProfile, config: HardwareConfig, backends: BoardBackends) -> None:
        self.profile = profile
        self.config = config
        self.backends = backends


HEX_PATTERN = "^0[xX][0-9a-fA-F]{1,16}$"


def int_or_hex(description: str, minimum: int = 0, maximum: int | None = None) -> dict[str, Any]:
    """A schema for a number given as an integer or a "0x.." string."""
    number: dict[str, Any] = {"type": "integer", "minimum": minimum}
    if maximum is not None:
        number["maximum"] = maximum
    return {"description": description, "anyOf": [number, {"type": "string", "pattern": HEX_PATTERN}]}


def bytes_schema(description: str, max_items: int) -> dict[str, Any]:
    """Bytes as an array of 0-255 integers or as a hex string ("de ad be ef" or "deadbeef")."""
    return {
        "description": description,
        "anyOf": [
            {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": 255},
                "maxItems": max_items,
            },
            {"type": "string", "pattern": "^(0[xX])?[0-9a-fA-F ]*$", "maxLength": max_items * 3 + 2},
        ],
    }


def number(args: Args, name: str, *, lo: int = 0, hi: int | None = None, default: int | None = None) -> int:
    """An integer argument (integer or "0x.." string), range-checked; refusal names the argument."""
    value = args.get(name, default)
    if value is None:
        raise ToolRefused(f"argument {name!r} is required for this action")
    if isinstance(value, str):
        value = int(value, 16)
    if value < lo or (hi is not None and value > hi):
        shown = f"0x{value:x}" if value > 9 else str(value)
        upper = f"0x{hi:x}" if hi is not None and hi > 9 else str(hi)
        raise ToolRefused(f"argument {name!r} must be in {lo}..{upper}, got {shown}")
    return int(value)


def optional_number(args: Args, name: str, *, lo: int = 0, hi: int | None = None) -> int | None:
    return None if args.get(name) is None else number(args, name, lo=lo, hi=hi)


def data_bytes(args: Args, name: str, *, max_len: int, required: bool = True) -> bytes:
    value = args.get(name)
    if value is None:
        if required:
            raise ToolRefused(f"argument {name!r} is required for this action")
        return b""
    if isinstance(value, str):
        text = value.replace(" ", "")
        text = text[2:] if text[:2].lower() == "0x" else text
        if len(text) % 2:
            raise ToolRefused(f"argument {name!r}: a hex string needs an even number of digits")
        data = bytes.fromhex(text)
    else:
        data = bytes(value)
    if not data and required:
        raise ToolRefused(f"argument {name!r} must hold at least one byte")
    if len(data) > max_len:
        raise ToolRefused(f"argument {name!r} holds {len(data)} bytes; at most {max_len} per call")
    return data


def hexbytes(data: bytes) -> str:
    """Bytes as spaced hex ("de ad be ef"). Always spaced in output: an unbroken run of hex digits
    looks like a credential to the scrubber, and is harder for a model to count anyway."""
    return data.hex(" ")


def hex_dump(base: int, data: bytes, width: int = 16) -> str:
    """Classic hex dump lines: address, bytes, ASCII."""
    lines = []
    for i in range(0, len(data), width):
        chunk = data[i : i + width]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"0x{base + i:08x}  {chunk.hex(' '):<{width * 3 - 1}}  {text}")
    return "\n".join(lines)


def result(payload: dict[str, Any], text: str) -> ToolResult:
    """The figures as data, and one text that reads well to a person and to the model."""
    return ToolResult(for_llm=text, data=payload)


def action_of(args: Args) -> str:
    return str(args.get("action", ""))
