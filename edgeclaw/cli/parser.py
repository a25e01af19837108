"""The command line's argparse tree: one function per command adds that command's part.

`edgeclaw run` builds only its own part at every start (see `build_parser`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from edgeclaw import __version__


def _common(parser: argparse.ArgumentParser, board: bool = True) -> None:
    parser.add_argument(
        "--config", metavar="FILE", help="config file (default: $EDGECLAW_CONFIG, /etc/edgeclaw)"
    )
    if board:
        parser.add_argument(
            "--board", metavar="NAME", help="board profile name or file (overrides the config)"
        )
    parser.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="logging threshold"
    )


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line; with `command`, only that command's part: `edgeclaw run` parses its
    arguments at every start, and building every command's parser costs ~10 ms."""
    parser = argparse.ArgumentParser(
        prog="edgeclaw", description="LLM agent daemon for embedded Linux boards."
    )
    parser.add_argument("--version", action="version", version=f"edgeclaw {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, add in COMMAND_PARSERS.items():
        if command is None or name == command:
            add(sub)
    return parser


def _add_run(sub: Any) -> None:
    run = sub.add_parser("run", help="run the daemon in the foreground (systemd's ExecStart)")
    _common(run)


def _add_try(sub: Any) -> None:
    try_ = sub.add_parser(
        "try", help="the daemon on the sim board with its console on this terminal and a local broker"
    )
    _common(try_)
    try_.add_argument(
        "--broker", metavar="HOST:PORT", help="the broker (default: the config's, 127.0.0.1:1883); "
        "started for the session when nothing answers on a local address and mosquitto is installed",
    )  # fmt: skip
    try_.add_argument("--no-broker", action="store_true", help="no MQTT: the console only")


def _add_chat(sub: Any) -> None:
    chat = sub.add_parser("chat", help="chat with the agent on this terminal")
    _common(chat)
    chat.add_argument("--message", metavar="TEXT", help="one turn: print the reply and exit")


def _add_tools(sub: Any) -> None:
    tools = sub.add_parser("tools", help="list the tools")
    tools_sub = tools.add_subparsers(dest="tools_command", metavar="SUBCOMMAND", required=True)
    tlist = tools_sub.add_parser("list", help="the tools the policy lets through, with groups")
    _common(tlist)
    tlist.add_argument("--json", action="store_true", help="print JSON")
    tlist.add_argument(
        "--profile", metavar="P", help="evaluate with this policy profile instead of the config's"
    )
    sizes = tools_sub.add_parser(
        "sizes", help="per tools profile: its tools on this board, their definitions' bytes and tokens"
    )
    _common(sizes)
    sizes.add_argument("--json", action="store_true", help="print JSON")


def _add_tool(sub: Any) -> None:
    tool = sub.add_parser("tool", help="call one tool")
    tool_sub = tool.add_subparsers(dest="tool_command", metavar="SUBCOMMAND", required=True)
    call = tool_sub.add_parser("call", help="one call through the full registry path")
    _common(call)
    call.add_argument("name", help="tool name")
    # Default None, not "{}": main() tells a missing JSON from one written after the options.
    call.add_argument("args", nargs="?", default=None, help="arguments as a JSON object (default {})")
    call.add_argument("--dry-run", action="store_true", help="run every check, but not the tool body")
    call.add_argument("--json", action="store_true", help="print one JSON object")


def _add_config(sub: Any) -> None:
    config = sub.add_parser("config", help="configuration")
    config_sub = config.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    check = config_sub.add_parser("check", help="validate a config file")
    check.add_argument("file", nargs="?", help="config file (default: the one `run` would use)")
    show_config = config_sub.add_parser("show", help="the effective configuration (secrets redacted)")
    _common(show_config)
    init = config_sub.add_parser("init", help="a commented sample configuration")
    init.add_argument("file", nargs="?", help="write it here (refused if the file exists); default stdout")


def _add_status(sub: Any) -> None:
    status = sub.add_parser("status", help="ask the running daemon what it is doing")
    _common(status, board=False)
    status.add_argument("--json", action="store_true", help="print JSON")


def _add_board(sub: Any) -> None:
    board = sub.add_parser("board", help="board profiles")
    board_sub = board.add_subparsers(dest="board_command", metavar="SUBCOMMAND", required=True)
    board_sub.add_parser("detect", help="which profile this board matches")
    show = board_sub.add_parser("show", help="what a profile allows")
    show.add_argument("name", help="profile name or file")


def _add_doctor(sub: Any) -> None:
    doctor = sub.add_parser("doctor", help="check buses, permissions, sandbox, broker and provider")
    _common(doctor)


def _add_approvals(sub: Any) -> None:
    approvals = sub.add_parser("approvals", help="stored allow-always decisions for shell commands")
    approvals_sub = approvals.add_subparsers(dest="approvals_command", metavar="SUBCOMMAND", required=True)
    alist = approvals_sub.add_parser("list", help="every stored decision, with its id")
    _common(alist, board=False)
    alist.add_argument("--json", action="store_true", help="print JSON")
    arevoke = approvals_sub.add_parser("revoke", help="delete a stored decision (asked about again)")
    _common(arevoke, board=False)
    arevoke.add_argument("id", type=int, help="the id shown by `approvals list`")


def _add_memory(sub: Any) -> None:
    memory = sub.add_parser("memory", help="the memory store and context files as plain files")
    memory_sub = memory.add_subparsers(dest="memory_command", metavar="SUBCOMMAND", required=True)
    mexport = memory_sub.add_parser("export", help="write memory and context files into a new directory")
    _common(mexport, board=False)
    mexport.add_argument("dir", help="a directory that does not exist yet (or is empty)")
    mimport = memory_sub.add_parser("import", help="take a directory written by export back in")
    _common(mimport, board=False)
    mimport.add_argument("dir", help="the directory")
    mimport.add_argument(
        "--replace", action="store_true", help="also delete what the directory does not hold"
    )
    mreindex = memory_sub.add_parser("reindex", help="chunk, index and embed every document again")
    _common(mreindex, board=False)


def _add_mcp(sub: Any) -> None:
    mcp = sub.add_parser("mcp", help="MCP: edgeclaw's tools for MCP clients")
    mcp_sub = mcp.add_subparsers(dest="mcp_command", metavar="SUBCOMMAND", required=True)
    mserve = mcp_sub.add_parser("serve", help="serve the tools to one MCP client on stdin/stdout")
    _common(mserve)


def _add_fleet(sub: Any) -> None:
    fleet = sub.add_parser("fleet", help="the fleet page: a web view of the devices on a broker")
    fleet_sub = fleet.add_subparsers(dest="fleet_command", metavar="SUBCOMMAND", required=True)
    fserve = fleet_sub.add_parser("serve", help="serve the fleet page (runs until stopped)")
    _common(fserve, board=False)
    fserve.add_argument("--broker", metavar="HOST:PORT", help="the broker (default: [mqtt] host and port)")
    fserve.add_argument("--listen", metavar="HOST:PORT", help="where to serve (default: fleet_page.listen)")
    fserve.add_argument(
        "--share-group",
        metavar="NAME",
        help="write the history through this MQTT shared subscription group "
        "(default: fleet_page.share_group)",
    )


def _add_console(sub: Any) -> None:
    console = sub.add_parser("console", help="the serial console")
    console_sub = console.add_subparsers(dest="console_command", metavar="SUBCOMMAND", required=True)
    hash_pin = console_sub.add_parser(
        "hash-pin", help="print a hash of a PIN or password for console.login_hash"
    )
    hash_pin.add_argument("--stdin", action="store_true", help="read the PIN from standard input, no prompt")
    hash_pin.add_argument(
        "--algorithm", choices=["scrypt", "pbkdf2-sha256"], default="scrypt", help="default: scrypt"
    )


def _add_cron(sub: Any) -> None:
    cron = sub.add_parser("cron", help="scheduled jobs (a tool call or a prompt, on a schedule)")
    cron_sub = cron.add_subparsers(dest="cron_command", metavar="SUBCOMMAND", required=True)
    clist = cron_sub.add_parser("list", help="the jobs, with their next run and last outcome")
    _common(clist, board=False)
    clist.add_argument("--json", action="store_true", help="print JSON")
    add = cron_sub.add_parser("add", help="add a job")
    _common(add, board=False)
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--every", metavar="INTERVAL", help="an interval: 90s, 5m, 1h30m")
    when.add_argument("--cron", metavar="EXPR", help="five cron fields, or @hourly, @daily ...")
    when.add_argument("--at", metavar="WHEN", help="once: ISO 8601, 'in 10 minutes', 'tomorrow 07:00'")
    when.add_argument(
        "--on-edge",
        metavar="PIN[:EDGE[:MS]]",
        help="on an edge of an input pin: button, 27:falling, button:active:50 (debounce ms)",
    )
    what = add.add_mutually_exclusive_group(required=True)
    what.add_argument("--tool", metavar="NAME", help="call this tool directly (no model)")
    what.add_argument("--prompt", metavar="TEXT", help="a message for the agent, a turn of its own")
    add.add_argument("--args", metavar="JSON", default=None, help="the tool's arguments (a JSON object)")
    add.add_argument("--agent", metavar="NAME", help="the agent that runs --prompt (default main)")
    add.add_argument(
        "--to", metavar="TARGET", action="append", help="mqtt:TOPIC, console[:PORT], memory, none (repeat it)"
    )
    add.add_argument("--name", help="a short name")
    add.add_argument("--tz", metavar="ZONE", help="IANA time zone for --cron and times of day")
    add.add_argument("--catch-up", choices=["skip", "once"], help="slots missed while off (default skip)")
    add.add_argument("--jitter", metavar="DURATION", help="a random delay up to this, e.g. 30s")
    add.add_argument("--json", action="store_true", help="print JSON")
    for name, text in (("remove", "delete a job and its runs"), ("run", "run a job now, as its owner")):
        p = cron_sub.add_parser(name, help=text)
        _common(p, board=False)
        p.add_argument("id", help="the job's id (or its name)")
        p.add_argument("--json", action="store_true", help="print JSON")
    runs = cron_sub.add_parser("runs", help="recent runs with outcome and duration")
    _common(runs, board=False)
    runs.add_argument("id", nargs="?", help="one job's runs (default: every job's)")
    runs.add_argument("--limit", type=int, default=10, help="how many (1-50)")
    runs.add_argument("--json", action="store_true", help="print JSON")


# Each command's part of the parser, in the order `edgeclaw --help` lists them.
COMMAND_PARSERS: dict[str, Callable[[Any], None]] = {
    "run": _add_run,
    "try": _add_try,
    "chat": _add_chat,
    "tools": _add_tools,
    "tool": _add_tool,
    "config": _add_config,
    "status": _add_status,
    "board": _add_board,
    "doctor": _add_doctor,
    "approvals": _add_approvals,
    "memory": _add_memory,
    "cron": _add_cron,
    "mcp": _add_mcp,
    "fleet": _add_fleet,
    "console": _add_console,
}
