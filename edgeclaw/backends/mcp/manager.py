"""The MCP servers the agent uses: connecting, watching, reconnecting, and calls to them.

Each server has one supervisor task. It connects (handshake, `tools/list`),
hands the tools to `on_tools`, then pings the server every
`health_interval_s`; a failed ping or a lost connection hands the server to
`on_gone` (its tools leave the registry) and starts the reconnect backoff:
`reconnect_first_s`, doubling up to `reconnect_max_s`, `reconnect_attempts`
times. Then the server is `failed` and waits for `reconnect(name)` (a reload
or an admin request). A call in flight when the connection ends gets an
error at once (see `session.py`), not a timeout.

States: connecting → connected → reconnecting → (connected | failed);
`disabled` for a server configured with `enabled = false`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import field
from typing import Any

from edgeclaw.backends.mcp import protocol as p
from edgeclaw.backends.mcp.session import McpSession, ProgressHook, ServerInfo
from edgeclaw.backends.mcp.transport import Transport
from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.mcp")

ToolsHook = Callable[[str, list[dict[str, Any]]], dict[str, str]]  # -> broken tools: name -> why
GoneHook = Callable[[str], None]
PING_TIMEOUT_S = 10.0
# Starting a server (a Python program's imports on a small board) may take longer than a call.
MIN_CONNECT_TIMEOUT_S = 30.0


@dataclass
class ServerSpec:
    name: str
    make_transport: Callable[[], Transport]
    timeout_s: float = 60.0
    enabled: bool = True

    @property
    def connect_timeout_s(self) -> float:
        return max(self.timeout_s, MIN_CONNECT_TIMEOUT_S)


@dataclass
class ServerStatus:
    """One server as `doctor`, `/status` and telemetry show it."""

    name: str
    state: str = "connecting"
    where: str = ""
    attempts: int = 0  # reconnect attempts since the connection was lost
    error: str = ""  # why the last attempt (or the connection) failed
    tools: list[str] = field(default_factory=list)  # the server's own tool names, registered
    broken: dict[str, str] = field(default_factory=dict)  # tools not registered, and why
    server: str = ""  # the server's name and version, from its handshake
    protocol_version: str = ""
    since: float = 0.0  # time.time() of the last state change
    next_try_s: float = 0.0  # reconnecting: seconds until the next attempt, at `since`

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "where": self.where,
            "attempts": self.attempts,
            "error": self.error,
            "tools": len(self.tools),
            "broken": dict(self.broken),
            "server": self.server,
            "protocol_version": self.protocol_version,
            "since": round(self.since, 3),
        }


class McpManager:
    def __init__(
        self,
        specs: list[ServerSpec],
        *,
        on_tools: ToolsHook,
        on_gone: GoneHook,
        health_interval_s: float = 30.0,
        reconnect_first_s: float = 2.0,
        reconnect_max_s: float = 60.0,
        reconnect_attempts: int = 10,
        client_version: str = "",
    ) -> None:
        self.specs = {s.name: s for s in specs}
        self.on_tools = on_tools
        self.on_gone = on_gone
        self.health_interval_s = health_interval_s
        self.reconnect_first_s = reconnect_first_s
        self.reconnect_max_s = reconnect_max_s
        self.reconnect_attempts = reconnect_attempts
        self.client_version = client_version
        self.status: dict[str, ServerStatus] = {
            s.name: ServerStatus(s.name, state="connecting" if s.enabled else "disabled", since=time.time())
            for s in specs
        }
        self._sessions: dict[str, McpSession] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._first: dict[str, asyncio.Event] = {}
        self._relist: dict[str, asyncio.Event] = {}
        self._stopping = False

    # -- lifecycle -----------------------------------------------------------
    async def start(self, wait_s: float = 0.0) -> None:
        """Start every enabled server's supervisor; wait up to `wait_s` for their first attempts."""
        for name, spec in self.specs.items():
            if spec.enabled and name not in self._tasks:
                self._spawn(name)
        if wait_s > 0 and self._first:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await asyncio.gather(*(e.wait() for e in self._first.values()))

    def _spawn(self, name: str) -> None:
        self._wake[name] = asyncio.Event()
        self._first[name] = asyncio.Event()
        self._relist[name] = asyncio.Event()
        self._tasks[name] = asyncio.get_running_loop().create_task(self._supervise(name), name=f"mcp {name}")

    async def stop(self) -> None:
        self._stopping = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def reconnect(self, name: str) -> str:
        """Try a server again now (a failed one included): the admin request. Returns its state."""
        if name not in self.specs:
            raise p.McpError(f"no MCP server named {name!r} (configured: {', '.join(self.specs) or 'none'})")
        if not self.specs[name].enabled:
            raise p.McpError(f"MCP server {name!r} is disabled (mcp.servers.{name}.enabled = false)")
        task = self._tasks.get(name)
        if task is None or task.done():
            self._spawn(name)
        else:
            self._wake[name].set()
        return self.status[name].state

    # -- calls -----------------------------------------------------------------
    async def call(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        timeout_s: float | None = None,
        on_progress: ProgressHook | None = None,
        as_task: bool = False,
    ) -> dict[str, Any]:
        session = self._sessions.get(server)
        if session is None:
            st = self.status.get(server)
            why = f" ({st.error})" if st is not None and st.error else ""
            state = st.state if st is not None else "unknown"
            raise p.McpClosed(f"MCP server {server!r} is not connected: {state}{why}")
        spec = self.specs[server]
        return await session.call_tool(
            tool, arguments, timeout_s=timeout_s or spec.timeout_s, on_progress=on_progress, as_task=as_task
        )

    def runs_tool_tasks(self, server: str) -> bool:
        """Whether the connected server takes tool calls as tasks."""
        session = self._sessions.get(server)
        return session is not None and session.runs_tool_tasks

    # -- the supervisor ----------------------------------------------------------
    def _set(self, name: str, state: str, **fields: Any) -> None:
        st = self.status[name]
        if st.state != state:
            log.info(
                "MCP server %s: %s%s", name, state, f" ({fields['error']})" if fields.get("error") else ""
            )
        st.state = state
        st.since = time.time()
        for key, value in fields.items():
            setattr(st, key, value)

    async def _supervise(self, name: str) -> None:
        spec = self.specs[name]
        made = 0  # reconnect attempts since the last good connection
        again = False  # the next attempt is a reconnect
        while not self._stopping:
            self._set(name, "reconnecting" if again else "connecting", attempts=made)
            error = await self._connect_and_watch(spec)
            self._first[name].set()
            if self._stopping:
                return
            if error is None:
                made = 0  # it was up, then went away: the backoff starts over
            elif again:
                made += 1
            if error is not None and made >= self.reconnect_attempts:
                self._set(name, "failed", error=error, attempts=made)
                log.warning("MCP server %s: given up after %d reconnect attempts", name, made)
                await self._wake[name].wait()
                self._wake[name].clear()
                made, again = 0, False
                continue
            delay = min(self.reconnect_first_s * 2**made, self.reconnect_max_s)
            self._set(
                name, "reconnecting", attempts=made, next_try_s=delay, **({"error": error} if error else {})
            )
            again = True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake[name].wait()
            self._wake[name].clear()

    async def _connect_and_watch(self, spec: ServerSpec) -> str | None:
        """One connection's life. Returns why the connection attempt failed, or None when it was up
        and then went away (the backoff starts over)."""
        name = spec.name
        try:
            transport = spec.make_transport()
        except p.McpError as e:  # a secret header that could not be read, ...
            return str(e)
        self.status[name].where = transport.describe()
        session = McpSession(
            transport,
            client_version=self.client_version,
            on_notification=lambda method, params: self._notified(name, method),
        )
        registered = False
        try:
            try:
                info = await session.start(spec.connect_timeout_s)
                tools = await session.list_tools(spec.connect_timeout_s)
            except (p.McpError, OSError) as e:
                return str(e) or type(e).__name__
            self._sessions[name] = session
            self._register(name, tools, info)
            registered = True
            self._set(name, "connected", attempts=0, error="", where=transport.describe())
            self._first[name].set()
            why = await self._watch(name, session, spec)
            self.status[name].error = why
            log.warning("MCP server %s went away: %s", name, why)
            return None
        finally:
            self._sessions.pop(name, None)
            if registered:
                self.status[name].tools = []
                self.on_gone(name)
            with contextlib.suppress(Exception):
                await session.close()

    def _register(self, name: str, tools: list[dict[str, Any]], info: ServerInfo) -> None:
        broken = self.on_tools(name, tools)
        st = self.status[name]
        # Said once per reason: a server that announces list changes often would repeat it each time.
        already = st.broken
        st.broken = broken
        st.tools = [str(t.get("name")) for t in tools if t.get("name") not in broken]
        st.server = f"{info.name} {info.version}".strip()
        st.protocol_version = info.protocol_version
        for tool, why in broken.items():
            if already.get(tool) != why:
                log.warning("MCP server %s: tool %r not registered: %s", name, tool, why)

    def _notified(self, name: str, method: str) -> None:
        if method == "notifications/tools/list_changed":
            self._relist[name].set()

    async def _watch(self, name: str, session: McpSession, spec: ServerSpec) -> str:
        """Ping every health interval and follow tool-list changes, until the connection ends."""
        relist = self._relist[name]
        while True:
            closed = asyncio.ensure_future(session.closed.wait())
            changed = asyncio.ensure_future(relist.wait())
            try:
                await asyncio.wait(
                    {closed, changed}, timeout=self.health_interval_s, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                closed.cancel()
                changed.cancel()
            if session.closed.is_set():
                return session.closed_reason or "the connection ended"
            try:
                if relist.is_set():
                    relist.clear()
                    tools = await session.list_tools(spec.timeout_s)
                    self.on_gone(name)
                    self._register(name, tools, session.server or ServerInfo(""))
                else:
                    await session.ping(min(PING_TIMEOUT_S, spec.timeout_s))
            except p.McpError as e:
                return f"no answer to a health check: {e}"
