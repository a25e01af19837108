"""Server-sent events, as both HTTP transports receive them: lines in, events out."""

from __future__ import annotations

from collections.abc import AsyncIterator

from edgeclaw.backends.mcp.protocol import MAX_MESSAGE_BYTES, McpError
from edgeclaw.records import dataclass


@dataclass(slots=True)
class Event:
    event: str
    data: str
    id: str = ""


async def events(lines: AsyncIterator[str]) -> AsyncIterator[Event]:
    """The events in an SSE stream (`text/event-stream`): `event:`, `data:` (joined by newlines)
    and `id:` fields, an event per blank line; comments (`:`) and `retry:` ignored."""
    name, data, size, last_id = "", [], 0, ""
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield Event(name or "message", "\n".join(data), last_id)
            name, data, size = "", [], 0
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            size += len(value)
            if size > MAX_MESSAGE_BYTES:
                raise McpError(f"an event of more than {MAX_MESSAGE_BYTES} bytes from the server")
            data.append(value)
        elif field == "id":
            last_id = value
    if data:
        yield Event(name or "message", "\n".join(data), last_id)
