"""`edgeclaw status`: what the running daemon says about itself, for a person."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from edgeclaw.cli.common import EXIT_OK, EXIT_TOOL_ERROR, config_of


def cmd_status(args: argparse.Namespace) -> int:
    from edgeclaw.config.paths import state_dir
    from edgeclaw.daemon.control import ControlError, ask_status, socket_path

    path = socket_path(state_dir(config_of(args).state_dir))
    try:
        status = ask_status(path)
    except ControlError as e:
        print(f"edgeclaw: {e}", file=sys.stderr)
        return EXIT_TOOL_ERROR
    if args.json:
        print(json.dumps(status, ensure_ascii=False))
        return EXIT_OK
    for line in _status_lines(status):
        print(line)
    return EXIT_OK


def _status_lines(status: dict[str, Any]) -> list[str]:
    """The daemon's status for a person: the daemon, its tools, its state database, each channel."""
    board = f"{status.get('board', '?')}{' (simulated)' if status.get('simulated_board') else ''}"
    lines = [
        f"edgeclaw {status.get('version', '?')} (pid {status.get('pid', '?')}): {status.get('state', '?')}, "
        f"up {_duration(status.get('uptime_s', 0))}",
        f"device {status.get('device', '?')}, board {board}",
    ]
    tools = status.get("tools") or {}
    if tools:
        lines.append(
            f"tools: {tools.get('registered', 0)} registered, {tools.get('in_flight', 0)} running; "
            f"{tools.get('calls', 0)} calls ({tools.get('errors', 0)} failed, "
            f"{tools.get('refused', 0)} refused)"
        )
    state_db = status.get("state_db")
    if isinstance(state_db, dict):
        words = ", ".join(f"{k}: {v}" for k, v in state_db.items() if v not in (None, "", [], {}))
        lines.append(f"state database: {words or 'ok'}")
    for name, server in (status.get("mcp") or {}).items():
        if isinstance(server, dict):
            state = server.get("state", "?")
            why = f" ({server['error']})" if server.get("error") and state != "connected" else ""
            lines.append(f"mcp server {name}: {state}, {server.get('tools', 0)} tools{why}")
    for name, snapshot in (status.get("channels") or {}).items():
        if isinstance(snapshot, dict) and snapshot:
            words = ", ".join(f"{k} {v}" for k, v in snapshot.items() if not isinstance(v, dict | list))
            lines.append(f"{name}: {words}")
        else:
            lines.append(f"{name}: running")
    return lines


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"
