"""The Model Context Protocol's fixed vocabulary: revisions, JSON-RPC shapes and error codes.

Shared by edgeclaw's MCP client (this package) and its MCP server
(`edgeclaw.channels.mcp`), so both sides speak the same revisions and say
the same things about bad messages.
"""

from __future__ import annotations

import json
from typing import Any

from edgeclaw.errors import BackendError

# The revisions that start with the `initialize` handshake, newest first. A client offers the
# newest; a server answers with the client's revision when it knows it, else its own newest, and
# the client hangs up on an answer it does not know.
PROTOCOL_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST_VERSION = PROTOCOL_VERSIONS[0]

# JSON-RPC's codes, and MCP's own.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_TIMEOUT = -32001  # MCP: the request was given up (answered by the side that gave up)

# A message bigger than this is refused, whichever side sends it: tool results are capped by the
# registry far below it, and a line this long from a server is a runaway.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024


class McpError(BackendError):
    """An MCP exchange failed. `code` is the JSON-RPC error code when the peer sent one."""

    def __init__(self, message: str, code: int | None = None, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class McpClosed(McpError):
    """The connection to the peer is gone (the process exited, the stream ended, we closed it)."""


class McpTimeout(McpError):
    """The peer did not answer in time; the request was cancelled on its side."""


def request(id_: int | str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        message["params"] = params
    return message


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def result(id_: int | str | None, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": value}


def error(id_: int | str | None, code: int, message: str, data: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": body}


def encode(message: dict[str, Any]) -> bytes:
    """One message as compact UTF-8 JSON: never a newline inside (stdio frames by lines)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def decode(data: bytes | str) -> list[dict[str, Any]]:
    """The messages in one frame (a JSON-RPC batch is a list). McpError for anything that is not
    JSON-RPC objects."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise McpError(f"not JSON: {e}", PARSE_ERROR) from None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(m, dict) for m in items):
        raise McpError("not a JSON-RPC message (expected an object)", INVALID_REQUEST)
    return items


def is_response(message: dict[str, Any]) -> bool:
    return "method" not in message and ("result" in message or "error" in message)
