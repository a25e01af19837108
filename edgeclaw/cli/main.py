"""`edgeclaw` command line: parse, then run the command chosen, importing only what it needs.

`edgeclaw --version` must stay fast on a small board, so nothing beyond
argparse is imported until a command has been chosen; then only that
command's module (`edgeclaw.cli.<module>`) is loaded.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from edgeclaw.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_REFUSED,
    EXIT_TOOL_ERROR,
    print_config_errors,
    setup_logging,
)
from edgeclaw.cli.parser import COMMAND_PARSERS, build_parser

# Each command's module under edgeclaw.cli and the function in it that runs the command.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "cmd_run"),
    "try": ("first_run", "cmd_try"),
    "chat": ("chat", "cmd_chat"),
    "tools": ("tool", "cmd_tools"),
    "tool": ("tool", "cmd_tool_call"),
    "config": ("config", "cmd_config"),
    "status": ("status", "cmd_status"),
    "board": ("board", "cmd_board"),
    "doctor": ("doctor", "cmd_doctor"),
    "approvals": ("approvals", "cmd_approvals"),
    "console": ("console", "cmd_console_hash_pin"),
    "memory": ("memory", "cmd_memory"),
    "cron": ("cron", "cmd_cron"),
    "mcp": ("mcp", "cmd_mcp"),
    "fleet": ("fleet", "cmd_fleet"),
}


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, letting `tool call`'s JSON come after the options (`tool call i2c --board sim '{..}'`).

    argparse fills an optional positional at its first chance, so a JSON written after the
    options is left over; it is taken here, and anything else left over is an error as usual.
    """
    args, extra = parser.parse_known_args(argv)
    if (
        extra
        and getattr(args, "command", None) == "tool"
        and getattr(args, "args", "") is None
        and len(extra) == 1
        and not extra[0].startswith("-")
    ):
        args.args, extra = extra[0], []
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "command", None) == "tool" and args.args is None:
        args.args = "{}"
    return args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # `edgeclaw ... | head`: the reader has gone. Say nothing more (no traceback) and keep the
        # interpreter's final flush from failing again on the closed pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    # A command named first needs only its own part of the parser (its --help and errors read the
    # same); anything else (no command, a misspelt one, --help) gets the whole of it.
    parser = build_parser(given[0] if given and given[0] in COMMAND_PARSERS else None)
    args = _parse(parser, argv)
    if args.command is None:
        parser.print_help()
        return EXIT_REFUSED
    if args.command != "run":
        setup_logging(getattr(args, "log_level", None))
    from edgeclaw.errors import ConfigErrors, EdgeclawError  # no imports of its own: --version stays fast

    try:
        module, function = COMMANDS[args.command]
        status = getattr(importlib.import_module(f"edgeclaw.cli.{module}"), function)(args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at interpreter exit
        return status
    except ConfigErrors as e:
        # A bad config or board profile refuses the command (exit 2); config check and doctor report theirs.
        print_config_errors(e)
        return EXIT_REFUSED
    except EdgeclawError as e:  # e.g. the state database cannot be opened
        print(f"edgeclaw: {e}", file=sys.stderr)
        return EXIT_TOOL_ERROR
    except KeyboardInterrupt:  # Ctrl-C in a one-shot command: asyncio.run has cancelled and cleaned up
        print(file=sys.stderr)
        return 130
