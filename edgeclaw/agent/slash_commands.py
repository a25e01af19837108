"""What the slash commands answer: /help, /tools, /call, /status, /stop, /new.

`agent.slash` parses a command; this answers it, for one session of the agent
loop. A command that fails is answered too (never taking the channel down).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from edgeclaw import __version__
from edgeclaw.agent import slash, tool_help
from edgeclaw.agent.agents import UnknownAgent
from edgeclaw.agent.channel import InboundMessage
from edgeclaw.errors import EdgeclawError
from edgeclaw.tools.outlets import channel_of
from edgeclaw.wording import plural

if TYPE_CHECKING:
    from edgeclaw.agent.loop import AgentLoop

log = logging.getLogger("edgeclaw.agent")


class SlashCommands:
    """The answers to one loop's slash commands, from its registry, sessions, agents and turns."""

    def __init__(self, loop: AgentLoop) -> None:
        self.loop = loop

    async def reply(self, command: slash.SlashCommand, msg: InboundMessage) -> tuple[str, bool]:
        try:
            return await self._answer(command, msg)
        except Exception as e:  # the store or a hook failed: answer, never take the channel down
            # Our own errors carry a message meant for people; anything else is a bug worth a traceback.
            unexpected = not isinstance(e, EdgeclawError)
            log.error("/%s failed in session %s: %s", command.name, msg.session_key, e, exc_info=unexpected)
            return f"error: /{command.name} failed: {type(e).__name__}: {e}", False

    async def _answer(self, command: slash.SlashCommand, msg: InboundMessage) -> tuple[str, bool]:
        loop = self.loop
        registry = loop.registry
        key = msg.session_key
        ctx = loop.context(msg)
        name = command.name
        if name in ("help", "?"):
            if not command.argument:
                return slash.HELP, True
            wanted = command.argument.split()[0].removeprefix("/")
            info = next((i for i in registry.infos(ctx) if i.name == wanted), None)
            if info is None:
                return f"no tool named {wanted!r} may be called here; /tools lists those that may", False
            return tool_help.describe_tool(info), True
        if name == "tools":
            infos = registry.infos(ctx)
            if not infos:
                return "No tools are allowed here.", True
            width = max(len(i.name) for i in infos)
            return "\n".join(f"{i.name:<{width}}  {i.description.split('. ')[0]}" for i in infos), True
        if name == "call":
            tool, args = slash.split_call(command.argument)
            if not tool:
                return "usage: /call TOOL {json arguments}", False
            outcome = await registry.execute(tool, args, ctx)
            if not outcome.ok:
                return f"error: {outcome.error}", False
            # A command's output ends with a newline; a reply does not (it would show as a blank row).
            text = outcome.for_user if outcome.for_user is not None else outcome.for_llm
            return text.rstrip("\n") or "(no output)", True
        if name == "status":
            return self.status(key), True
        if name == "stop":
            label = loop.turns.label(key) or "the turn"
            return (f"Stopping {label}." if loop.stop_turn(key) else "Nothing is running."), True
        if name == "new":
            if loop.turns.running(key):
                return "A turn is in progress; /stop it first.", False
            archived = loop.sessions.archive(key)
            for hook in loop.session_end_hooks:
                try:
                    await hook(key, ctx.identity)
                except Exception:
                    log.exception("session-end hook failed for %s", key)
            return (
                "Started a fresh conversation." + (f" The old one is kept as {archived}." if archived else "")
            ), True
        return f"unknown command /{name}\n{slash.HELP}", False

    def status(self, key: str) -> str:
        """Two blocks: what belongs to this session, and what is the device's (every session's)."""
        loop = self.loop
        stats = loop.registry.stats
        lines = [f"edgeclaw {__version__}", f"session {key} (this conversation):"]
        if len(loop.agents) > 1:
            try:
                lines.append(
                    f"  agent: {loop.agent_for(InboundMessage(channel_of(key), '', session=key)).id}"
                )
            except UnknownAgent as e:
                lines.append(f"  agent: {e}")
        summary = loop.sessions.summary(key)
        lines.append(
            f"  conversation: {plural(summary.messages, 'message')}, ~{plural(summary.tokens, 'token')}"
            if summary is not None
            else "  conversation: empty"
        )
        mine = stats.sessions.get(key)
        calls = mine.calls if mine is not None else 0
        failed = mine.errors if mine is not None else 0
        lines.append(f"  tool calls: {calls}" + (f" ({failed} failed or refused)" if failed else ""))
        label = loop.turns.label(key)
        lines.append(f"  now: running {label}" if loop.turns.running(key) and label else "  now: idle")
        lines.append("device (all sessions, since start):")
        lines += [f"  {k}: {v}" for k, v in loop.facts.items() if v]
        for source in loop.status_sources:
            lines += [f"  {line}" for line in source()]
        if not loop.chain:
            lines.append("  models: none configured (slash commands only)")
        for provider in loop.chain.providers:
            h = loop.chain.health[provider.name]
            state = "not tried yet" if h.ok is None else ("ok" if h.ok else f"failing: {h.last_error}")
            context = loop.model_info.known(provider.name) if loop.model_info is not None else ""
            if context:
                state += f"; context {context}"
            note = loop.model_info.tools_note(provider.name) if loop.model_info is not None else ""
            if note:
                state += f"; {note}"
            elif getattr(provider, "tools_supported", None) is False:
                state += "; takes no tools (plain chat and slash commands only)"
            lines.append(f"  model {provider.name} ({provider.kind}, {provider.model}): {state}")
        totals = stats.totals()
        lines.append(
            f"  tool calls: {totals['calls']} ({totals['errors']} failed, {totals['refused']} refused)"
        )
        lines.append(f"  sessions with a turn running: {len(loop.turns)}")
        return "\n".join(lines)
