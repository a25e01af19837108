"""`gateway`: administering the daemon itself (status, version, config, restart, logs, tool reload).

For the device's administrators only: the local CLI (`edgeclaw tool call
gateway ...`, which a running daemon answers over its control socket) and the
signed MQTT admin topic (`admin/gateway`). It is in no profile but `full`,
never offered to subagents (the policy's always-denied list), and MQTT's
`remote` default leaves it out.

The daemon fills in `GatewayHooks`; in a process without a daemon the
actions that need one say so.

- `config_get`: the effective configuration, secrets never shown (only the
  names of the variables and files that hold them), optionally one `key`.
- `config_validate`: a whole new file's text, checked as `config check`
  would; nothing is written.
- `config_apply`: checked, then written atomically beside the old file
  (kept as `FILE.previous`); what can change at run time (the tool policy,
  the log level) is reloaded in place, anything else restarts the daemon.
  When the new file does not bring the daemon back to READY, the previous
  file is restored and the daemon starts on it again. A file that weakens
  security is refused unless `acknowledge` names each weakened key.
- `restart`: through systemd when the daemon runs under it (the service's
  Restart= brings it back), else the daemon starts itself again in place.
- `logs`: the last `lines` lines (of records at `level` or above, when
  given), from the journal under systemd, else from the log file, else the
  daemon's own recent-lines buffer.
- `reload_tools`: runtime custom tools taken again from the database, and
  every MCP server that is not connected tried again (a `failed` one too).
- `update`: a new version from a wheel (`url`, or the parts of an `upload`
  sent with `update_chunk`), its `sha256` and signature checked, installed in
  a slot of its own beside the running version without running it, switched
  to, and rolled back when it does not come up healthy; a version not newer
  than the running one only with `allow_downgrade` (edgeclaw.admin.update).
  While STATE/update.lock is held (a job, a tool that defers updates, another
  process) it is checked and deferred until the lock frees, unless `force`.
- `update_chunk`: one base64 part (`index` of `total`) of an `upload`.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

from edgeclaw import __version__
from edgeclaw.errors import ToolError
from edgeclaw.records import dataclass
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult

MAX_CONFIG_BYTES = 256 * 1024
MAX_LOG_LINES = 1000
MAX_CHUNK_CHARS = 1_400_000  # base64 of 1 MiB; gateway.update_chunk_bytes is the limit in force


@dataclass
class GatewayHooks:
    """What the gateway tool reaches in the running daemon; None where this process has no daemon."""

    status: Callable[[], dict[str, Any]] | None = None
    config_get: Callable[[str], dict[str, Any]] | None = None  # key ("" = all) -> {"text", "value"?}
    config_validate: Callable[[str], list[str]] | None = None  # text -> problems
    # (text, by, acknowledged keys) -> report
    config_apply: Callable[[str, str, list[str]], Awaitable[dict[str, Any]]] | None = None
    restart: Callable[[str], None] | None = None  # reason
    # (n, level or None) -> (source, lines)
    logs: Callable[[int, str | None], Awaitable[tuple[str, list[str]]]] | None = None
    reload_tools: Callable[[], dict[str, Any]] | None = None
    update: Callable[[dict[str, Any], str], Awaitable[dict[str, Any]]] | None = None  # (args, by)
    update_chunk: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    offer_update: Callable[[dict[str, Any], str], dict[str, Any]] | None = None  # (args, by)
    slots: Callable[[], dict[str, Any]] | None = None  # the installed versions, for `version`


def _needs_daemon(what: str) -> ToolError:
    return ToolError(f"{what} needs the running daemon (edgeclaw run); none answers in this process")


class GatewayTool(Tool):
    name = "gateway"
    group = "automation"
    description = (
        "Administer this daemon: status, version, config_get (secrets never shown), config_validate "
        "and config_apply (a whole new config file; rolled back when the daemon does not come back "
        "healthy), restart, logs (last N lines), reload_tools (runtime custom tools; MCP servers "
        "not connected are tried again), update (a new version from a wheel, rolled back unless "
        "healthy) and update_chunk."
    )
    observing_actions = frozenset({"status", "version", "config_get", "config_validate", "logs"})
    timeout_s = 900.0  # an update downloads and installs a wheel; the other actions take moments
    parameters = {
        "type": "object",
        "properties": {
            "action": {
                "enum": [
                    "status",
                    "version",
                    "config_get",
                    "config_validate",
                    "config_apply",
                    "restart",
                    "logs",
                    "reload_tools",
                    "update",
                    "update_chunk",
                    "offer_update",
                ]
            },
            "key": {
                "type": "string",
                "maxLength": 200,
                "description": "config_get: a dotted key (mqtt.port)",
            },
            "content": {
                "type": "string",
                "maxLength": MAX_CONFIG_BYTES,
                "description": "config_validate / config_apply: the whole new config file (TOML)",
            },
            "acknowledge": {
                "type": "array",
                "items": {"type": "string", "maxLength": 200},
                "maxItems": 64,
                "description": "config_apply: the keys whose weakening of security is intended "
                "(sandbox.backend, mqtt.hmac_secret, tools.channels.mqtt, mcp.server.listen, ...)",
            },
            "lines": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LOG_LINES,
                "description": "logs: how many",
            },
            "level": {
                "enum": ["debug", "info", "warning", "error", "critical"],
                "description": "logs: only records at this level or above",
            },
            "reason": {"type": "string", "maxLength": 200, "description": "restart: why (for the log)"},
            "url": {"type": "string", "maxLength": 2000, "description": "update: where the wheel is"},
            "upload": {
                "type": "string",
                "pattern": "^[A-Za-z0-9_-]{1,64}$",
                "description": "update / update_chunk: the name of a wheel sent in parts",
            },
            "sha256": {
                "type": "string",
                "pattern": "^[0-9a-fA-F]{64}$",
                "description": "update: the wheel's SHA-256",
            },
            "signature": {
                "type": "string",
                "maxLength": 256,
                "description": "update: Ed25519 signature of the wheel, hex (with gateway.update_public_key)",
            },
            "version": {
                "type": "string",
                "maxLength": 64,
                "description": "offer_update: the offered wheel's version (shown to Home Assistant)",
            },
            "allow_downgrade": {
                "type": "boolean",
                "description": "update: install a version not newer than the running one",
            },
            "force": {
                "type": "boolean",
                "description": "update: apply now even while STATE/update.lock is held (else deferred)",
            },
            "index": {"type": "integer", "minimum": 0, "maximum": 100000, "description": "update_chunk"},
            "total": {"type": "integer", "minimum": 1, "maximum": 100000, "description": "update_chunk"},
            "data": {
                "type": "string",
                "maxLength": MAX_CHUNK_CHARS,
                "description": "update_chunk: the part, base64",
            },
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(self, hooks: GatewayHooks | None = None) -> None:
        self.hooks = hooks or GatewayHooks()

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        action = args["action"]
        h = self.hooks
        if action == "version":
            import platform  # 2 ms at import: only this action needs it

            data = {
                "edgeclaw": __version__,
                "python": platform.python_version(),
                "platform": platform.platform(),
                "machine": platform.machine(),
                "executable": sys.executable,
            }
            if h.slots is not None:
                data.update(h.slots())
            return ToolResult("\n".join(f"{k}: {v}" for k, v in data.items()), data=data)
        if action == "status":
            if h.status is None:
                raise _needs_daemon("status")
            status = h.status()
            return ToolResult(_lines(status), data=status)
        if action == "config_get":
            if h.config_get is None:
                raise _needs_daemon("config_get")
            got = h.config_get(args.get("key", ""))
            return ToolResult(got["text"], data={k: v for k, v in got.items() if k != "text"} or None)
        if action in ("config_validate", "config_apply"):
            text = args.get("content")
            if text is None:
                raise ToolError(f"{action}: give the whole new config file as 'content'")
            if action == "config_validate":
                if h.config_validate is None:
                    raise _needs_daemon("config_validate")
                problems = h.config_validate(text)
                if problems:
                    return ToolResult(
                        "\n".join(problems), is_error=True, data={"ok": False, "problems": problems}
                    )
                return ToolResult("the new config is valid", data={"ok": True, "problems": []})
            if h.config_apply is None:
                raise _needs_daemon("config_apply")
            report = await h.config_apply(text, ctx.identity, list(args.get("acknowledge") or []))
            return ToolResult(report["text"], is_error=not report.get("ok", False), data=report)
        if action == "restart":
            if h.restart is None:
                raise _needs_daemon("restart")
            h.restart(args.get("reason") or f"asked by {ctx.identity}")
            return ToolResult("restarting", data={"restarting": True})
        if action == "logs":
            if h.logs is None:
                raise _needs_daemon("logs")
            level = args.get("level")
            source, lines = await h.logs(args.get("lines", 50), level)
            return ToolResult(
                "\n".join(lines) or "(no log lines)",
                data={"source": source, "lines": len(lines), "level": level or "debug"},
            )
        if action == "update":
            if h.update is None:
                raise _needs_daemon("update")
            report = await h.update(dict(args), ctx.identity)
            return ToolResult(report["text"], is_error=not report.get("ok", False), data=report)
        if action == "offer_update":
            if h.offer_update is None:
                raise _needs_daemon("offer_update")
            report = h.offer_update(dict(args), ctx.identity)
            return ToolResult(report["text"], data=report)
        if action == "update_chunk":
            if h.update_chunk is None:
                raise _needs_daemon("update_chunk")
            for field in ("upload", "index", "total", "data"):
                if field not in args:
                    raise ToolError(f"update_chunk: give {field!r}")
            report = h.update_chunk(dict(args))
            return ToolResult(report["text"], data=report)
        if h.reload_tools is None:
            raise _needs_daemon("reload_tools")
        report = h.reload_tools()
        return ToolResult(report["text"], data=report)


def _lines(value: dict[str, Any], indent: str = "") -> str:
    out = []
    for k, v in value.items():
        if isinstance(v, dict):
            out.append(f"{indent}{k}:")
            out.append(_lines(v, indent + "  "))
        else:
            out.append(f"{indent}{k}: {v}")
    return "\n".join(line for line in out if line)
