"""The console channel: a session per configured port, reopened when lost, asking approvals on the port.

`ConsoleChannel` is an async context manager, like every channel: entering it
starts one supervisor task per port and registers the console as the
approver for channel "console" and as its outlet (messages and notices shown
on a logged-in port: `message`, `sessions_send`, subagent results); leaving it
says goodbye on every open port, stops the tasks and unregisters. A port that is missing at start-up is not
an error: it is retried with backoff while the rest of the daemon serves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import field
from types import TracebackType
from urllib.parse import urlsplit

from edgeclaw.agent.channel import Reply
from edgeclaw.agent.loop import AgentLoop
from edgeclaw.channels.console.login import LoginGate
from edgeclaw.channels.console.port import LineSettings, SerialPort, serve_port
from edgeclaw.channels.console.session import CHANNEL, Banner, ConsoleSession, SessionOptions
from edgeclaw.records import dataclass
from edgeclaw.tools.approval import ApprovalBroker, ApprovalRequest, ApprovalUnavailable, Decision
from edgeclaw.tools.outlets import DeliveryFailed, Outgoing, Outlets

log = logging.getLogger("edgeclaw.console")


@dataclass(frozen=True)
class Endpoint:
    """A configured language model, as the banner names it and probes it."""

    name: str
    model: str
    url: str


@dataclass
class LlmProbe:
    """Whether a language model is reachable, for the banner: a short TCP connect to each endpoint.

    A connect says the server is there without spending a model call; the
    agent's own record of the last request (ok or failing) is shown beside it.
    Answers are kept for `cache_s` so several consoles do not probe at once.
    """

    agent: AgentLoop
    endpoints: Sequence[Endpoint]
    timeout_s: float = 1.5
    cache_s: float = 30.0
    _cached: tuple[float, str] | None = field(default=None, repr=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    async def __call__(self) -> str:
        if not self.endpoints:
            return "LLM: none configured; slash commands only (/help)."
        async with self._lock:
            now = time.monotonic()
            if self._cached is not None and now - self._cached[0] < self.cache_s:
                return self._cached[1]
            states = await asyncio.gather(*(self._probe(e) for e in self.endpoints))
            parts = [f"{e.name} ({e.model}) {state}" for e, state in zip(self.endpoints, states, strict=True)]
            reachable = any(s.startswith("reachable") for s in states)
            text = "LLM: " + "; ".join(parts) + ("." if reachable else "; slash commands still work (/help).")
            self._cached = (now, text)
            return text

    async def _probe(self, endpoint: Endpoint) -> str:
        health = self.agent.chain.health.get(endpoint.name)
        last = ""
        if health is not None and health.ok is False:
            last = f", last request failed: {health.last_error}"
        url = urlsplit(endpoint.url)
        host = url.hostname or ""
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            async with asyncio.timeout(self.timeout_s):
                _, writer = await asyncio.open_connection(host, port)
            writer.close()
        except TimeoutError:
            return f"unreachable (no answer from {host}:{port}){last}"
        except OSError as e:
            return f"unreachable ({e.strerror or e}){last}"
        return f"reachable{await self._tools_note(endpoint)}{last}"

    async def _tools_note(self, endpoint: Endpoint) -> str:
        """Said once, here and in /status: a model that takes no tools (Ollama tells) only chats."""
        provider = next((p for p in self.agent.chain.providers if p.name == endpoint.name), None)
        if provider is None or await provider.probe_tools() is not False:
            return ""
        return ", takes no tools (plain chat and slash commands only)"


class ConsoleChannel:
    """Serves the technician console on every configured port."""

    name = CHANNEL

    def __init__(
        self,
        agent: AgentLoop,
        ports: Sequence[str],
        *,
        line: LineSettings,
        banner: Banner,
        options: SessionOptions | None = None,
        gate: LoginGate | None = None,
        approvals: ApprovalBroker | None = None,
        outlets: Outlets | None = None,
        endpoints: Sequence[Endpoint] = (),
        reconnect_min_s: float = 1.0,
        reconnect_max_s: float = 30.0,
        on_session_end: Callable[[str], object] | None = None,
    ) -> None:
        self.agent = agent
        # Told the port's path when a session ends by itself (SessionOptions.end_on_logout).
        self.on_session_end = on_session_end
        self.ports = list(ports)
        self.line = line
        self.banner = banner
        self.options = options or SessionOptions()
        self.gate = gate
        self.approvals = approvals
        self.outlets = outlets
        self.llm_status = LlmProbe(agent, endpoints)
        self.reconnect_min_s = reconnect_min_s
        self.reconnect_max_s = reconnect_max_s
        self.sessions: dict[str, ConsoleSession] = {}  # chat id (the port path) → its live session
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> ConsoleChannel:
        if self.approvals is not None:
            self.approvals.register(CHANNEL, self)
        if self.outlets is not None:
            self.outlets.register(CHANNEL, self)
        for path in self.ports:
            self._tasks.append(asyncio.create_task(self._serve(path), name=f"console {path}"))
        log.info(
            "console on %s (%s, login %s)",
            ", ".join(self.ports),
            self.line.describe(),
            "required" if self.gate else "off",
        )
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.approvals is not None:
            self.approvals.unregister(CHANNEL, self)
        if self.outlets is not None:
            self.outlets.unregister(CHANNEL, self)
        for session in list(self.sessions.values()):
            session.goodbye("[edgeclaw is stopping]")
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _serve(self, path: str) -> None:
        async def run_session(port: SerialPort) -> None:
            session = ConsoleSession(
                port,
                self.agent,
                banner=self.banner,
                llm_status=self.llm_status,
                gate=self.gate,
                options=self.options,
            )
            self.sessions[path] = session
            try:
                await session.run()
            finally:
                if self.sessions.get(path) is session:
                    del self.sessions[path]
            if self.on_session_end is not None:  # ended by itself: not the port lost, not cancelled
                self.on_session_end(path)

        await serve_port(
            path,
            self.line,
            run_session,
            min_backoff_s=self.reconnect_min_s,
            max_backoff_s=self.reconnect_max_s,
        )

    # -- the Channel protocol ------------------------------------------------
    async def send(self, reply: Reply) -> None:
        """Show a reply on the port it belongs to (dropped, with a log line, when that port is down)."""
        chat_id = (
            reply.in_reply_to.chat_id if reply.in_reply_to else reply.session.removeprefix(CHANNEL + ":")
        )
        session = self.sessions.get(chat_id)
        if session is None:
            log.info("console %s: not connected; dropped a reply for session %s", chat_id, reply.session)
            return
        await session.deliver(reply.text)

    async def ask_approval(self, request: ApprovalRequest) -> Decision | None:
        session = self.sessions.get(request.ctx.chat_id)
        if session is None:
            return None
        if request.ctx.parent_session and not session.in_turn:
            # A subagent running on after its parent's turn ended: the technician is typing
            # something else, and a question must not land in the middle of it.
            raise ApprovalUnavailable(
                f"the technician at console {request.ctx.chat_id} is not in a turn; a subagent's approval "
                "is asked only while its parent's turn runs (spawn it with mode 'run', or wait for it)"
            )
        return await session.ask_approval(request)

    # -- the Outlet protocol (edgeclaw.tools.outlets) ---------------------------
    def _logged_in(self, port: str) -> ConsoleSession:
        """The port's session when someone is logged in on it; DeliveryFailed otherwise (what is shown
        on a port is seen by whoever stands at it, so nothing goes to a port nobody logged in on)."""
        if port not in self.ports:
            raise DeliveryFailed(f"{port!r} is not a console port here (ports: {', '.join(self.ports)})")
        session = self.sessions.get(port)
        if session is None:
            raise DeliveryFailed(f"console {port} is not connected")
        if not session.logged_in:
            raise DeliveryFailed(f"nobody is logged in on console {port}")
        return session

    def has_session(self, session_key: str) -> bool:
        session = self.sessions.get(session_key.removeprefix(CHANNEL + ":"))
        return session is not None and session.logged_in

    async def to_session(self, session_key: str, text: str) -> str:
        port = session_key.removeprefix(CHANNEL + ":")
        await self._logged_in(port).deliver(text)
        return f"shown on console {port}"

    async def to_target(self, target: str, message: Outgoing) -> str:
        session = self._logged_in(target)
        head = f"[message from {message.origin}]" if message.origin else "[message]"
        if message.title:
            head += f" {message.title}"
        await session.deliver(f"{head}\n{message.text}")
        return f"shown on console {target}"
