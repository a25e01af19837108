"""One MCP client session over any transport: the handshake, requests and what the server sends.

The session numbers its requests, matches answers to them, and keeps every
wait bounded: a request that times out is withdrawn (`notifications/cancelled`
to the server) and raises `McpTimeout`; a connection that ends fails every
request still waiting with `McpClosed`, so a tool call in flight is answered
with an error rather than left hanging. Progress the server reports for a
request goes to that request's callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import field
from typing import Any

from edgeclaw.backends.mcp import protocol as p
from edgeclaw.backends.mcp.transport import Transport
from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.mcp")

# progress, total (None when unknown), message
ProgressHook = Callable[[float, float | None, str], None]
NotificationHook = Callable[[str, dict[str, Any]], None]

# Pages of tools/list followed at most: a server that keeps handing out cursors is looping.
MAX_TOOL_PAGES = 50


@dataclass
class ServerInfo:
    """What the server said about itself in the handshake."""

    protocol_version: str
    name: str = ""
    version: str = ""
    capabilities: dict[str, Any] = field(default_factory=dict)
    instructions: str = ""


class McpSession:
    def __init__(
        self,
        transport: Transport,
        *,
        client_name: str = "edgeclaw",
        client_version: str = "",
        on_notification: NotificationHook | None = None,
    ) -> None:
        self.transport = transport
        self.client_name = client_name
        self.client_version = client_version
        self.on_notification = on_notification
        self.server: ServerInfo | None = None
        self._next_id = 1
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._progress: dict[int, ProgressHook] = {}
        self._closed_reason: str | None = None
        self.closed = asyncio.Event()

    # -- lifecycle -----------------------------------------------------------
    async def start(self, timeout_s: float) -> ServerInfo:
        """Open the transport and shake hands, offering our newest revision. McpError when the
        server answers a revision we do not speak, or anything else goes wrong."""
        async with asyncio.timeout(timeout_s):
            await self.transport.open(self._deliver, self._lost)
        answer = await self.request(
            "initialize",
            {
                "protocolVersion": p.LATEST_VERSION,
                "capabilities": {},
                "clientInfo": {"name": self.client_name, "version": self.client_version or "0"},
            },
            timeout_s=timeout_s,
        )
        version = answer.get("protocolVersion")
        if version not in p.PROTOCOL_VERSIONS:
            raise p.McpError(
                f"the server speaks MCP revision {version!r}; "
                f"edgeclaw speaks {', '.join(p.PROTOCOL_VERSIONS)}"
            )
        info = answer.get("serverInfo") if isinstance(answer.get("serverInfo"), dict) else {}
        caps = answer.get("capabilities") if isinstance(answer.get("capabilities"), dict) else {}
        self.server = ServerInfo(
            protocol_version=version,
            name=str(info.get("name", "")),
            version=str(info.get("version", "")),
            capabilities=caps,
            instructions=str(answer.get("instructions") or ""),
        )
        self.transport.negotiated(version)
        await self.notify("notifications/initialized")
        return self.server

    async def close(self) -> None:
        self._lost("closed by edgeclaw")
        await self.transport.close()

    @property
    def closed_reason(self) -> str | None:
        return self._closed_reason

    # -- requests ------------------------------------------------------------
    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout_s: float,
        on_progress: ProgressHook | None = None,
    ) -> dict[str, Any]:
        if self._closed_reason is not None:
            raise p.McpClosed(f"the connection is closed ({self._closed_reason})")
        id_ = self._next_id
        self._next_id += 1
        if on_progress is not None:
            params = dict(params or {})
            params["_meta"] = {**params.get("_meta", {}), "progressToken": id_}
            self._progress[id_] = on_progress
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[id_] = future
        try:
            async with asyncio.timeout(timeout_s):
                await self.transport.send(p.request(id_, method, params))
                return await future
        except TimeoutError:
            # Tell the server to stop working on it; the answer, if one still comes, is dropped.
            if method != "initialize" and self._closed_reason is None:
                with contextlib.suppress(p.McpError, OSError, TimeoutError):
                    async with asyncio.timeout(min(timeout_s, 5.0)):
                        await self.notify(
                            "notifications/cancelled",
                            {"requestId": id_, "reason": f"no answer within {timeout_s:g} s"},
                        )
            raise p.McpTimeout(f"{method}: no answer within {timeout_s:g} s", p.REQUEST_TIMEOUT) from None
        finally:
            self._pending.pop(id_, None)
            self._progress.pop(id_, None)
            if future.done() and not future.cancelled():
                future.exception()  # failed by a lost connection while the send itself failed: seen

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self.transport.send(p.notification(method, params))

    async def ping(self, timeout_s: float) -> None:
        await self.request("ping", {}, timeout_s=timeout_s)

    async def list_tools(self, timeout_s: float) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            answer = await self.request(
                "tools/list", {"cursor": cursor} if cursor else {}, timeout_s=timeout_s
            )
            page = answer.get("tools")
            if not isinstance(page, list):
                raise p.McpError("tools/list: the answer has no 'tools' list")
            tools.extend(t for t in page if isinstance(t, dict))
            cursor = answer.get("nextCursor")
            if not cursor:
                return tools
        raise p.McpError(f"tools/list: more than {MAX_TOOL_PAGES} pages")

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        timeout_s: float,
        on_progress: ProgressHook | None = None,
        as_task: bool = False,
    ) -> dict[str, Any]:
        if as_task:
            return await self._call_as_task(name, arguments, timeout_s, on_progress)
        return await self.request(
            "tools/call", {"name": name, "arguments": arguments}, timeout_s=timeout_s, on_progress=on_progress
        )

    @property
    def runs_tool_tasks(self) -> bool:
        """Whether the server takes `tools/call` as a task (capabilities.tasks.requests.tools.call)."""
        caps = self.server.capabilities if self.server is not None else {}
        tasks = caps.get("tasks") if isinstance(caps, dict) else None
        requests = tasks.get("requests") if isinstance(tasks, dict) else None
        tools = requests.get("tools") if isinstance(requests, dict) else None
        return isinstance(tools, dict) and "call" in tools

    async def _call_as_task(
        self, name: str, arguments: dict[str, Any], timeout_s: float, on_progress: ProgressHook | None
    ) -> dict[str, Any]:
        """A tool that runs only as a task (MCP 2025-11-25 tasks): `tools/call` with `task` creates it,
        `tasks/get` is polled at the server's `pollInterval` until it ends (or needs input, which only
        `tasks/result` carries), then `tasks/result` gives the call's result. Past `timeout_s` the task
        is cancelled."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s

        def left() -> float:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise p.McpTimeout(
                    f"tools/call {name}: the task did not end within {timeout_s:g} s", p.REQUEST_TIMEOUT
                )
            return remaining

        created = await self.request(
            "tools/call",
            {"name": name, "arguments": arguments, "task": {"ttl": int(timeout_s * 1000) + 60_000}},
            timeout_s=left(),
            on_progress=on_progress,
        )
        task = created.get("task")
        if not isinstance(task, dict) or not isinstance(task.get("taskId"), str):
            return created  # the server ran it as a plain call after all
        task_id = task["taskId"]
        try:
            while task.get("status") == "working":
                interval = task.get("pollInterval")
                wait = interval / 1000 if isinstance(interval, int | float) and interval > 0 else 1.0
                await asyncio.sleep(min(max(wait, 0.1), 5.0, left()))
                task = await self.request("tasks/get", {"taskId": task_id}, timeout_s=left())
            if task.get("status") == "cancelled":
                raise p.McpError(f"the task was cancelled: {task.get('statusMessage') or 'no reason given'}")
            # completed, failed (its result says why) or input_required (delivered with the result)
            return await self.request("tasks/result", {"taskId": task_id}, timeout_s=left())
        except p.McpTimeout:
            if self._closed_reason is None:
                with contextlib.suppress(p.McpError, OSError, TimeoutError):
                    await self.request("tasks/cancel", {"taskId": task_id}, timeout_s=5.0)
            raise

    # -- what arrives ----------------------------------------------------------
    def _deliver(self, message: dict[str, Any]) -> None:
        """One message from the server (called by the transport, on the event loop)."""
        if p.is_response(message):
            id_ = message.get("id")
            future = self._pending.get(id_) if isinstance(id_, int) else None
            if future is None or future.done():
                return  # an answer to a request we gave up on
            if "error" in message:
                err = message["error"] if isinstance(message["error"], dict) else {}
                future.set_exception(
                    p.McpError(str(err.get("message", "error")), err.get("code"), err.get("data"))
                )
            else:
                value = message.get("result")
                future.set_result(value if isinstance(value, dict) else {})
            return
        method = message.get("method")
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        if not isinstance(method, str):
            return
        if "id" in message:
            self._answer_server_request(message["id"], method)
            return
        if method == "notifications/progress":
            token = params.get("progressToken")
            hook = self._progress.get(token) if isinstance(token, int) else None
            progress = params.get("progress")
            if hook is not None and isinstance(progress, int | float):
                total = params.get("total")
                hook(
                    float(progress),
                    float(total) if isinstance(total, int | float) else None,
                    str(params.get("message") or ""),
                )
            return
        if method == "notifications/message":
            log.info(
                "MCP server %s: %s", self.server.name if self.server else "?", str(params.get("data"))[:500]
            )
        if self.on_notification is not None:
            self.on_notification(method, params)

    def _answer_server_request(self, id_: Any, method: str) -> None:
        # We offer no client capabilities (sampling, roots, elicitation): only ping is answered.
        if method == "ping":
            reply = p.result(id_, {})
        else:
            reply = p.error(id_, p.METHOD_NOT_FOUND, f"edgeclaw's MCP client does not offer {method!r}")
        task = asyncio.get_running_loop().create_task(self._send_quietly(reply))
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def _send_quietly(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(p.McpError, OSError):
            await self.transport.send(message)

    def _lost(self, reason: str) -> None:
        """The connection is gone: every waiting request fails now."""
        if self._closed_reason is not None:
            return
        self._closed_reason = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(p.McpClosed(f"the connection to the MCP server ended ({reason})"))
        self.closed.set()
