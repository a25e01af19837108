"""The agent loop: one inbound message in, one reply out.

The flow: the model returns tool calls → each is looked up, its arguments
parsed, checked against policy and run, all through `Registry.execute` with
the per-call context → the results (errors included, so the model can
recover) are appended → the model is asked again, until it answers in text
or `max_iterations` is reached.

Turns are serial within a session (a lock per session key) and concurrent
across sessions. Each turn runs in its own task so `/stop` (or Ctrl-C on a
terminal, or shutdown) cancels just that turn (`agent.turns`). A `/call` is a
turn too: a tool can run as long as a model turn, and must be as stoppable.
The other slash commands are answered at once (`agent.slash_commands`).

One loop serves every agent: "main" (the [agent] table) and the named agents
of [agents.NAME], each with its own provider chain, system prompt and
iteration limit (an `AgentSpec`, `agent.agents`). Which agent answers a
message is the message's own `agent`, else the first configured route that
matches its channel or session, else "main". Subagents run here too (`run_child`), in a
session of their own, with the context their manager prepared.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from edgeclaw.agent import context_budget, history, slash, tool_selection
from edgeclaw.agent.agents import AgentRoute, AgentSpec, ChildTurn, UnknownAgent
from edgeclaw.agent.channel import InboundMessage, Reply
from edgeclaw.agent.messages import Message, ToolCall
from edgeclaw.agent.prompt import PromptBuilder
from edgeclaw.agent.providers.base import Provider, ProviderError
from edgeclaw.agent.providers.chain import ProviderChain
from edgeclaw.agent.providers.model_info import ModelInfo
from edgeclaw.agent.slash_commands import SlashCommands
from edgeclaw.agent.streaming import TextSink, TurnStream
from edgeclaw.agent.turns import SessionTurns
from edgeclaw.store.sessions import SessionStore
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.outlets import DeliveryFailed, Outlets, channel_of
from edgeclaw.tools.registry import Registry

log = logging.getLogger("edgeclaw.agent")

NO_MODEL = (
    "No language model is configured on this device, so plain messages cannot be answered.\n" + slash.HELP
)
SHUTTING_DOWN = "The daemon is shutting down; try again in a moment."
# Where a child's session history is filed: a channel of its own, so sessions_list on a remote
# channel does not list its callers' children (their parents still read them: tools.sessions).
CHILD_CHANNEL = "subagent"

__all__ = ["AgentLoop", "AgentRoute", "AgentSpec", "ChildTurn", "NamedAgent", "UnknownAgent"]


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
        self.agent_id = agent_id  # the default agent: answers what no route claims
        self.max_iterations = max_iterations
        self.agents: dict[str, AgentSpec] = {agent_id: AgentSpec(agent_id, chain, prompt, max_iterations)}
        self.routes: list[AgentRoute] = []
        # Replies to messages nobody waits for (announcements, sessions_send) leave through these.
        self.outlets: Outlets | None = None
        self.history_budget_tokens = history_budget_tokens
        self.history_max_messages = history_max_messages
        self.facts = dict(facts or {})
        # More lines for /status's device block, asked for each time (the MCP servers' states).
        self.status_sources: list[Callable[[], list[str]]] = []
        self.turns = SessionTurns()
        self.slash_commands = SlashCommands(self)
        # Called with the session key and the caller's identity when a conversation ends (/new): e.g.
        # stop the background processes that caller started in it (never another caller's).
        self.session_end_hooks: list[Callable[[str, str], Awaitable[object]]] = []
        # Called with the session key and the turn's task when a turn was stopped (/stop, Ctrl-C):
        # the subagents that turn spawned are stopped with it.
        self.turn_stop_hooks: list[Callable[[str, object], None]] = self.turns.stop_hooks
        # Each provider's context size (agent.context_budget fits requests to it); None: not fitted.
        self.model_info: ModelInfo | None = None
        # Words that find a tool beside its description (the board's device names, tool_selection).
        self.tool_vocabulary: dict[str, str] = {}
        self._fit_told: set[str] = set()  # providers whose first fitted request was logged

    # -- agents ------------------------------------------------------------
    def add_agent(self, spec: AgentSpec) -> None:
        """Add a named agent, or replace one (the default agent's spec too)."""
        self.agents[spec.id] = spec
        if spec.id == self.agent_id:
            self.chain, self.prompt, self.max_iterations = spec.chain, spec.prompt, spec.max_iterations

    def agent_for(self, msg: InboundMessage) -> AgentSpec:
        """The agent that answers `msg`: its own choice, else the first matching route, else the default."""
        name = msg.agent or next((r.agent for r in self.routes if r.matches(msg)), self.agent_id)
        spec = self.agents.get(name)
        if spec is None:
            known = ", ".join(sorted(self.agents))
            raise UnknownAgent(f"no agent named {name!r} (configured: {known})")
        return spec

    def turn_token(self, session_key: str) -> object | None:
        """The turn running in this session now (compared by identity), or None."""
        return self.turns.token(session_key)

    # -- entry point -------------------------------------------------------
    async def handle(self, msg: InboundMessage) -> Reply:
        """The reply to one message, scrubbed: a model repeats what it read (a key in a file, a key it
        was told), errors quote what failed, and every reply goes straight out on some channel."""
        reply = await self._answer(msg)
        return dataclasses.replace(reply, text=self.registry.scrubber.scrub(reply.text))

    async def _answer(self, msg: InboundMessage) -> Reply:
        key = msg.session_key
        try:
            spec = self.agent_for(msg)
        except UnknownAgent as e:
            return Reply(f"error: {e}", key, False, msg)
        # Text another session or the daemon put here is never a command: "/new" from a model must
        # not end a technician's conversation.
        command = None if msg.origin else slash.parse(msg.text)
        if command is not None and command.name == "call":
            tool, _ = slash.split_call(command.argument)
            return await self._as_turn(
                msg, f"/call {tool}".rstrip(), lambda: self.slash_commands.reply(command, msg)
            )
        if command is not None:
            text, ok = await self.slash_commands.reply(command, msg)
            return Reply(text, key, ok, msg)
        if not msg.text.strip():
            return Reply("(empty message) Send a question, or one of these.\n" + slash.HELP, key, False, msg)
        if not spec.chain:
            return Reply(NO_MODEL, key, False, msg)
        return await self._as_turn(msg, "the model's turn", lambda: self._turn(key, msg, spec))

    async def _as_turn(
        self, msg: InboundMessage, label: str, body: Callable[[], Awaitable[tuple[str, bool]]]
    ) -> Reply:
        """Run `body` as the session's turn: serial with its other turns, in its own task, stoppable."""
        key = msg.session_key
        turn = await self.turns.run(key, label, body)
        if turn is None:
            return Reply(SHUTTING_DOWN, key, False, msg)
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

    def stop_turn(self, session_key: str) -> bool:
        """Cancel the turn (a model turn or a `/call`) running in this session, if any."""
        return self.turns.stop(session_key)

    async def shutdown(self) -> None:
        """Refuse new turns and cancel the running ones (and those nobody waits for)."""
        await self.turns.shutdown()

    def tool_names(self, msg: InboundMessage) -> list[str]:
        """The tools a message like this one may call (as /tools lists them): for completion."""
        return [info.name for info in self.registry.infos(self.context(msg))]

    def context(self, msg: InboundMessage, spec: AgentSpec | None = None) -> ToolContext:
        """The per-call values for tool calls made on behalf of this message."""
        if spec is None:
            try:
                spec = self.agent_for(msg)
            except UnknownAgent:
                spec = self.agents[self.agent_id]
        return ToolContext(
            channel=msg.channel,
            chat_id=msg.chat_id,
            peer_kind=msg.peer_kind,
            session_key=msg.session_key,
            agent_id=spec.id,
            sender=msg.sender,
            caller=msg.caller,
            request_id=msg.request_id,
            tool_ceiling=msg.tool_ceiling,
            progress=msg.on_progress,
        )

    # -- a model turn ------------------------------------------------------
    def _load(self, key: str) -> list[Message]:
        return history.repair([m for _, m in history.decode(self.sessions.load(key))])

    def _store(self, key: str, channel: str, message: Message, provider: str = "") -> None:
        self.sessions.append(key, channel, message.to_json(), message.estimated_tokens(), provider)

    async def _turn(self, key: str, msg: InboundMessage, spec: AgentSpec) -> tuple[str, bool]:
        """The reply text, and whether the model finished (False when the iteration limit ended it)."""
        base_ctx = self.context(msg, spec)
        # The caller's own context files and memory (see agent.prompt), not another caller's.
        system = spec.prompt.build(spec.id, base_ctx.identity)
        return await self._model_turn(
            key,
            msg.channel,
            msg.text,
            base_ctx,
            spec.chain,
            system,
            spec.max_iterations,
            spec.prompt.volatile_note(),
            on_text=msg.on_text,
        )

    async def _model_turn(
        self,
        key: str,
        channel: str,
        text: str,
        base_ctx: ToolContext,
        chain: ProviderChain,
        system: str,
        max_iterations: int,
        note: str = "",
        on_text: TextSink | None = None,
    ) -> tuple[str, bool]:
        messages = self._load(key)
        user = Message("user", text)
        self._store(key, channel, user)
        messages.append(user)
        # What changes every turn (the time) goes after everything else, on this turn's message as
        # sent (the stored one stays the person's words): the prefix before it is the same bytes as
        # the last request's, and a server's prompt cache reuses it (see agent.prompt).
        sent_user = dataclasses.replace(user, content=f"{text}\n\n{note}") if note else user

        def tools_for(provider: str, fmt: str) -> list[dict[str, Any]]:
            return self.registry.definitions(base_ctx.derive(provider=provider), fmt)

        # The answer as it is written, scrubbed, to the channel that shows it (agent.streaming).
        stream = TurnStream(on_text, self.registry.scrubber.scrub) if on_text is not None else None
        try:
            for _ in range(max_iterations):
                trimmed = history.trim(messages, self.history_budget_tokens)
                window = [sent_user if m is user else m for m in trimmed]
                # Tools are ranked against people's words, not the note (the time would find `cron`).
                fit = functools.partial(self._fit, query=tool_selection.query_text(trimmed))
                completion = await chain.complete(system, window, tools_for, fit, stream)
                if stream is not None:
                    stream.end_step()
                reply = Message("assistant", completion.text, list(_unique_ids(completion.tool_calls)))
                self._store(key, channel, reply, completion.provider)
                messages.append(reply)
                if not reply.tool_calls:
                    answer = completion.text.strip() or "(the model gave an empty answer)"
                    return answer + (CUT_OFF if completion.truncated else ""), True
                ctx = base_ctx.derive(provider=completion.provider)
                for call in reply.tool_calls:
                    # A call cut off by the token limit, or whose arguments are no JSON object, is not
                    # run; its result tells the model why, so it can make the call again.
                    refusal = _not_run(call, completion.truncated)
                    if refusal:
                        result = Message("tool", refusal, tool_call_id=call.id, name=call.name, is_error=True)
                        self._store(key, channel, result)
                        messages.append(result)
                        continue
                    outcome = await self.registry.execute(call.name, call.arguments, ctx)
                    result = Message(
                        "tool",
                        outcome.for_llm if outcome.ok else (outcome.error or outcome.for_llm),
                        tool_call_id=call.id,
                        name=call.name,
                        is_error=not outcome.ok,
                    )
                    self._store(key, channel, result)
                    messages.append(result)
            return (
                f"Stopped after {max_iterations} model steps without a final answer; "
                "the work so far is in the session history. Send a follow-up to continue."
            ), False
        finally:
            self._cap_storage(key)

    async def _fit(
        self,
        provider: Provider,
        system: str,
        messages: Sequence[Message],
        tools: list[dict[str, Any]],
        *,
        query: str | None = None,
    ) -> tuple[str, Sequence[Message], list[dict[str, Any]], int | None]:
        """The request shaped to the provider's context size, when it is known (agent.context_budget),
        and the answer's room in it; no tools to a server whose chat template would drop them."""
        info = self.model_info
        model = info.model(provider.name) if info is not None else None
        if info is None or model is None:
            return system, messages, tools, None
        if tools and await info.takes_tools(provider.name) is False:
            provider.tools_supported = False  # from now on the chain sends none (/status says why)
            tools = []
        size = await info.context_tokens(provider.name)
        if size is None:
            return system, messages, tools, None
        limits = context_budget.Limits(size, model.answer_tokens)
        fitted = context_budget.fit(limits, system, messages, tools, self.tool_vocabulary, query)
        if fitted.changed:
            first = provider.name not in self._fit_told
            self._fit_told.add(provider.name)
            log.log(
                logging.INFO if first else logging.DEBUG,
                "%s: fitted to its %d-token context: %s (~%d tokens of prompt)",
                provider.name,
                size,
                fitted.summary(),
                fitted.estimated_tokens,
            )
        return fitted.system, fitted.messages, fitted.tools, fitted.answer_tokens

    # -- subagents and messages nobody waits for ---------------------------
    async def run_child(self, child: ChildTurn) -> tuple[str, bool]:
        """A subagent's whole run: its task as the first user message of its own session.

        Serial with anything else sent into that session; not one of the turns `/stop` and
        `shutdown` see: the subagent manager stops children (and drains them at shutdown).
        Raises ProviderError when no model answers, UnknownAgent for an agent not configured.
        """
        spec = self.agents.get(child.agent_id)
        if spec is None:
            raise UnknownAgent(
                f"no agent named {child.agent_id!r} (configured: {', '.join(sorted(self.agents))})"
            )
        if not spec.chain:
            raise UnknownAgent(f"agent {spec.id!r} has no language model configured")
        system = spec.prompt.build(spec.id, child.ctx.identity) + "\n\n" + child.brief
        async with self.turns.session_lock(child.session_key):
            return await self._model_turn(
                child.session_key,
                CHILD_CHANNEL,
                child.task,
                child.ctx,
                spec.chain,
                system,
                child.max_iterations,
                spec.prompt.volatile_note(),
            )

    def notice(self, session_key: str, channel: str, text: str) -> None:
        """File a notice in a session's history, for its next turn to see (no model is asked)."""
        self._store(session_key, channel, Message("user", text))

    async def deliver_turn(self, msg: InboundMessage) -> Reply:
        """Answer a message no person is waiting on (`msg.origin` set) and deliver the reply into its
        session's channel. Without a model, the message itself is filed and delivered instead."""
        try:
            spec = self.agent_for(msg)
        except UnknownAgent as e:
            return Reply(f"error: {e}", msg.session_key, False, msg)
        if not spec.chain:
            self.notice(msg.session_key, msg.channel, msg.text)
            reply = Reply(msg.text, msg.session_key, True, msg)
        else:
            reply = await self.handle(msg)
        await self.deliver(msg.session_key, reply.text)
        return reply

    def deliver_later(self, msg: InboundMessage) -> None:
        """`deliver_turn` in the background (cancelled at shutdown)."""
        self.turns.background.spawn(self.deliver_turn(msg))

    def submit(self, session_key: str, text: str, sender: ToolContext) -> None:
        """A turn in another session on `sender`'s behalf (sessions_send): answered by that session's
        agent on that session's channel, with no more tools than the sender has itself."""
        channel = channel_of(session_key)
        self.deliver_later(
            InboundMessage(
                channel=channel,
                text=text,
                chat_id=session_key.partition(":")[2],
                sender=f"session {sender.session_key}",
                session=session_key,
                caller=sender.identity,
                origin=f"session {sender.session_key}",
                tool_ceiling=self.registry.policy.allowed(sender),
            )
        )

    async def deliver(self, session_key: str, text: str) -> bool:
        """Show text in a session's channel (scrubbed); False, with a log line, when it cannot be."""
        if self.outlets is None:
            log.info("nowhere to deliver to session %s (no channel outlets)", session_key)
            return False
        try:
            await self.outlets.to_session(session_key, self.registry.scrubber.scrub(text))
        except DeliveryFailed as e:
            log.info("not delivered to session %s: %s", session_key, e)
            return False
        return True

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


CUT_OFF = "\n(The answer was cut off at the model's token limit, max_tokens.)"


def _not_run(call: ToolCall, truncated: bool) -> str:
    """Why a call the model made is not run ("" = it is run)."""
    if truncated:
        return (
            f"not run: your answer was cut off at the token limit before it ended, so this call to "
            f"{call.name} may be incomplete. Make the call again (with shorter arguments if they were long)."
        )
    if call.problem:
        return (
            f"not run: the arguments of your call to {call.name} were not a JSON object ({call.problem}). "
            "Make the call again with its arguments as one JSON object."
        )
    return ""


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


@dataclasses.dataclass(frozen=True)
class NamedAgent:
    """One agent of the loop, by name: what a scheduled job or a delegated task runs its turns through."""

    loop: AgentLoop
    agent_id: str

    @property
    def spec(self) -> AgentSpec:
        return self.loop.agents[self.agent_id]

    async def handle(self, msg: InboundMessage) -> Reply:
        """A turn of this agent in `msg`'s session (scrubbed reply), whatever the routes say."""
        return await self.loop.handle(dataclasses.replace(msg, agent=self.agent_id))

    def stop_turn(self, session_key: str) -> bool:
        return self.loop.stop_turn(session_key)
