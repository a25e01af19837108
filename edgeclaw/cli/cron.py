"""`edgeclaw cron ...`: the `cron` tool's actions as commands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from edgeclaw.cli.common import EXIT_REFUSED
from edgeclaw.cli.tool import call_daemon_tool


def cmd_cron(args: argparse.Namespace) -> int:
    """`edgeclaw cron ...`: the `cron` tool, in the running daemon when there is one."""
    command = args.cron_command
    tool_args: dict[str, Any] = {"action": command}
    if command in ("remove", "run"):
        tool_args["id"] = args.id
    elif command == "runs":
        if args.id:
            tool_args["id"] = args.id
        tool_args["limit"] = args.limit
    elif command == "add":
        for key in ("every", "cron", "at", "tool", "prompt", "agent", "name", "tz", "jitter"):
            if getattr(args, key) is not None:
                tool_args[key] = getattr(args, key)
        if args.catch_up:
            tool_args["catch_up"] = args.catch_up
        if args.on_edge is not None:
            pin, _, rest = args.on_edge.partition(":")
            edge, _, debounce = rest.partition(":")
            trigger: dict[str, Any] = {"pin": int(pin) if pin.isdigit() else pin}
            if edge:
                trigger["edge"] = edge
            if debounce:
                if not debounce.isdigit():
                    print(f"edgeclaw: --on-edge: expected ms, got {debounce!r}", file=sys.stderr)
                    return EXIT_REFUSED
                trigger["debounce_ms"] = int(debounce)
            tool_args["on_edge"] = trigger
        if args.args is not None:
            try:
                tool_args["args"] = json.loads(args.args)
            except json.JSONDecodeError as e:
                print(f"edgeclaw: --args is not valid JSON: {e.msg} at position {e.pos}", file=sys.stderr)
                return EXIT_REFUSED
        tool_args["to"] = args.to or ["none"]
    return call_daemon_tool(args, "cron", tool_args)
