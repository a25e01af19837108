"""`edgeclaw mcp serve`: the tools for one MCP client on stdin/stdout."""

from __future__ import annotations

import argparse
import os

from edgeclaw.cli.common import EXIT_OK, config_of


def cmd_mcp(args: argparse.Namespace) -> int:
    """`edgeclaw mcp serve`: the registry as an MCP server on stdio (channel `mcp`)."""
    import asyncio

    from edgeclaw.config.paths import current_user
    from edgeclaw.daemon.mcp_server import serve_stdio
    from edgeclaw.daemon.runtime import build_runtime

    # stdout carries the protocol and nothing else: the protocol gets its own copy of it, and
    # file descriptor 1 (print, a library's output, anything started from here) becomes stderr.
    protocol_in = os.fdopen(os.dup(0), "rb", buffering=0)
    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    runtime = build_runtime(config_of(args), board=args.board, require_secrets=False)

    async def serve() -> None:
        try:
            await serve_stdio(runtime, f"mcp:stdio:{current_user()}", protocol_in, protocol_out)
        finally:
            await runtime.aclose()

    asyncio.run(serve())
    return EXIT_OK
