"""Fit one request into a model's context: system prompt, history, tool definitions and the answer.

A model with a 2048-token context (a 1-3B model on a Pi) cannot take
edgeclaw's ~35 tool definitions (several thousand tokens) with any prompt
at all: the server refuses the request ("context length exceeded") before
the model sees "hello". `fit` shapes the request instead, in this order:

1. Room for the answer: the provider's `max_tokens`, at most half the
   context, plus a margin for the chat template's own tokens.
2. The system prompt: kept whole unless it alone takes more than half of
   what is left, then cut (the same cut every turn, so it stays cacheable).
3. The newest turn (the message being answered and this turn's tool calls
   and results): always sent; its longest texts are shortened when even it
   does not fit.
4. The tool definitions: all of them when they fit beside the history;
   else all with compact descriptions (the first sentence of each); else
   the most relevant ones (`tool_selection.rank`: the tools in use, then
   BM25 against what people said), compact, as many as fit. Tools get at
   least half of what is left when the history competes for it.
5. The older history, whole turns, newest first, in what remains.

Tokens are estimated, not counted: the tokenizer is the server's.
`estimate_tokens` takes 3 characters a token for text and 2.7 for a tool
definition's JSON (as a chat template prints it, with spaces after `:` and
`,`). Measured with SmolLM2's tokenizer (a small vocabulary, so more tokens
than most): English prose runs at 3.3-4.4 characters a token, edgeclaw's
definitions at 2.6-4.4 (the hardware tools' hex patterns are the dense
end); the whole set is ~9,600 tokens, estimated ~11,900. The 5 % margin
covers what the densest definitions take beyond the estimate. Each message
and each tool costs a few tokens more for the template's markers, and the
tool block ~110 for the template's preamble.

`tool_definition_tokens(...)` is what the benchmark calls: the estimated
tokens of the tool definitions one request would carry for a message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from edgeclaw.agent import history, tool_selection
from edgeclaw.agent.messages import Message

CHARS_PER_TOKEN = 3.0
DEFINITION_CHARS_PER_TOKEN = 2.7  # schemas: quotes, braces, hex patterns and numbers split finely
MESSAGE_OVERHEAD = 6  # role markers and separators the chat template adds around each message
TOOL_OVERHEAD = 10  # per definition: the template's wrapping
TOOLS_PREAMBLE = 120  # the template's text introducing the tools ("You may call one or more functions...")
REQUEST_OVERHEAD = 32  # start/end markers, the generation prompt
MARGIN = 0.05  # of the context: the estimate is an estimate
SYSTEM_SHARE = 0.5  # the system prompt may take at most this share of the prompt's room
SYSTEM_CUT = "\n[the rest of the system prompt was left out to fit the model's context]"
MIN_TEXT_CHARS = 200  # a text of the newest turn is never cut shorter than this


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def message_tokens(m: Message) -> int:
    size = len(m.content) + sum(len(c.id) + len(c.name) + len(c.arguments) for c in m.tool_calls)
    return math.ceil(size / CHARS_PER_TOKEN) + MESSAGE_OVERHEAD * (1 + len(m.tool_calls))


def definition_tokens(definition: Mapping[str, Any]) -> int:
    # Measured as chat templates render it (Python's json.dumps spacing, as in Qwen's and Hermes').
    text = json.dumps(definition, ensure_ascii=False)
    return math.ceil(len(text) / DEFINITION_CHARS_PER_TOKEN) + TOOL_OVERHEAD


def definitions_tokens(definitions: Sequence[Mapping[str, Any]]) -> int:
    if not definitions:
        return 0
    return TOOLS_PREAMBLE + sum(definition_tokens(d) for d in definitions)


@dataclass(frozen=True)
class Limits:
    """What one provider's model can take: its context and the room kept for its answer."""

    context_tokens: int
    answer_tokens: int

    @property
    def prompt_tokens(self) -> int:
        """Tokens left for the prompt: the context less the answer's room and a margin."""
        answer = min(self.answer_tokens, self.context_tokens // 2)
        margin = int(self.context_tokens * MARGIN) + REQUEST_OVERHEAD
        return max(0, self.context_tokens - answer - margin)


@dataclass
class Fitted:
    """The request as it will be sent, and what was left out to make it fit."""

    system: str
    messages: list[Message]
    tools: list[dict[str, Any]]
    tools_offered: int = 0  # definitions before fitting
    tools_compacted: bool = False
    turns_dropped: int = 0
    cut: list[str] = field(default_factory=list)  # what was shortened ("system prompt", "a tool result")

    @property
    def estimated_tokens(self) -> int:
        return (
            estimate_tokens(self.system)
            + MESSAGE_OVERHEAD
            + sum(message_tokens(m) for m in self.messages)
            + definitions_tokens(self.tools)
        )

    @property
    def changed(self) -> bool:
        dropped = len(self.tools) < self.tools_offered
        return dropped or self.tools_compacted or bool(self.turns_dropped or self.cut)

    def summary(self) -> str:
        """In words, for the log: what did not go in whole."""
        parts = []
        if len(self.tools) < self.tools_offered:
            parts.append(f"{len(self.tools)} of {self.tools_offered} tools")
        if self.tools_compacted:
            parts.append("tool descriptions shortened")
        if self.turns_dropped:
            parts.append(f"{self.turns_dropped} older turns left out")
        parts += [f"{what} shortened" for what in self.cut]
        return ", ".join(parts) or "everything fits"


def fit(
    limits: Limits,
    system: str,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    vocabulary: Mapping[str, str] | None = None,
    query: str | None = None,
) -> Fitted:
    """The request cut to `limits` (see the module's docstring). Never fails: at worst the system
    prompt is cut, no tools go and only the newest turn is sent.

    `query` is what the tools are ranked against; default: what people said in the recent turns
    (`tool_selection.query_text`). The agent loop passes it without the volatile note.
    """
    room = limits.prompt_tokens
    fitted = Fitted(system, list(messages), list(tools), tools_offered=len(tools))

    system_cost = estimate_tokens(system) + MESSAGE_OVERHEAD
    if system_cost > room * SYSTEM_SHARE:
        keep = int(room * SYSTEM_SHARE * CHARS_PER_TOKEN) - 80
        fitted.system = system[: max(0, keep)] + SYSTEM_CUT
        fitted.cut.append("system prompt")
        system_cost = estimate_tokens(fitted.system) + MESSAGE_OVERHEAD
    room -= system_cost

    groups = history.turns(messages)
    newest = groups[-1] if groups else []
    older = groups[:-1]
    newest, newest_cost = _fit_newest(newest, room, fitted)
    room -= newest_cost

    older_costs = [sum(message_tokens(m) for m in turn) for turn in older]
    history_cost = sum(older_costs)
    full_cost = definitions_tokens(tools)
    if full_cost + history_cost > room:
        tools_room = room - min(history_cost, room // 2)
        if query is None:
            query = tool_selection.query_text(messages)
        fitted.tools = _fit_tools(list(tools), tools_room, messages, query, vocabulary, fitted)
    room -= definitions_tokens(fitted.tools)

    kept: list[list[Message]] = []
    for turn, cost in zip(reversed(older), reversed(older_costs), strict=True):
        if cost > room:
            break
        kept.append(turn)
        room -= cost
    fitted.turns_dropped = len(older) - len(kept)
    fitted.messages = [m for turn in reversed(kept) for m in turn] + newest
    return fitted


def _fit_newest(turn: list[Message], room: int, fitted: Fitted) -> tuple[list[Message], int]:
    """The newest turn, its longest texts shortened until it fits `room` (or none is long any more)."""
    cost = sum(message_tokens(m) for m in turn)
    turn = list(turn)
    uncut = set(range(len(turn)))  # each text is cut once, to what the whole turn must lose
    while cost > room:
        longest = max(uncut, key=lambda i: len(turn[i].content), default=None)
        if longest is None or len(turn[longest].content) <= MIN_TEXT_CHARS:
            break
        uncut.discard(longest)
        m = turn[longest]
        over_chars = int((cost - room) * CHARS_PER_TOKEN) + 100
        keep = max(MIN_TEXT_CHARS, len(m.content) - over_chars)
        note = f"\n[cut to fit the model's context: {keep} of {len(m.content)} characters]"
        turn[longest] = replace(m, content=m.content[:keep] + note)
        what = "a tool result" if m.role == "tool" else f"the {m.role} message"
        if what not in fitted.cut:
            fitted.cut.append(what)
        cost = sum(message_tokens(x) for x in turn)
    return turn, cost


def _fit_tools(
    tools: list[dict[str, Any]],
    room: int,
    messages: Sequence[Message],
    query: str,
    vocabulary: Mapping[str, str] | None,
    fitted: Fitted,
) -> list[dict[str, Any]]:
    """All the tools if they fit in `room`; else all compact; else the best-ranked compact ones that fit,
    in the order they were given (so the same subset is the same bytes)."""
    if definitions_tokens(tools) <= room:
        return tools
    compacted = [tool_selection.compact(d) for d in tools]
    fitted.tools_compacted = True
    if definitions_tokens(compacted) <= room:
        return compacted
    costs = [definition_tokens(d) for d in compacted]
    order = tool_selection.rank(
        tools,
        query,
        tool_selection.tools_in_use(messages),
        vocabulary,
        costs,
    )
    chosen: set[int] = set()
    used = TOOLS_PREAMBLE
    for i in order:
        if used + costs[i] <= room:
            chosen.add(i)
            used += costs[i]
    return [compacted[i] for i in sorted(chosen)]


def tool_definition_tokens(
    message: str,
    definitions: Sequence[dict[str, Any]],
    limits: Limits | None = None,
    system: str = "",
    vocabulary: Mapping[str, str] | None = None,
) -> tuple[int, int]:
    """(estimated tokens of the tool definitions a request for `message` carries, how many tools) when
    the model's limits are `limits` (None: no limit, every definition whole)."""
    if limits is None:
        return definitions_tokens(definitions), len(definitions)
    fitted = fit(limits, system, [Message("user", message)], list(definitions), vocabulary)
    return definitions_tokens(fitted.tools), len(fitted.tools)
