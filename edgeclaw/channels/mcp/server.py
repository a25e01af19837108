"""The registry served over MCP: sessions, the handshake, tools/list, tools/call, approvals.

One `McpServer` per process (the daemon's is shared by streamable HTTP and
MQTT; `edgeclaw mcp serve` has its own); one `ServedSession` per MCP client.
Transports hand each message from the client to `ServedSession.receive` (a
request in a task of its own, so a long call never holds up the messages
after it, such as the answer to an approval question) and carry back what it
returns and what the session sends on its own.

Every `tools/call` is a registry call on the channel `mcp` with the session's
identity as caller (`mcp:stdio:USER`, `mcp:http:TOKEN-NAME`,
`mcp:mqtt:CLIENT`), so the channel's policy (the `device` profile unless
`[tools.channels.mcp]` says otherwise), the per-caller rate limits and the
audit trail apply as on every other channel. A call the registry refuses is
a tool result with `isError` and the reason, as the model on the other side
needs it; an unknown tool is a JSON-RPC error, as the protocol asks.

Approvals: the server is the channel's approver. A call that needs a
person's yes asks the MCP client with `elicitation/create` (on the stream of
the call that asked, for HTTP) when the client declared the capability;
otherwise it is refused, saying so. Tool list changes (custom tools defined
or removed, MCP servers' tools coming and going) are announced with
`notifications/tools/list_changed` to every session whose view changed.
A call whose request carries a `progressToken` gets a progress sink in its
context: what the tool reports (an MCP server's progress, passed on at a
pace by the bridge) goes back to the client as `notifications/progress`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from edgeclaw import __version__
from edgeclaw.backends.mcp.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LATEST_VERSION,
    METHOD_NOT_FOUND,
    PROTOCOL_VERSIONS,
    McpClosed,
    McpError,
    error,
    is_response,
    notification,
    request,
    result,
)
from edgeclaw.records import dataclass
from edgeclaw.tasks import TaskSet
from edgeclaw.tools.approval import ApprovalBroker, ApprovalRequest, ApprovalUnavailable, Decision
from edgeclaw.tools.base import ProgressSink, ToolContext, ToolInfo
from edgeclaw.tools.registry import Registry

log = logging.getLogger("edgeclaw.mcp.server")

CHANNEL = "mcp"
SERVER_NAME = "edgeclaw"
# Elicitation came with this revision; `mode` ("form" or "url") with the one after.
ELICITATION_VERSIONS = frozenset({"2025-06-18", "2025-11-25"})
ELICITATION_MODE_VERSIONS = frozenset({"2025-11-25"})
# A progress notification's `message` came with 2025-03-26.
NO_PROGRESS_MESSAGE_VERSIONS = frozenset({"2024-11-05"})
MAX_CLIENT_NAME_CHARS = 64
# Requests of one session answered at once; more are refused (a flood costs an error answer each).
MAX_IN_FLIGHT = 32
# The approval question's form: one choice. No allow-always: a client that answers by itself
# must not be able to leave a standing rule behind.
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Decision",
            "description": "allow-once runs this one call; deny refuses it",
            "enum": ["allow-once", "deny"],
        }
    },
    "required": ["decision"],
}
INSTRUCTIONS = (
    "The tools of an edgeclaw board: its hardware (I2C, SPI, GPIO, memory, debug probe), files and "
    "more, as the board's policy allows. Calls outside the board profile's grants are refused."
)

# Where a session's messages go: one JSON-RPC message to the client.
Send = Callable[[dict[str, Any]], Awaitable[None]]


class SessionLimit(Exception):
    """No room for another MCP session (`mcp.server.max_sessions`)."""


@dataclass(slots=True)
class _Call:
    """A client request being answered: its task (for `notifications/cancelled`) and where messages
    that belong to it go (an HTTP POST's event stream)."""

    task: asyncio.Task[Any] | None
    send: Send | None
    cancelled: bool = False


class ServedSession:
    """One MCP client the daemon serves (not `backends.mcp.session.McpSession`, the daemon as a client):
    its negotiated revision and capabilities, its requests and ours."""

    def __init__(
        self,
        server: McpServer,
        transport: str,
        identity: str,
        send: Send | None,
        label: str,
        on_list_changed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.server = server
        self.transport = transport  # "stdio", "http", "mqtt"
        self.identity = identity  # the caller, as the transport could tell it
        self.send = send  # messages that belong to no request (None: nowhere to send them now)
        self.label = label  # short public name: session keys, audit records
        self.on_list_changed = on_list_changed
        self.state = "new"  # "new" → "ready" (initialize answered) → "closed"
        self.initialized = False  # notifications/initialized seen
        self.protocol_version = ""
        self.client_capabilities: dict[str, Any] = {}
        self.client_name = ""
        self.last_used = time.monotonic()
        self._calls: dict[str, _Call] = {}
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._listed: list[ToolInfo] | None = None  # the tools as last listed to this client
        self._close_hooks: list[Callable[[ServedSession], None]] = []

    # -- state ----------------------------------------------------------------------
    @property
    def session_key(self) -> str:
        return f"{CHANNEL}:{self.transport}:{self.label}"

    @property
    def busy(self) -> bool:
        return bool(self._calls or self._pending)

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def on_close(self, hook: Callable[[ServedSession], None]) -> None:
        self._close_hooks.append(hook)

    def close(self, why: str = "closed") -> None:
        """End the session: its requests to the client fail, its calls are cancelled."""
        if self.state == "closed":
            return
        self.state = "closed"
        for future in self._pending.values():
            if not future.done():
                future.set_exception(McpClosed(f"the MCP session ended ({why})"))
        for call in self._calls.values():
            if call.task is not None and call.task is not asyncio.current_task():
                call.task.cancel()
        self.server._forget(self)
        for hook in self._close_hooks:
            try:
                hook(self)
            except Exception:
                log.exception("closing MCP session %s", self.label)
        log.info("MCP session %s (%s) ended: %s", self.label, self.identity, why)

    def context(self, request_id: str = "", progress: ProgressSink | None = None) -> ToolContext:
        """The per-call context of this session's calls: channel `mcp`, the session's identity."""
        return ToolContext(
            channel=CHANNEL,
            chat_id=self.label,
            peer_kind="direct",
            session_key=self.session_key,
            agent_id=self.server.agent_id,
            sender=self.client_name,
            caller=self.identity,
            request_id=request_id,
            progress=progress,
        )

    # -- messages from the client -------------------------------------------------------
    async def receive(self, message: dict[str, Any], send: Send | None = None) -> dict[str, Any] | None:
        """One message from the client. Returns a request's response; None for a notification,
        a response to one of ours, or a request the client cancelled. `send`: where messages that
        belong to this request go (default: the session's own). Run each request in a task of its
        own: that task is what `notifications/cancelled` cancels."""
        self.touch()
        if is_response(message):
            self._resolve(message)
            return None
        method = message.get("method")
        has_id = "id" in message
        id_ = message.get("id")
        if not isinstance(method, str):
            return error(id_ if _valid_id(id_) else None, INVALID_REQUEST, "not a request: no 'method'")
        params = message.get("params", {})
        if params is None:
            params = {}
        if not has_id:
            if isinstance(params, dict):
                self._notification(method, params)
            return None
        if not _valid_id(id_):
            return error(None, INVALID_REQUEST, "the request id must be a string or an integer")
        if not isinstance(params, dict):
            return error(id_, INVALID_PARAMS, f"{method}: 'params' must be an object")
        key = str(id_)
        if self.state == "closed":
            return error(id_, INVALID_REQUEST, "the MCP session has ended")
        if key in self._calls:
            return error(id_, INVALID_REQUEST, f"request id {id_!r} is already in use")
        if len(self._calls) >= MAX_IN_FLIGHT:
            why = f"{MAX_IN_FLIGHT} requests of this session are still being answered: wait for one"
            return error(id_, INVALID_REQUEST, why)
        call = _Call(asyncio.current_task(), send or self.send)
        self._calls[key] = call
        try:
            return result(id_, await self._dispatch(method, params, key))
        except McpError as e:
            return error(id_, e.code if e.code is not None else INTERNAL_ERROR, str(e), e.data)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if call.cancelled and task is not None and task.cancelling():
                task.uncancel()  # the client withdrew it: no answer is sent (the protocol says so)
                return None
            raise
        except Exception as e:
            log.exception("MCP request %s failed", method)
            return error(id_, INTERNAL_ERROR, f"internal error: {type(e).__name__}")
        finally:
            if self._calls.get(key) is call:
                del self._calls[key]

    def _notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "notifications/initialized":
            self.initialized = True
        elif method == "notifications/cancelled":
            call = self._calls.get(str(params.get("requestId")))
            if call is not None and call.task is not None and not call.cancelled:
                call.cancelled = True
                call.task.cancel()
        else:  # roots/list_changed, a client's progress: nothing we use
            log.debug("MCP notification %s ignored", method)

    def _resolve(self, message: dict[str, Any]) -> None:
        future = self._pending.get(message.get("id"))  # type: ignore[arg-type]
        if future is None or future.done():
            log.debug("a response to no request of ours: %r", message.get("id"))
            return
        if "error" in message:
            err = message.get("error") if isinstance(message.get("error"), dict) else {}
            text = err.get("message") if isinstance(err.get("message"), str) else "error"
            code = err.get("code") if isinstance(err.get("code"), int) else None
            future.set_exception(McpError(text, code))
        else:
            value = message.get("result")
            future.set_result(value if isinstance(value, dict) else {})

    async def _dispatch(self, method: str, params: dict[str, Any], request_id: str) -> dict[str, Any]:
        if method == "ping":
            return {}
        if method == "initialize":
            return self._initialize(params)
        if self.state != "ready":
            raise McpError(
                f"{method}: the session is not initialized (send initialize first)", INVALID_REQUEST
            )
        if method == "tools/list":
            return self._list_tools(params)
        if method == "tools/call":
            return await self._call_tool(params, request_id)
        raise McpError(f"method {method!r} is not offered by this server (it serves tools)", METHOD_NOT_FOUND)

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.state != "new":
            raise McpError("initialize: the session is already initialized", INVALID_REQUEST)
        requested = params.get("protocolVersion")
        if not isinstance(requested, str) or not requested:
            raise McpError("initialize: 'protocolVersion' (a string) is required", INVALID_PARAMS)
        capabilities = params.get("capabilities", {})
        if not isinstance(capabilities, dict):
            raise McpError("initialize: 'capabilities' must be an object", INVALID_PARAMS)
        info = params.get("clientInfo")
        name = info.get("name") if isinstance(info, dict) else None
        # The client's revision when we speak it, else our newest: the client decides whether to go on.
        self.protocol_version = requested if requested in PROTOCOL_VERSIONS else LATEST_VERSION
        self.client_capabilities = capabilities
        self.client_name = name[:MAX_CLIENT_NAME_CHARS] if isinstance(name, str) else ""
        self.state = "ready"
        log.info(
            "MCP session %s (%s, %s) speaks %s",
            self.label,
            self.identity,
            self.client_name or "unnamed client",
            self.protocol_version,
        )
        return {
            "protocolVersion": self.protocol_version,
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": SERVER_NAME, "title": "edgeclaw", "version": __version__},
            "instructions": self.server.instructions,
        }

    def visible_tools(self) -> list[ToolInfo]:
        return self.server.registry.infos(self.context())

    def _list_tools(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("cursor") is not None:
            # Every tool is in the first page, so no cursor was ever handed out.
            raise McpError(
                "tools/list: unknown cursor (this server lists every tool at once)", INVALID_PARAMS
            )
        infos = self.visible_tools()
        self._listed = infos
        return {"tools": [self.server.describe(info) for info in infos]}

    async def _call_tool(self, params: dict[str, Any], request_id: str) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise McpError("tools/call: 'name' (a string) is required", INVALID_PARAMS)
        arguments = params.get("arguments")
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        # The client asked for progress (a token): the call's progress goes back to it, on the
        # call's own stream, until the call is answered.
        progress = _ProgressToClient(self, token, request_id) if _valid_id(token) else None
        try:
            outcome = await self.server.registry.execute(
                name, {} if arguments is None else arguments, self.context(request_id, progress)
            )
        finally:
            if progress is not None:
                progress.close()
        if outcome.stage == "unknown_tool":
            raise McpError(outcome.error or f"unknown tool {name!r}", INVALID_PARAMS)
        answer: dict[str, Any] = {
            "content": [{"type": "text", "text": outcome.for_llm}],
            "isError": not outcome.ok,
        }
        if outcome.ok and outcome.data is not None:
            answer["structuredContent"] = outcome.data
        return answer

    # -- messages to the client ---------------------------------------------------------
    async def ask(
        self, method: str, params: dict[str, Any], send: Send | None, timeout_s: float
    ) -> dict[str, Any]:
        """A request to the client, answered within `timeout_s` (then withdrawn: TimeoutError)."""
        send = send or self.send
        if send is None or self.state == "closed":
            raise McpClosed("the MCP client cannot be reached now")
        id_ = next(self.server._request_ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[id_] = future
        try:
            await send(request(id_, method, params))
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            with contextlib.suppress(Exception):
                withdrawn = {"requestId": id_, "reason": f"no answer within {timeout_s:g} s"}
                await send(notification("notifications/cancelled", withdrawn))
            raise
        finally:
            self._pending.pop(id_, None)
            self.touch()

    @property
    def can_elicit(self) -> bool:
        """The client declared form elicitation, in a revision that has it."""
        declared = self.client_capabilities.get("elicitation")
        if self.protocol_version not in ELICITATION_VERSIONS or not isinstance(declared, dict):
            return False
        # An empty object is form mode (before 2025-11-25 the only mode); else "form" must be named.
        return not declared or "form" in declared

    async def elicit_approval(self, approval: ApprovalRequest, timeout_s: float) -> Decision:
        if not self.can_elicit:
            raise ApprovalUnavailable(
                f"approval required, and this MCP client cannot be asked: it did not declare the "
                f"elicitation capability (the {approval.tool} call is refused)"
            )
        call = self._calls.get(approval.ctx.request_id)
        params: dict[str, Any] = {
            "message": (
                f"{self.server.device or 'edgeclaw'} asks: allow this {approval.tool} call?\n"
                f"{approval.summary}"
            ),
            "requestedSchema": APPROVAL_SCHEMA,
        }
        if self.protocol_version in ELICITATION_MODE_VERSIONS:
            params["mode"] = "form"
        wait = min(timeout_s, approval.seconds_left or timeout_s)  # never past the broker's deadline
        try:
            answer = await self.ask("elicitation/create", params, call.send if call else None, wait)
        except McpError as e:
            raise ApprovalUnavailable(f"the MCP client could not ask: {e}") from None
        except TimeoutError:
            if wait >= approval.seconds_left:
                raise  # the broker's own deadline: it says so
            raise ApprovalUnavailable(
                f"the MCP client gave no answer within {wait:g} s (mcp.server.approval_timeout_s)"
            ) from None
        content = answer.get("content")
        accepted = answer.get("action") == "accept" and isinstance(content, dict)
        if accepted and content.get("decision") == "allow-once":  # type: ignore[union-attr]
            return Decision.ALLOW_ONCE
        return Decision.DENY

    def tools_maybe_changed(self) -> None:
        """After a change in the registry: tell the client when the tools it listed are not what
        it would see now."""
        if self.state != "ready" or self._listed is None:
            return
        now = self.visible_tools()
        if now == self._listed:
            return
        self._listed = now  # told once per change, not again until it lists them and they change
        if self.on_list_changed is not None:
            self.server.spawn(self.on_list_changed())
        elif self.send is not None:
            self.server.spawn(self.send(notification("notifications/tools/list_changed")))


class _ProgressToClient:
    """A call's progress as `notifications/progress` with the client's token (a `ProgressSink`)."""

    def __init__(self, session: ServedSession, token: str | int, request_id: str) -> None:
        self.session = session
        self.token = token
        call = session._calls.get(request_id)
        self.send = call.send if call is not None else session.send
        self.open = True

    def __call__(self, progress: float, total: float | None, message: str) -> None:
        session = self.session
        if not self.open or self.send is None or session.state == "closed":
            return
        params: dict[str, Any] = {"progressToken": self.token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message and session.protocol_version not in NO_PROGRESS_MESSAGE_VERSIONS:
            params["message"] = session.server.registry.scrubber.scrub(message)
        session.server.spawn(self.send(notification("notifications/progress", params)))

    def close(self) -> None:
        self.open = False


class McpServer:
    """The sessions of one process, the channel's approver, the registry's change listener.

    An async context manager: entering registers it as the approver of channel `mcp` and
    starts the idle sweep; leaving ends every session.
    """

    def __init__(
        self,
        registry: Registry,
        approvals: ApprovalBroker | None = None,
        *,
        device: str = "",
        max_sessions: int = 16,
        session_idle_s: float | None = 3600.0,
        approval_timeout_s: float = 120.0,
        agent_id: str = "main",
        instructions: str = INSTRUCTIONS,
    ) -> None:
        self.registry = registry
        self.approvals = approvals
        self.device = device
        self.max_sessions = max_sessions
        self.session_idle_s = session_idle_s
        self.approval_timeout_s = approval_timeout_s
        self.agent_id = agent_id
        self.instructions = instructions
        self.sessions: dict[str, ServedSession] = {}
        self._request_ids = itertools.count(1)
        self._tasks = TaskSet()
        self._sweeper: asyncio.Task[None] | None = None
        self._notify: asyncio.Handle | None = None

    async def __aenter__(self) -> McpServer:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def start(self) -> None:
        """Be the approver of channel `mcp`, follow the registry's changes, sweep idle sessions."""
        if self.approvals is not None:
            self.approvals.register(CHANNEL, self)
        self.registry.add_change_listener(self._registry_changed)
        if self.session_idle_s and self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="mcp-sessions")

    async def aclose(self) -> None:
        self.registry.remove_change_listener(self._registry_changed)
        if self.approvals is not None:
            self.approvals.unregister(CHANNEL, self)
        for session in list(self.sessions.values()):
            session.close("the server is stopping")
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._tasks.add(self._sweeper)
        await self._tasks.wait(grace_s=2.0)  # notifications still on their way get a moment

    # -- sessions -------------------------------------------------------------------------
    def open(
        self,
        transport: str,
        identity: str,
        send: Send | None,
        *,
        on_list_changed: Callable[[], Awaitable[None]] | None = None,
    ) -> ServedSession:
        """A new session; SessionLimit when `max_sessions` are open."""
        if len(self.sessions) >= self.max_sessions:
            raise SessionLimit(
                f"too many MCP sessions: {self.max_sessions} are open (mcp.server.max_sessions); "
                "end one or try again later"
            )
        label = secrets.token_hex(4)
        while label in self.sessions:
            label = secrets.token_hex(4)
        session = ServedSession(self, transport, identity, send, label, on_list_changed)
        self.sessions[label] = session
        return session

    def _forget(self, session: ServedSession) -> None:
        if self.sessions.get(session.label) is session:
            del self.sessions[session.label]

    async def _sweep(self) -> None:
        assert self.session_idle_s
        idle = self.session_idle_s
        while True:
            await asyncio.sleep(max(0.05, min(60.0, idle / 4)))
            now = time.monotonic()
            for session in list(self.sessions.values()):
                if not session.busy and now - session.last_used > idle:
                    session.close(f"unused for {idle:g} s")

    # -- the approver of channel `mcp` (edgeclaw.tools.approval) ----------------------------
    async def ask_approval(self, approval: ApprovalRequest) -> Decision:
        session = self.sessions.get(approval.ctx.chat_id)
        if session is None:
            raise ApprovalUnavailable("the MCP session that made the call has ended")
        return await session.elicit_approval(approval, self.approval_timeout_s)

    # -- the tools --------------------------------------------------------------------------
    def describe(self, info: ToolInfo) -> dict[str, Any]:
        """A tool as `tools/list` shows it: our JSON schema is its input schema."""
        shape: dict[str, Any] = {
            "name": info.name,
            "description": info.description,
            "inputSchema": info.parameters,
        }
        tool = self.registry.get(info.name)
        if tool is not None and tool.observes_only:
            shape["annotations"] = {"readOnlyHint": True}
        return shape

    def _registry_changed(self) -> None:
        # Coalesced: registering many tools at once is one notification per session.
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._notify is None:
            self._notify = loop.call_soon(self._tell_sessions)

    def _tell_sessions(self) -> None:
        self._notify = None
        for session in list(self.sessions.values()):
            try:
                session.tools_maybe_changed()
            except Exception:
                log.exception("checking MCP session %s for tool changes", session.label)

    def spawn(self, work: Awaitable[Any]) -> asyncio.Future[Any]:
        """Work nobody waits for (notifications), kept until done; its failure is logged."""
        task = self._tasks.spawn(work)
        task.add_done_callback(_log_failure)
        return task


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("sending to an MCP client failed: %s", task.exception())


def _valid_id(value: object) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)
