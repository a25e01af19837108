"""`edgeclaw` command line: argparse entry points, each importing only what it needs.

`edgeclaw --version` must stay fast on a small board, so nothing beyond
argparse is imported until a command has been chosen.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from edgeclaw import __version__

EXIT_OK = 0
EXIT_TOOL_ERROR = 1
EXIT_REFUSED = 2  # refused before running, or a usage / configuration error
EXIT_WOULD_ASK = 3  # `tool call --dry-run`: the checks passed, but the call would ask a person first
EXIT_BROKEN_PIPE = 141  # what a shell reports for a program ended by SIGPIPE (128 + 13)


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


def _setup_logging(level: str | None, default: str = "warning") -> None:
    logging.basicConfig(
        level=(level or default).upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _load(args: argparse.Namespace) -> Any:
    from edgeclaw.config import load_config

    return load_config(getattr(args, "config", None))


def _print_config_errors(err: Exception) -> None:
    print(f"edgeclaw: configuration error:\n{err}", file=sys.stderr)


def _warn_missing_secrets(config: Any) -> None:
    """A secret the config names but this shell lacks: the service may get it from systemd, so warn only."""
    from edgeclaw.config.secrets import resolve_secrets

    for problem in resolve_secrets(config)[1]:
        print(f"warning: {problem}", file=sys.stderr)


def cmd_tool_call(args: argparse.Namespace) -> int:
    import asyncio

    from edgeclaw.config.paths import current_user
    from edgeclaw.daemon.control import CONTROL_TOOLS
    from edgeclaw.daemon.runtime import build_runtime
    from edgeclaw.errors import ConfigErrors
    from edgeclaw.tools.base import ToolContext

    if args.name in CONTROL_TOOLS and not args.dry_run:
        # The daemon's own tools act on the running daemon when there is one.
        shape = _daemon_call(_load(args), args.name, args.args)
        if shape is not None:
            return _print_outcome(shape, args.json)
    try:
        # Secrets are not required: one tool call needs no broker password or model key, and a secret
        # this shell does not have cannot show up in a tool's output either.
        runtime = build_runtime(_load(args), board=args.board, require_secrets=False)
    except ConfigErrors as e:
        _print_config_errors(e)
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


def _daemon_call(config: Any, tool: str, tool_args: Any) -> dict[str, Any] | None:
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
    return _call_daemon_tool(args, "cron", tool_args)


def _call_daemon_tool(args: argparse.Namespace, tool: str, tool_args: Any) -> int:
    config = _load(args)
    shape = _daemon_call(config, tool, tool_args)
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
    return _print_outcome(shape, getattr(args, "json", False))


def _print_outcome(shape: dict[str, Any], as_json: bool) -> int:
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


def cmd_approvals(args: argparse.Namespace) -> int:
    from edgeclaw.config.paths import state_dir
    from edgeclaw.store.approvals import ApprovalStore
    from edgeclaw.store.db import DB_FILENAME, Database

    state = state_dir(_load(args).state_dir)
    # Listing must not create a state database where there is none.
    store = ApprovalStore(Database.in_state_dir(state)) if (state / DB_FILENAME).exists() else None
    if args.approvals_command == "revoke":
        if store is None or not store.revoke(args.id):
            print(f"edgeclaw: no stored approval with id {args.id}", file=sys.stderr)
            return EXIT_TOOL_ERROR
        print(f"revoked approval {args.id}")
        return EXIT_OK
    rows = store.list() if store is not None else []
    if args.json:
        print(json.dumps([r.as_dict() for r in rows], ensure_ascii=False))
        return EXIT_OK
    if not rows:
        print("no stored approvals")
        return EXIT_OK
    import time

    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created_at))
        who = r.created_by or "?"
        print(f"{r.id:>4}  {r.tool:<10} agent={r.agent_id:<8} {when}  by {who}  uses={r.uses}")
        print(f"      {r.pattern}")
    return EXIT_OK


def cmd_tools_list(args: argparse.Namespace) -> int:
    import dataclasses

    from edgeclaw.daemon.runtime import build_runtime
    from edgeclaw.tools.base import ToolContext

    config = _load(args)
    if args.profile:
        from edgeclaw.config.loader import check_config

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


def cmd_config(args: argparse.Namespace) -> int:
    if args.config_command == "show":
        return cmd_config_show(args)
    if args.config_command == "init":
        return cmd_config_init(args)
    return cmd_config_check(args)


def cmd_config_show(args: argparse.Namespace) -> int:
    import dataclasses

    from edgeclaw import board as boards
    from edgeclaw.config.paths import device_id, state_dir
    from edgeclaw.config.render import render_effective
    from edgeclaw.tools.scrub import Scrubber

    config = _load(args)
    if args.board:
        config = dataclasses.replace(config, board=args.board)
    state = state_dir(config.state_dir)
    profile = boards.resolve(config.board, "--board" if args.board else config._source)
    header = [
        f"effective configuration from {config._source}",
        f"device id: {device_id(config.device_id)}",
        f"board: {config.board}" + (f" -> {profile.name}" if profile.name != config.board else ""),
        f"state directory: {state}",
        f"workspace: {config.workspace or state / 'workspace'}",
        "secrets are never inline: only the names of their variables and files are shown",
    ]
    text = render_effective(config, header)
    # Belt and braces: anything shaped like a credential (a URL with a password, a token someone
    # pasted into a description) is redacted like tool output.
    print(Scrubber().scrub(text), end="")
    return EXIT_OK


def cmd_config_init(args: argparse.Namespace) -> int:
    from edgeclaw.config.render import render_sample

    text = render_sample()
    if not args.file:
        print(text, end="")
        return EXIT_OK
    try:
        with open(args.file, "x", encoding="utf-8") as f:  # "x": never overwrite a config
            f.write(text)
    except FileExistsError:
        print(f"edgeclaw: {args.file} exists; not overwriting it", file=sys.stderr)
        return EXIT_REFUSED
    except OSError as e:
        print(f"edgeclaw: cannot write {args.file}: {e.strerror}", file=sys.stderr)
        return EXIT_REFUSED
    print(f"wrote {args.file}", file=sys.stderr)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from edgeclaw.config.paths import state_dir
    from edgeclaw.daemon.control import ControlError, ask_status, socket_path

    path = socket_path(state_dir(_load(args).state_dir))
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


def cmd_config_check(args: argparse.Namespace) -> int:
    from edgeclaw.config import find_config_path, load_config
    from edgeclaw.daemon.runtime import build_runtime
    from edgeclaw.errors import ConfigErrors

    path = find_config_path(args.file)
    try:
        config = load_config(args.file)
        build_runtime(config, require_secrets=False)
    except ConfigErrors as e:
        print(e, file=sys.stderr)
        return EXIT_TOOL_ERROR  # the check ran and found problems: not a refusal
    _warn_missing_secrets(config)
    print(f"{path or 'built-in defaults'}: ok")
    return EXIT_OK


def cmd_board(args: argparse.Namespace) -> int:
    from edgeclaw import board
    from edgeclaw.errors import ConfigErrors

    try:
        if args.board_command == "detect":
            found = board.detect()
            if found is None:
                print(f"no profile matches this machine (the daemon would use {board.FALLBACK_BOARD!r})")
                return EXIT_TOOL_ERROR
            print(found.name)
            return EXIT_OK
        profile = board.load_profile(args.name, "board show")
    except ConfigErrors as e:
        print(e, file=sys.stderr)
        return EXIT_REFUSED
    print(f"{profile.name}: {profile.description}")
    print(f"soc: {profile.soc or 'unknown'}{' (simulated)' if profile.simulated else ''}")
    print(f"file: {profile.path}")
    if profile.models or profile.compatible:
        print(f"detected by: {', '.join(repr(m) for m in (*profile.models, *profile.compatible))}")
    print("grants (anything not listed is refused; writes only where a line says so):")
    for line in board.describe_grants(profile):
        print(f"  {line}")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from edgeclaw.config import find_config_path
    from edgeclaw.daemon.gateway import (
        EXIT_RESTART,
        ConfigTrial,
        hang_guard,
        install_log_ring,
        restart_in_place,
        supervised,
    )
    from edgeclaw.daemon.lifecycle import run_daemon
    from edgeclaw.errors import ConfigErrors

    path = find_config_path(args.config)
    # First which installed version runs (an update on trial, or one that must be rolled back):
    # this may run the current slot's edgeclaw in this process instead (os.execv).
    from edgeclaw.daemon.update import UpdateTrial, launch

    state_dir = _peek_state_dir(path)
    update_rolled_back = launch(state_dir, sys.argv[1:])
    update = UpdateTrial(state_dir)
    # A config applied through the gateway tool is on trial until the daemon is healthy on it.
    trial = ConfigTrial(path) if path is not None else None
    rolled_back = trial.before_start() if trial is not None else None
    ready = False

    decided = False

    def passed() -> None:
        nonlocal ready, decided
        ready = decided = True
        if trial is not None:
            _report_trial(trial.confirm())
        _report_update(update.confirm())

    def failed(why: str) -> None:
        nonlocal decided
        decided = True
        if trial is not None and trial.trying:
            trial.roll_back(why)
        update.roll_back(why)

    try:
        config = _load(args)
        _setup_logging(args.log_level, config.log_level)
        install_log_ring()
        if rolled_back:
            logging.getLogger("edgeclaw.gateway").error("the applied config was rolled back: %s", rolled_back)
        if update_rolled_back:
            logging.getLogger("edgeclaw.update").error("the update was rolled back: %s", update_rolled_back)
        # On trial, the daemon must be healthy by the deadline; a start that hangs is caught too.
        on_trial = (trial is not None and trial.trying) or update.trying
        deadline = config.gateway.health_deadline_s if on_trial else None
        if deadline is not None:
            hang_guard(deadline, lambda: decided, failed)
        code = run_daemon(
            config, board=args.board, on_ready=passed, health_deadline_s=deadline, on_unhealthy=failed
        )
    except (ConfigErrors, Exception) as e:
        config_on_trial = trial is not None and trial.trying
        if not (config_on_trial or update.trying) or ready:
            raise
        _setup_logging(None, "info")
        why = f"{type(e).__name__}: {e}".splitlines()[0]
        if trial is not None and config_on_trial:
            trial.roll_back(why)
        update.roll_back(why)
        code = EXIT_RESTART
    if code == EXIT_RESTART and not supervised():
        restart_in_place()
    return code


def _peek_state_dir(path: Any) -> Any:
    """The state directory the config names (else the default), read without the full load: which
    installed version runs is settled before the config is."""
    import contextlib
    import tomllib
    from pathlib import Path

    from edgeclaw.config.paths import state_dir

    configured = ""
    if path is not None:
        with contextlib.suppress(OSError, ValueError):
            value = tomllib.loads(Path(path).read_text()).get("state_dir", "")
            configured = value if isinstance(value, str) else ""
    return state_dir(configured)


def _report_update(state: dict[str, Any] | None) -> None:
    if state is None:
        return
    log = logging.getLogger("edgeclaw.update")
    if state.get("state") == "applied":
        log.info("the update to %s is in force (healthy)", state.get("slot"))
    else:
        log.error("running on %s: the update to %s was rolled back (%s)", state.get("previous"),
                  state.get("slot"), state.get("reason"))  # fmt: skip


def _report_trial(state: dict[str, Any] | None) -> None:
    if state is None:
        return
    log = logging.getLogger("edgeclaw.gateway")
    if state.get("state") == "applied":
        log.info("the applied config is in force (changed: %s)", ", ".join(state.get("changed", [])))
    else:
        log.error("running on the previous config: the applied one was rolled back (%s)", state.get("reason"))


def cmd_try(args: argparse.Namespace) -> int:
    from edgeclaw.cli.first_run import FirstRunError, run_try

    try:
        return run_try(
            _load(args),
            board=args.board,
            broker=args.broker,
            no_broker=args.no_broker,
            log_level=args.log_level,
        )
    except FirstRunError as e:
        print(f"edgeclaw try: {e}", file=sys.stderr)
        return EXIT_REFUSED


def cmd_chat(args: argparse.Namespace) -> int:
    import asyncio

    config = _load(args)

    async def chat() -> int:
        from edgeclaw.channels.terminal import TerminalChannel, register_approver, register_outlet
        from edgeclaw.daemon.agent import build_agent
        from edgeclaw.daemon.runtime import build_runtime

        # A model key missing from this shell is a warning (the provider will answer 401), not a
        # refusal: slash commands and other providers still work.
        runtime = build_runtime(config, board=args.board, require_secrets=False)
        _warn_missing_secrets(config)
        try:
            terminal = TerminalChannel(build_agent(runtime))
            register_approver(terminal, runtime.approvals)
            register_outlet(terminal, runtime.outlets)  # subagent results and messages sent here
            await runtime.ready()  # subagents an earlier chat left unfinished are reported now
            if args.message is not None:
                # Subagents the turn started are waited for: their results, and the agent's answer
                # to them, are printed before the chat ends.
                settle = runtime.subagents.settled if runtime.subagents is not None else None
                reply = await terminal.one_turn(args.message, settle)
                return EXIT_OK if reply.ok else EXIT_TOOL_ERROR
            return await terminal.interactive_loop(runtime.state_dir / "chat_history")
        finally:
            await runtime.aclose()

    return asyncio.run(chat())


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
    runtime = build_runtime(_load(args), board=args.board, require_secrets=False)

    async def serve() -> None:
        try:
            await serve_stdio(runtime, f"mcp:stdio:{current_user()}", protocol_in, protocol_out)
        finally:
            await runtime.aclose()

    asyncio.run(serve())
    return EXIT_OK


def cmd_console_hash_pin(args: argparse.Namespace) -> int:
    import getpass

    from edgeclaw.config.pin_hash import hash_pin

    if args.stdin or not sys.stdin.isatty():
        pin = sys.stdin.readline().rstrip("\r\n")
    else:
        pin = getpass.getpass("PIN or password: ")
        if getpass.getpass("again: ") != pin:
            print("edgeclaw: the two entries differ", file=sys.stderr)
            return EXIT_REFUSED
    try:
        print(hash_pin(pin, args.algorithm))
    except ValueError as e:
        print(f"edgeclaw: {e}", file=sys.stderr)
        return EXIT_REFUSED
    print(
        'put it in the config: [console] login_hash = "..." (or in a file named by login_hash_file)',
        file=sys.stderr,
    )
    return EXIT_OK


def cmd_memory(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from edgeclaw.cli.memory_files import ExportError, export_memory, import_memory
    from edgeclaw.daemon.runtime import build_runtime

    # The embeddings provider's key may be missing from this shell: reindex then says it could not embed.
    runtime = build_runtime(_load(args), require_secrets=False)
    memory = runtime.memory
    if memory is None:
        print("edgeclaw: memory is off in this configuration (memory.enabled = false)", file=sys.stderr)
        return EXIT_REFUSED
    store, contexts = memory.store, memory.contexts.store

    async def embed() -> str:
        if store.embedder is None:
            return "keyword search only: no embedder is configured (memory.embedder)"
        report = await store.embed_pending()
        done = f"embedded {report.embedded} chunks with {store.embedder.model}"
        return f"{done}, {report.pending} still pending" + (f" ({report.error})" if report.error else "")

    async def run() -> int:
        try:
            if args.memory_command == "export":
                exported = export_memory(store, contexts, Path(args.dir))
                print(
                    f"exported {exported.documents} memory documents and {exported.context_files} "
                    f"context files to {args.dir}"
                )
                return EXIT_OK
            if args.memory_command == "import":
                imported = import_memory(store, contexts, Path(args.dir), replace=args.replace)
                if imported.problems:
                    print(f"edgeclaw: nothing imported from {args.dir}:", file=sys.stderr)
                    for problem in imported.problems:
                        print(f"  {problem}", file=sys.stderr)
                    return EXIT_TOOL_ERROR
                print(
                    f"imported {imported.documents} memory documents and {imported.context_files} context "
                    f"files from {args.dir} ({imported.changed} changed); {await embed()}"
                )
                return EXIT_OK
            documents, chunks, report = await store.rebuild()
            if store.embedder is None:
                done = "keyword search only: no embedder is configured (memory.embedder)"
            else:
                done = (
                    f"embedded {report.embedded} chunks with {store.embedder.model}, {report.pending} pending"
                )
                done += f" ({report.error})" if report.error else ""
            print(f"reindexed {documents} documents into {chunks} chunks; {done}")
            return EXIT_TOOL_ERROR if report.error else EXIT_OK
        except ExportError as e:
            print(f"edgeclaw: {e}", file=sys.stderr)
            return EXIT_TOOL_ERROR
        finally:
            await runtime.aclose()

    return asyncio.run(run())


def cmd_doctor(args: argparse.Namespace) -> int:
    import asyncio

    from edgeclaw.cli.doctor import Finding, diagnose
    from edgeclaw.daemon.runtime import build_runtime
    from edgeclaw.errors import BackendError, ConfigErrors

    try:
        config = _load(args)
        # Missing secrets are reported per provider below rather than stopping the whole check.
        runtime = build_runtime(config, board=args.board, require_secrets=False)
    except ConfigErrors as e:
        print(Finding("FAIL", "config", str(e).replace("\n", "; ")))
        return EXIT_TOOL_ERROR
    except BackendError as e:
        # The state database could not be opened (a newer format, a full disk): say why, and
        # what the database itself looks like, without a runtime.
        from edgeclaw.config.paths import state_dir
        from edgeclaw.cli.doctor import database_findings
        from edgeclaw.store.state import StateStore

        print(Finding("FAIL", "runtime", str(e)))
        store = StateStore(state_dir(config.state_dir), reserve_bytes=config.state.reserve_bytes)
        for finding in database_findings(store, config.state.backup_interval_s):
            print(finding)
        return EXIT_TOOL_ERROR

    async def run() -> list[Finding]:
        try:
            return await diagnose(runtime)
        finally:
            await runtime.aclose()

    findings = [Finding("ok", "config", runtime.config._source), *asyncio.run(run())]
    for finding in findings:
        print(finding)
    return EXIT_TOOL_ERROR if any(f.level == "FAIL" for f in findings) else EXIT_OK


def cmd_fleet(args: argparse.Namespace) -> int:
    import asyncio

    from edgeclaw.errors import ConfigError, ConfigErrors
    from edgeclaw.fleetpage.service import serve

    try:
        asyncio.run(serve(_load(args), broker=args.broker, listen=args.listen))
    except ConfigError as e:  # a listen address, a hash or a secret the server cannot use: refused (2)
        raise ConfigErrors([e]) from None
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run,
    "try": cmd_try,
    "chat": cmd_chat,
    "tools": cmd_tools_list,
    "tool": cmd_tool_call,
    "config": cmd_config,
    "status": cmd_status,
    "board": cmd_board,
    "doctor": cmd_doctor,
    "approvals": cmd_approvals,
    "console": cmd_console_hash_pin,
    "memory": cmd_memory,
    "cron": cmd_cron,
    "mcp": cmd_mcp,
    "fleet": cmd_fleet,
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
        _setup_logging(getattr(args, "log_level", None))
    from edgeclaw.errors import ConfigErrors, EdgeclawError  # no imports of its own: --version stays fast

    try:
        status = COMMANDS[args.command](args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at interpreter exit
        return status
    except ConfigErrors as e:
        # A bad config or board profile refuses the command (exit 2); config check and doctor report theirs.
        _print_config_errors(e)
        return EXIT_REFUSED
    except EdgeclawError as e:  # e.g. the state database cannot be opened
        print(f"edgeclaw: {e}", file=sys.stderr)
        return EXIT_TOOL_ERROR
    except KeyboardInterrupt:  # Ctrl-C in a one-shot command: asyncio.run has cancelled and cleaned up
        print(file=sys.stderr)
        return 130
