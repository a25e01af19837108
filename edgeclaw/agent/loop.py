"""The agent loop: one inbound message in, one reply out.

The flow: the model returns tool calls → each is looked up, its arguments
parsed, checked against policy and run, all through `Registry.execute` with
the per-call context → the results (errors included, so the model can
recover) are appended → the model is asked again, until it answers in text
or `max_iterations` is reached.

Turns are serial within a session (a lock per session key) and concurrent
across sessions. Each turn runs in its own task so `/stop` (or Ctrl-C on a
terminal, or shutdown) cancels just that turn. A `/call` is a turn too: a tool
can run as long as a model turn, and must be as stoppable.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from edgeclaw import __version__
from edgeclaw.agent import history, slash, tool_help
from edgeclaw.agent.channel import InboundMessage, Reply
from edgeclaw.agent.messages import Message
from edgeclaw.agent.prompt import PromptBuilder
from edgeclaw.agent.providers.base import ProviderError
from edgeclaw.agent.providers.chain import ProviderChain
from edgeclaw.errors import EdgeclawError
from edgeclaw.store.sessions import SessionStore
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.registry import Registry
from edgeclaw.wording import plural

log = logging.getLogger("edgeclaw.agent")

NO_MODEL = (
    "No language model is configured on this device, so plain messages cannot be answered.\n" + slash.HELP
)
SHUTTING_DOWN = "The daemon is shutting down; try again in a moment."


class AgentLoop:
    def __init__(
        self,
        registry: Registry,
        sessions: SessionStore,
        chain: ProviderChain,
        prompt: PromptBuilder,
        *,
        agent_id: str = "main",
        max_iterations: int = 20,
        history_budget_tokens: int = 6000,
        history_max_messages: int = 400,
        facts: Mapping[str, str] | None = None,
    ) -> None:
        self.registry = registry
        self.sessions = sessions
        self.chain = chain
        self.prompt = prompt
        self.agent_id = agent_id
        self.max_iterations = max_iterations
        self.history_budget_tokens = history_budget_tokens
        self.history_max_messages = history_max_messages
        self.facts = dict(facts or {})
        # Per session: its lock and how many messages hold or wait for it. Dropped at zero, because
        # session keys come from callers (MQTT's "session") and must not pile up for the daemon's life.
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self._turns: dict[str, asyncio.Task[tuple[str, bool]]] = {}
        self._turn_labels: dict[str, str] = {}  # what each running turn is, for /stop and /status
        self._stopping = False
        # Called with the session key and the caller's identity when a conversation ends (/new): e.g.
        # stop the background processes that caller started in it (never another caller's).
        self.session_end_hooks: list[Callable[[str, str], Awaitable[object]]] = []

    # -- entry point -------------------------------------------------------
    async def handle(self, msg: InboundMessage) -> Reply:
        """The reply to one message, scrubbed: a model repeats what it read (a key in a file, a key it
        was told), errors quote what failed, and every reply goes straight out on some channel."""
        reply = await self._answer(msg)
        return dataclasses.replace(reply, text=self.registry.scrubber.scrub(reply.text))

    async def _answer(self, msg: InboundMessage) -> Reply:
        key = msg.session_key
        command = slash.parse(msg.text)
        if command is not None and command.name == "call":
            tool, _ = slash.split_call(command.argument)
            return await self._as_turn(msg, f"/call {tool}".rstrip(), lambda: self._slash_reply(command, msg))
        if command is not None:
            text, ok = await self._slash_reply(command, msg)
            return Reply(text, key, ok, msg)
        if not msg.text.strip():
            return Reply("(empty message) Send a question, or one of these.\n" + slash.HELP, key, False, msg)
        if not self.chain:
            return Reply(NO_MODEL, key, False, msg)
        return await self._as_turn(msg, "the model's turn", lambda: self._turn(key, msg))

    async def _as_turn(
        self, msg: InboundMessage, label: str, body: Callable[[], Awaitable[tuple[str, bool]]]
    ) -> Reply:
        """Run `body` as the session's turn: serial with its other turns, in its own task, stoppable."""
        key = msg.session_key
        async with self._session_lock(key):
            # Checked under the lock: a message queued behind a turn that shutdown cancelled must not start.
            if self._stopping:
                return Reply(SHUTTING_DOWN, key, False, msg)
            turn: asyncio.Task[tuple[str, bool]] = asyncio.ensure_future(body())
            self._turns[key] = turn
            self._turn_labels[key] = label
            try:
                await asyncio.wait({turn})
            except asyncio.CancelledError:
                # Keep the session locked until the turn has unwound, so the next one cannot start
                # while this one still runs its clean-up (a tool stopping its processes).
                turn.cancel()
                await asyncio.wait({turn})
                raise
            finally:
                self._turns.pop(key, None)
                self._turn_labels.pop(key, None)
        if turn.cancelled():
            return Reply("Stopped.", key, False, msg)
        error = turn.exception()
        if isinstance(error, ProviderError):
            return Reply(f"{error}.\nSlash commands still work:\n{slash.HELP}", key, False, msg)
        if error is not None:
            log.error("turn failed in session %s", key, exc_info=error)
            return Reply(f"The turn failed: {type(error).__name__}: {error}", key, False, msg)
        text, ok = turn.result()
        return Reply(text, key, ok, msg)

    @contextlib.asynccontextmanager
    async def _session_lock(self, key: str) -> AsyncIterator[None]:
        """Turns are serial within a session: hold its lock, created on demand and dropped when unused."""
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[key]

    def stop_turn(self, session_key: str) -> bool:
        """Cancel the turn (a model turn or a `/call`) running in this session, if any."""
        turn = self._turns.get(session_key)
        if turn is None or turn.done():
            return False
        turn.cancel()
        return True

    async def shutdown(self) -> None:
        """Refuse new turns and cancel the running ones."""
        self._stopping = True
        turns = list(self._turns.values())
        for turn in turns:
            turn.cancel()
        if turns:
            await asyncio.wait(turns)

    def tool_names(self, msg: InboundMessage) -> list[str]:
        """The tools a message like this one may call (as /tools lists them): for completion."""
        return [info.name for info in self.registry.infos(self._context(msg))]

    def _context(self, msg: InboundMessage) -> ToolContext:
        """The per-call values for tool calls made on behalf of this message."""
        return ToolContext(
            channel=msg.channel,
            chat_id=msg.chat_id,
            peer_kind=msg.peer_kind,
            session_key=msg.session_key,
            agent_id=self.agent_id,
            sender=msg.sender,
            caller=msg.caller,
            request_id=msg.request_id,
        )

    # -- a model turn ------------------------------------------------------
    def _load(self, key: str) -> list[Message]:
        return history.repair([m for _, m in history.decode(self.sessions.load(key))])

    def _store(self, key: str, channel: str, message: Message, provider: str = "") -> None:
        self.sessions.append(key, channel, message.to_json(), message.estimated_tokens(), provider)

    async def _turn(self, key: str, msg: InboundMessage) -> tuple[str, bool]:
        """The reply text, and whether the model finished (False when the iteration limit ended it)."""
        messages = self._load(key)
        user = Message("user", msg.text)
        self._store(key, msg.channel, user)
        messages.append(user)
        base_ctx = self._context(msg)
        # The caller's own context files and memory (see agent.prompt), not another caller's.
        system = self.prompt.build(base_ctx.agent_id, base_ctx.identity)

        def tools_for(provider: str, fmt: str) -> list[dict[str, Any]]:
            return self.registry.definitions(dataclasses.replace(base_ctx, provider=provider), fmt)

        try:
            for _ in range(self.max_iterations):
                window = history.trim(messages, self.history_budget_tokens)
                completion = await self.chain.complete(system, window, tools_for)
                reply = Message("assistant", completion.text, list(_unique_ids(completion.tool_calls)))
                self._store(key, msg.channel, reply, completion.provider)
                messages.append(reply)
                if not reply.tool_calls:
                    return completion.text.strip() or "(the model gave an empty answer)", True
                ctx = dataclasses.replace(base_ctx, provider=completion.provider)
                for call in reply.tool_calls:
                    outcome = await self.registry.execute(call.name, call.arguments, ctx)
                    result = Message(
                        "tool",
                        outcome.for_llm if outcome.ok else (outcome.error or outcome.for_llm),
                        tool_call_id=call.id,
                        name=call.name,
                        is_error=not outcome.ok,
                    )
                    self._store(key, msg.channel, result)
                    messages.append(result)
            return (
                f"Stopped after {self.max_iterations} model steps without a final answer; "
                "the work so far is in the session history. Send a follow-up to continue."
            ), False
        finally:
            self._cap_storage(key)

    def _cap_storage(self, key: str) -> None:
        """Drop the oldest whole turns beyond history_max_messages, so a long-lived session stays bounded."""
        rows = self.sessions.load(key)
        excess = len(rows) - self.history_max_messages
        if excess <= 0:
            return
        decoded = history.decode(rows)
        for row_id, m in decoded[excess:]:
            if m.role == "user":
                self.sessions.prune(key, row_id)
                return

    # -- slash commands ----------------------------------------------------
    async def _slash_reply(self, command: slash.SlashCommand, msg: InboundMessage) -> tuple[str, bool]:
        try:
            return await self._slash(command, msg)
        except Exception as e:  # the store or a hook failed: answer, never take the channel down
            # Our own errors carry a message meant for people; anything else is a bug worth a traceback.
            unexpected = not isinstance(e, EdgeclawError)
            log.error("/%s failed in session %s: %s", command.name, msg.session_key, e, exc_info=unexpected)
            return f"error: /{command.name} failed: {type(e).__name__}: {e}", False

    async def _slash(self, command: slash.SlashCommand, msg: InboundMessage) -> tuple[str, bool]:
        key = msg.session_key
        ctx = self._context(msg)
        name = command.name
        if name in ("help", "?"):
            if not command.argument:
                return slash.HELP, True
            wanted = command.argument.split()[0].removeprefix("/")
            info = next((i for i in self.registry.infos(ctx) if i.name == wanted), None)
            if info is None:
                return f"no tool named {wanted!r} may be called here; /tools lists those that may", False
            return tool_help.describe_tool(info), True
        if name == "tools":
            infos = self.registry.infos(ctx)
            if not infos:
                return "No tools are allowed here.", True
            width = max(len(i.name) for i in infos)
            return "\n".join(f"{i.name:<{width}}  {i.description.split('. ')[0]}" for i in infos), True
        if name == "call":
            tool, args = slash.split_call(command.argument)
            if not tool:
                return "usage: /call TOOL {json arguments}", False
            outcome = await self.registry.execute(tool, args, ctx)
            if not outcome.ok:
                return f"error: {outcome.error}", False
            # A command's output ends with a newline; a reply does not (it would show as a blank row).
            text = outcome.for_user if outcome.for_user is not None else outcome.for_llm
            return text.rstrip("\n") or "(no output)", True
        if name == "status":
            return self._status(key), True
        if name == "stop":
            label = self._turn_labels.get(key, "the turn")
            return (f"Stopping {label}." if self.stop_turn(key) else "Nothing is running."), True
        if name == "new":
            if key in self._turns:
                return "A turn is in progress; /stop it first.", False
            archived = self.sessions.archive(key)
            for hook in self.session_end_hooks:
                try:
                    await hook(key, ctx.identity)
                except Exception:
                    log.exception("session-end hook failed for %s", key)
            return (
                "Started a fresh conversation." + (f" The old one is kept as {archived}." if archived else "")
            ), True
        return f"unknown command /{name}\n{slash.HELP}", False

    def _status(self, key: str) -> str:
        """Two blocks: what belongs to this session, and what is the device's (every session's)."""
        lines = [f"edgeclaw {__version__}", f"session {key} (this conversation):"]
        summary = self.sessions.summary(key)
        lines.append(
            f"  conversation: {plural(summary.messages, 'message')}, ~{plural(summary.tokens, 'token')}"
            if summary is not None
            else "  conversation: empty"
        )
        mine = self.registry.stats.sessions.get(key)
        calls = mine.calls if mine is not None else 0
        failed = mine.errors if mine is not None else 0
        lines.append(f"  tool calls: {calls}" + (f" ({failed} failed or refused)" if failed else ""))
        label = self._turn_labels.get(key)
        lines.append(f"  now: running {label}" if key in self._turns and label else "  now: idle")
        lines.append("device (all sessions, since start):")
        lines += [f"  {k}: {v}" for k, v in self.facts.items() if v]
        if not self.chain:
            lines.append("  models: none configured (slash commands only)")
        for provider in self.chain.providers:
            h = self.chain.health[provider.name]
            state = "not tried yet" if h.ok is None else ("ok" if h.ok else f"failing: {h.last_error}")
            lines.append(f"  model {provider.name} ({provider.kind}, {provider.model}): {state}")
        totals = self.registry.stats.totals()
        lines.append(
            f"  tool calls: {totals['calls']} ({totals['errors']} failed, {totals['refused']} refused)"
        )
        lines.append(f"  sessions with a turn running: {len(self._turns)}")
        return "\n".join(lines)


def _unique_ids(calls: Any) -> list[Any]:
    """Models sometimes repeat or omit call ids; results must map one-to-one, so make them unique."""
    seen: set[str] = set()
    out = []
    for i, call in enumerate(calls):
        call_id = call.id or f"call_{i}"
        while call_id in seen:
            call_id = f"{call_id}_{i}"
        seen.add(call_id)
        out.append(dataclasses.replace(call, id=call_id) if call_id != call.id else call)
    return out
