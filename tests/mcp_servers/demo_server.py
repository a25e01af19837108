"""A small MCP server built with the official SDK, for the client tests and the bench.

python demo_server.py [--transport stdio|sse|streamable-http] [--port N] [--broken]

Tools: `echo`, `add`, `slow` (sleeps, reporting progress; for timeouts and
kills), `picture` (an image), `pid` (the server process's pid, to tell a
restarted server from the old one), `env`, `read` and `connect` (what the
server can see and reach: its environment, a file, a loopback port), `grow`
(adds a tool and announces the changed list). `--broken` gives `add` an input schema
that is not valid JSON Schema (a type that does not exist).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image

# A 1x1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c63000100000500010d0a2db40000000049454e44ae426082"
)


def build(broken: bool) -> MCPServer:
    server = MCPServer("edgeclaw-demo")

    @server.tool(description="Say the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(description="Sleep, reporting progress each tenth; a cancelled sleep writes `marker`.")
    async def slow(seconds: float, ctx: Context, marker: str = "") -> str:
        try:
            for i in range(10):
                await ctx.report_progress(i, 10, f"step {i}")
                await asyncio.sleep(seconds / 10)
        except asyncio.CancelledError:
            if marker:
                Path(marker).write_text("cancelled")  # noqa: ASYNC240 - a test server, one tiny write
            raise
        return "done"

    @server.tool(description="A variable of the server's environment.")
    def env(name: str) -> str:
        return os.environ.get(name, "(unset)")

    @server.tool(description="Open a TCP connection to 127.0.0.1:port, and say whether it worked.")
    def connect(port: int) -> str:
        try:
            socket.create_connection(("127.0.0.1", port), 2).close()
        except OSError as e:
            return f"no connection: {e.strerror or e}"
        return "connected"

    @server.tool(
        description="Add a tool named `name` (it says `name`), and tell the client the list changed."
    )
    async def grow(name: str, ctx: Context) -> str:
        server.add_tool(lambda: name, name=name, description=f"Say {name}.")
        await ctx.session.send_tool_list_changed()
        return f"added {name}"

    @server.tool(description="Read a file, or say why not.")
    def read(path: str) -> str:
        try:
            return Path(path).read_text()
        except OSError as e:
            return f"cannot read: {e.strerror}"

    @server.tool(description="A tiny picture.")
    def picture() -> Image:
        return Image(data=PNG, format="png")

    @server.tool(description="The server's process id.")
    def pid() -> str:
        return str(os.getpid())

    if broken:
        server._tool_manager.get_tool("add").parameters = {
            "type": "object",
            "properties": {"a": {"type": "integr"}, "b": {"type": "integer"}},
        }
    return server


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transport", default="stdio")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--broken", action="store_true")
    args = ap.parse_args()
    server = build(args.broken)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run(args.transport, host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
