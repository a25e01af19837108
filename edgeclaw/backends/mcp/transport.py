"""What an MCP transport is: a way to send JSON-RPC messages to a server and hear its own.

A transport is opened with two callbacks: `deliver(message)` for each message
the server sends, and `lost(reason)` once, when the connection ends for any
reason other than our `close()`. The session (`session.py`) does the rest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

Deliver = Callable[[dict[str, Any]], None]
Lost = Callable[[str], None]


class Transport(ABC):
    kind: str = ""

    @abstractmethod
    async def open(self, deliver: Deliver, lost: Lost) -> None:
        """Connect (start the program, open the event stream); McpError when that fails."""

    @abstractmethod
    async def send(self, message: dict[str, Any]) -> None:
        """Send one message; McpClosed when the connection is gone."""

    @abstractmethod
    async def close(self) -> None:
        """Hang up and release everything (the program, the HTTP session). Idempotent."""

    def negotiated(self, protocol_version: str) -> None:  # noqa: B027
        """The handshake settled on this revision (HTTP sends it on every later request)."""

    def describe(self) -> str:
        """Where the server is, for status lines (never a header value)."""
        return self.kind
