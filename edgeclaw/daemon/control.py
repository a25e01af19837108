"""The local control socket: `edgeclaw status` asks the running daemon what it is doing.

A unix stream socket in the state directory (`control.sock`), mode 0600, and
every connection's peer is checked with SO_PEERCRED: only the daemon's own
user and root get an answer. One JSON request line in, one JSON answer line
out: `{"command": "status"}` → `{"ok": true, "status": {...}}`.

Read-only on purpose: anything that changes the daemon goes through the
channels, their policy and their audit trail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("edgeclaw.control")

SOCKET_NAME = "control.sock"
MAX_REQUEST_BYTES = 4096
REQUEST_TIMEOUT_S = 5.0
# struct ucred: pid, uid, gid (three C ints).
_UCRED = struct.Struct("3i")

StatusSource = Callable[[], dict[str, Any]]


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

    def __init__(self, path: Path, status: StatusSource) -> None:
        self.path = path
        self._status = status
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
            answer = await self._answer(reader, peer_allowed(uid, self._uid))
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

    async def _answer(self, reader: asyncio.StreamReader, allowed: bool) -> dict[str, Any]:
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
        if command != "status":
            return {"ok": False, "error": f"unknown command {command!r} (expected 'status')"}
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
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(str(path))
        except FileNotFoundError:
            raise ControlError(f"no daemon is running (no control socket at {path})") from None
        except ConnectionRefusedError:
            raise ControlError(f"no daemon is running (a stale control socket at {path})") from None
        except PermissionError:
            raise ControlError(f"permission denied on {path}: run as the daemon's user or root") from None
        sock.sendall(b'{"command": "status"}\n')
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
    status = answer.get("status")
    return status if isinstance(status, dict) else {}
