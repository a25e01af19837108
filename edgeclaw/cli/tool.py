"""`edgeclaw tool call` and `edgeclaw tools list`: the registry from this shell, or a daemon tool
in the running daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from edgeclaw.cli.common import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_TOOL_ERROR,
    EXIT_WOULD_ASK,
    config_of,
    print_config_errors,
)


def cmd_tool_call(args: argparse.Namespace) -> int:
    import asyncio

    from edgeclaw.config.paths import current_user
    from edgeclaw.daemon.control import CONTROL_TOOLS
    from edgeclaw.daemon.runtime import build_runtime
    from edgeclaw.errors import ConfigErrors
    from edgeclaw.tools.base import ToolContext

    if args.name in CONTROL_TOOLS and not args.dry_run:
        # The daemon's own tools act on the running daemon when there is one.
        shape = daemon_call(config_of(args), args.name, args.args)
        if shape is not None:
            return print_outcome(shape, args.json)
    try:
        # Secrets are not required: one tool call needs no broker password or model key, and a secret
        # this shell does not have cannot show up in a tool's output either.
        runtime = build_runtime(config_of(args), board=args.board, require_secrets=False)
    except ConfigErrors as e:
        print_config_errors(e)
        if args.json:  # the promised one JSON object, for scripts that parse stdout
            refusal = f"configuration error: {e}"
            shape = {"ok": False, "tool": args.name, "for_llm": refusal, "for_user": None}
            print(json.dumps({**shape, "error": refusal, "duration_ms": 0.0}, ensure_ascii=False))
        return EXIT_REFUSED
    from edgeclaw.channels.cli_progress import TerminalProgress

    user = current_user()
    # A long call's progress: a bar on a terminal, plain lines otherwise; on stderr, beside the answer.
    progress = TerminalProgress(quiet=args.json)
    ctx = ToolContext(
        channel="cli",
        peer_kind="local",
        session_key=f"cli:{os.getuid()}",
        sender=user,
        caller=f"cli:{user}",  # rate limits and ownership follow the user, not the session name
        progress=progress,
    )
    if sys.stdin.isatty():
        # Approval questions go to this terminal; without one the broker has nobody to ask (= deny).
        from edgeclaw.channels.cli_approver import TerminalApprover

        runtime.approvals.register("cli", TerminalApprover())

    async def call_once() -> Any:
        try:
            if runtime.mcp is not None and args.name.startswith("mcp_"):
                await runtime.mcp.start()  # the MCP servers' tools are there once connected
            return await runtime.registry.execute(args.name, args.args, ctx, dry_run=args.dry_run)
        finally:
            progress.close()
            await runtime.aclose()  # release buses and child processes (the sim board's QEMU)

    outcome = asyncio.run(call_once())
    if args.json:
        print(json.dumps(outcome.as_dict(), ensure_ascii=False))
    elif outcome.ok:
        text = outcome.for_user if outcome.for_user is not None else outcome.for_llm
        print(text, end="" if text.endswith("\n") else "\n")  # a command's output has its own newline
    else:
        print(f"edgeclaw: {outcome.error}", file=sys.stderr)
    if outcome.ok:
        return EXIT_WOULD_ASK if outcome.stage == "dry_run_approval" else EXIT_OK
    return EXIT_REFUSED if outcome.refused else EXIT_TOOL_ERROR


def daemon_call(config: Any, tool: str, tool_args: Any) -> dict[str, Any] | None:
    """A call of one of the daemon's own tools (cron, schedule, gateway) made in the running daemon,
    so its scheduler and state see it at once; None when no daemon answers (then it runs here)."""
    from edgeclaw.config.paths import state_dir
    from edgeclaw.daemon.control import ControlError, NoDaemon, call_tool, socket_path

    try:
        return call_tool(socket_path(state_dir(config.state_dir)), tool, tool_args)
    except NoDaemon:
        return None
    except ControlError as e:
        refusal = f"the running daemon could not be asked: {e}"
        return {"ok": False, "tool": tool, "for_llm": refusal, "for_user": None, "error": refusal,
                "duration_ms": 0.0, "refused": True}  # fmt: skip


def call_daemon_tool(args: argparse.Namespace, tool: str, tool_args: Any) -> int:
    config = config_of(args)
    shape = daemon_call(config, tool, tool_args)
    if shape is None:  # no daemon: the same tool in this process, on the same database
        import asyncio

        from edgeclaw.config.paths import current_user
        from edgeclaw.daemon.runtime import build_runtime
        from edgeclaw.tools.base import ToolContext

        runtime = build_runtime(config, require_secrets=False)
        user = current_user()
        ctx = ToolContext(channel="cli", peer_kind="local", session_key=f"cli:{os.getuid()}", sender=user,
                          caller=f"cli:{user}")  # fmt: skip

        async def once() -> Any:
            try:
                return await runtime.registry.execute(tool, tool_args, ctx)
            finally:
                await runtime.aclose()

        outcome = asyncio.run(once())
        shape = {**outcome.as_dict(), "refused": outcome.refused}
    return print_outcome(shape, getattr(args, "json", False))


def print_outcome(shape: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print(json.dumps({k: v for k, v in shape.items() if k != "refused"}, ensure_ascii=False))
    elif shape.get("ok"):
        text = shape.get("for_user") if shape.get("for_user") is not None else shape.get("for_llm", "")
        print(text, end="" if str(text).endswith("\n") else "\n")
    else:
        print(f"edgeclaw: {shape.get('error')}", file=sys.stderr)
    if shape.get("ok"):
        return EXIT_OK
    return EXIT_REFUSED if shape.get("refused") else EXIT_TOOL_ERROR


def cmd_tools(args: argparse.Namespace) -> int:
    return cmd_tools_sizes(args) if args.tools_command == "sizes" else cmd_tools_list(args)


def cmd_tools_sizes(args: argparse.Namespace) -> int:
    import asyncio

    from edgeclaw.cli.tool_sizes import profile_sizes, sizes_table
    from edgeclaw.daemon.runtime import build_runtime

    runtime = build_runtime(config_of(args), board=args.board, require_secrets=False)
    try:
        sizes = profile_sizes(runtime.registry)
    finally:
        asyncio.run(runtime.aclose())
    if args.json:
        import dataclasses

        print(json.dumps([dataclasses.asdict(s) for s in sizes]))
    else:
        print(sizes_table(sizes))
    return EXIT_OK


def cmd_tools_list(args: argparse.Namespace) -> int:
    import dataclasses

    from edgeclaw.daemon.runtime import build_runtime
    from edgeclaw.tools.base import ToolContext

    config = config_of(args)
    if args.profile:
        from edgeclaw.config.checks import check_config

        config.tools = dataclasses.replace(config.tools, profile=args.profile)
        check_config(config)
    runtime = build_runtime(config, board=args.board, require_secrets=False)
    ctx = ToolContext(channel="cli", session_key="cli:list")
    if runtime.mcp is not None:
        import asyncio

        async def with_mcp_tools() -> list[Any]:
            # The MCP servers' tools exist only while they are connected: list them then.
            try:
                await runtime.mcp.start()  # type: ignore[union-attr]
                return runtime.registry.infos(ctx)
            finally:
                await runtime.aclose()

        infos = asyncio.run(with_mcp_tools())
    else:
        infos = runtime.registry.infos(ctx)
    if args.json:
        # With each tool's JSON schema, so a client can build a form for it (the fleet page does).
        print(
            json.dumps(
                [
                    {"name": i.name, "group": i.group, "description": i.description, "parameters": p}
                    for i in infos
                    for p in [i.parameters]
                ]
            )
        )
        return EXIT_OK
    width = max((len(i.name) for i in infos), default=4)
    for info in infos:
        print(f"{info.name:<{width}}  {info.group:<10}  {info.description.split('. ')[0].rstrip('.')}")
    return EXIT_OK
