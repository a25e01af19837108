"""The local control socket: `edgeclaw status` asks the running daemon what it is doing.

A unix stream socket in the state directory (`control.sock`), mode 0600, and
every connection's peer is checked with SO_PEERCRED: only the daemon's own
user and root get an answer. One JSON request line in, one JSON answer line
out: `{"command": "status"}` → `{"ok": true, "status": {...}}`.

The local CLI also administers the running daemon through it: `{"command":
"call", "tool": "cron", "args": {...}}` runs one of `CONTROL_TOOLS` (`cron`,
`schedule`, `gateway`: the tools that act on the daemon itself) through the
daemon's registry, as channel `cli` with the caller `cli:USER` (the peer's
user name from SO_PEERCRED), so the policy, the audit trail and the events
apply as to every other call. Nothing else can be changed through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("edgeclaw.control")

SOCKET_NAME = "control.sock"
MAX_REQUEST_BYTES = 1 << 20  # a whole config file for gateway config_apply fits
REQUEST_TIMEOUT_S = 5.0
CALL_TIMEOUT_S = 300.0  # what a client waits for a call's answer (cron run waits for the run)
# The tools that act on the running daemon, which the local CLI may call through this socket.
# `nodes` reaches peers through the daemon's MQTT connection: a shell's `tool call nodes` runs there.
CONTROL_TOOLS = frozenset({"cron", "schedule", "gateway", "nodes"})
# struct ucred: pid, uid, gid (three C ints).
_UCRED = struct.Struct("3i")

StatusSource = Callable[[], dict[str, Any]]
# (tool, arguments, peer uid) -> the call's outcome as `tool call --json` prints it.
CallHandler = Callable[[str, Any, int], Awaitable[dict[str, Any]]]


def socket_path(state_dir: Path) -> Path:
    return state_dir / SOCKET_NAME


def peer_uid(sock: socket.socket) -> int:
    _, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return uid


def peer_allowed(uid: int, own_uid: int) -> bool:
    """Only the daemon's own user and root may ask."""
    return uid in (own_uid, 0)


class ControlServer:
    """An async context manager serving the control socket while the daemon runs."""

    def __init__(self, path: Path, status: StatusSource, call: CallHandler | None = None) -> None:
        self.path = path
        self._status = status
        self._call = call
        self._server: asyncio.Server | None = None
        self._uid = os.getuid()

    async def __aenter__(self) -> ControlServer:
        if len(os.fsencode(self.path)) >= 108:  # sun_path's size on Linux
            log.warning("control socket path %s is too long for a unix socket; status is off", self.path)
            return self
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            log.warning("cannot create %s: %s; edgeclaw status is off", self.path.parent, e.strerror)
            return self
        if self.path.is_socket() or self.path.is_symlink():
            if await _answers(self.path):
                log.warning("another daemon answers on %s; edgeclaw status is off for this one", self.path)
                return self
            self.path.unlink()  # left by a daemon that was killed
        # The umask makes the socket owner-only from the start (no window before a chmod).
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(
                self._serve, path=str(self.path), limit=MAX_REQUEST_BYTES
            )
        except OSError as e:
            log.warning("cannot open the control socket %s: %s; edgeclaw status is off", self.path, e)
            return self
        finally:
            os.umask(old)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is None:
            return
        self._server.close()
        await self._server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            sock = writer.get_extra_info("socket")
            uid = peer_uid(sock) if sock is not None else -1
            # The request is read either way: answering before it has been sent would leave the
            # asker writing into a closed socket (a broken pipe instead of the refusal).
            answer = await self._answer(reader, peer_allowed(uid, self._uid), uid)
            if not answer["ok"] and answer["error"] == "permission denied":
                log.warning("control socket: refused a request from uid %d", uid)
            writer.write(json.dumps(answer, ensure_ascii=False, default=str).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the asker went away; nothing to tell anyone
        except Exception:
            log.exception("control socket request failed")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, allowed: bool, uid: int = -1) -> dict[str, Any]:
        """Read one request line and answer it; a peer that may not ask gets only the refusal."""
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                line = await reader.readline()
        except ValueError:  # over the limit
            return {"ok": False, "error": f"request longer than {MAX_REQUEST_BYTES} bytes"}
        if not allowed:
            return {"ok": False, "error": "permission denied"}
        try:
            request = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return {"ok": False, "error": "expected one JSON object per line"}
        command = request.get("command") if isinstance(request, dict) else None
        if command == "call" and self._call is not None:
            tool = request.get("tool")
            if tool not in CONTROL_TOOLS:
                return {"ok": False, "error": f"only {', '.join(sorted(CONTROL_TOOLS))} are called here"}
            return {"ok": True, "outcome": await self._call(tool, request.get("args") or {}, uid)}
        if command != "status":
            return {"ok": False, "error": f"unknown command {command!r} (expected 'status' or 'call')"}
        return {"ok": True, "status": self._status()}


async def _answers(path: Path) -> bool:
    """Whether a live daemon is listening on `path` (else the file is a leftover)."""
    try:
        async with asyncio.timeout(1.0):
            _, writer = await asyncio.open_unix_connection(str(path))
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    return True


class ControlError(Exception):
    """No daemon could be asked, or it refused."""


def ask_status(path: Path, timeout_s: float = 5.0) -> dict[str, Any]:
    """The running daemon's status, for `edgeclaw status` (blocking; the CLI has no loop)."""
    status = _ask(path, {"command": "status"}, timeout_s).get("status")
    return status if isinstance(status, dict) else {}


class NoDaemon(ControlError):
    """Nobody listens on the control socket: the caller may do the work itself."""


def call_tool(path: Path, tool: str, args: Any, timeout_s: float = CALL_TIMEOUT_S) -> dict[str, Any]:
    """One of CONTROL_TOOLS called in the running daemon; raises NoDaemon when none runs."""
    outcome = _ask(path, {"command": "call", "tool": tool, "args": args}, timeout_s).get("outcome")
    return outcome if isinstance(outcome, dict) else {}


def control_calls(runtime: Any) -> CallHandler:
    """The daemon's side of `call`: the tool through the registry as the peer's CLI user."""
    from edgeclaw.tools.base import ToolContext

    async def call(tool: str, args: Any, uid: int) -> dict[str, Any]:
        user = _user_name(uid)
        ctx = ToolContext(
            channel="cli", peer_kind="local", session_key=f"cli:{uid}", sender=user, caller=f"cli:{user}"
        )
        outcome = await runtime.registry.execute(tool, args, ctx)
        shape: dict[str, Any] = outcome.as_dict()
        shape["refused"] = outcome.refused
        return shape

    return call


def _user_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _ask(path: Path, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(str(path))
        except FileNotFoundError:
            raise NoDaemon(f"no daemon is running (no control socket at {path})") from None
        except ConnectionRefusedError:
            raise NoDaemon(f"no daemon is running (a stale control socket at {path})") from None
        except PermissionError:
            raise ControlError(f"permission denied on {path}: run as the daemon's user or root") from None
        sock.sendall(json.dumps(request, ensure_ascii=False).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        raise ControlError(f"the daemon did not answer on {path} within {timeout_s:g} s") from None
    except OSError as e:
        raise ControlError(f"cannot ask the daemon on {path}: {e.strerror or e}") from None
    finally:
        sock.close()
    try:
        answer = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ControlError(f"the daemon on {path} gave an answer that is not JSON") from None
    if not isinstance(answer, dict) or not answer.get("ok"):
        error = answer.get("error") if isinstance(answer, dict) else None
        raise ControlError(f"the daemon refused: {error or 'no reason given'}")
    return answer
