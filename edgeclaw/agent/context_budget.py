"""Fit one request into a model's context: system prompt, history, tool definitions and the answer.

A model with a 2048-token context (a 1-3B model on a Pi) cannot take
edgeclaw's ~35 tool definitions (several thousand tokens) with any prompt
at all: the server refuses the request ("context length exceeded") before
the model sees "hello". `fit` shapes the request instead, in this order:

1. Room for the answer: a quarter of the context at least (less when the
   provider's `max_tokens` is less), plus a margin for the chat template's
   own tokens. The answer then gets what the prompt leaves, up to
   `max_tokens` (`Fitted.answer_tokens`, sent as the request's max_tokens).
2. The system prompt: whole unless it alone takes more than half of what
   is left; then shorter parts instead (`prompt.shorter`: the skills list,
   the memory summary and the context files left out whole, the head cut
   after a whole sentence), the same every turn, so it stays cacheable.
3. The newest turn (the message being answered and this turn's tool calls
   and results): always sent; its longest texts are shortened when even it
   does not fit.
4. The tools and the older history: everything when it fits; else every
   tool with compact descriptions (the first sentence of each) beside the
   whole history; else, in this order, the tools the conversation needs
   (`tool_selection.rank`: those the newest turn called, those whose words
   the message being answered uses, the others in use, those that share
   words with what people said; compact, up to half of what is left), the
   older history (whole turns, newest first: the oldest goes first; the
   turn just before the newest is shortened rather than left out), and in
   what still remains more tools, the most relevant a token first. So a
   follow-up question ("and the humidity?") keeps its tools and the turn
   it follows.

Tokens are estimated, not counted: the tokenizer is the server's.
`estimate_tokens` takes 3 characters a token, and a token for each digit,
each punctuation mark between digits and each character beyond ASCII (a
small model's tokenizer splits numbers digit by digit: an answer such as
"20.26.24.24..." is a token a character). Measured with SmolLM2's tokenizer
through llama-server's Qwen2.5 template (a small vocabulary, so more tokens
than most): the system prompt 498 tokens, estimated 534; the sim board's
tool definitions 11,600 compact, estimated 13,300 (each between 1.0 and
1.3 times its count), the template's preamble ~106. The 5 % margin covers
what the estimate misses. Each message and each tool costs a few tokens
more for the template's markers, and the tool block ~110 for the
template's preamble.

`tool_definition_tokens(...)` is what the benchmark calls: the estimated
tokens of the tool definitions one request would carry for a message.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import field, replace
from typing import Any

from edgeclaw.agent import history, prompt, tool_selection
from edgeclaw.agent.messages import Message
from edgeclaw.records import dataclass

CHARS_PER_TOKEN = 3.0
MESSAGE_OVERHEAD = 6  # role markers and separators the chat template adds around each message
TOOL_OVERHEAD = 10  # per definition: the template's wrapping
TOOLS_PREAMBLE = 120  # the template's text introducing the tools ("You may call one or more functions...")
REQUEST_OVERHEAD = 32  # start/end markers, the generation prompt
MARGIN = 0.05  # of the context: the estimate is an estimate
SYSTEM_SHARE = 0.5  # the system prompt may take at most this share of the prompt's room
ANSWER_SHARE = 0.25  # of the context: the answer's room kept before the prompt is fitted
NEEDED_TOOLS_SHARE = 0.5  # of what the system prompt and newest turn leave: the needed tools' most
MIN_TEXT_CHARS = 200  # a text of the newest turn is never cut shorter than this


# Characters a tokenizer gives a token each (or more): digits (SmolLM2's and Qwen's split numbers digit
# by digit), the punctuation between them ("21.50", "20:15"), anything beyond ASCII ("°C"). Measured
# against SmolLM2's tokenizer: a model's answer of numbers, 573 characters, is 561 tokens (estimated
# 563; 191 at 3 characters a token); a sensor read-out 367 (377); the system prompt 498 (534).
_DENSE = re.compile(r"[0-9]|(?<=[0-9])[.,:;/-]|[^\x00-\x7f]")


def estimate_tokens(text: str) -> int:
    """Prose at CHARS_PER_TOKEN; a dense character (see _DENSE) a token each: a model's answer of
    numbers ("20.26.24.24...") or a sensor read-out takes a token a character."""
    dense = len(_DENSE.findall(text))
    return math.ceil((len(text) - dense) / CHARS_PER_TOKEN) + dense


def message_tokens(m: Message) -> int:
    calls = "".join(c.id + c.name + c.arguments for c in m.tool_calls)
    return estimate_tokens(m.content) + estimate_tokens(calls) + MESSAGE_OVERHEAD * (1 + len(m.tool_calls))


def definition_tokens(definition: Mapping[str, Any]) -> int:
    # Measured as chat templates render it (Python's json.dumps spacing, as in Qwen's and Hermes').
    return estimate_tokens(json.dumps(definition, ensure_ascii=False)) + TOOL_OVERHEAD


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
    def margin(self) -> int:
        return int(self.context_tokens * MARGIN) + REQUEST_OVERHEAD

    @property
    def answer_reserve(self) -> int:
        """The answer's room kept whatever the prompt: `answer_tokens`, at most a quarter of the context."""
        return min(self.answer_tokens, int(self.context_tokens * ANSWER_SHARE))

    @property
    def prompt_tokens(self) -> int:
        """Tokens left for the prompt: the context less the answer's reserve and a margin."""
        return max(0, self.context_tokens - self.answer_reserve - self.margin)

    def answer_room(self, prompt_tokens: int) -> int:
        """The max_tokens for a prompt of `prompt_tokens`: what it leaves, up to `answer_tokens`."""
        left = self.context_tokens - self.margin - prompt_tokens
        return max(self.answer_reserve, min(self.answer_tokens, left))


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
    sections_dropped: list[str] = field(default_factory=list)  # of the system prompt ("Skills")
    answer_tokens: int | None = None  # the request's max_tokens (None: the provider's own)

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
        return (
            dropped or self.tools_compacted or bool(self.turns_dropped or self.cut or self.sections_dropped)
        )

    def summary(self) -> str:
        """In words, for the log: what did not go in whole."""
        parts = []
        if len(self.tools) < self.tools_offered:
            parts.append(f"{len(self.tools)} of {self.tools_offered} tools")
        if self.tools_compacted:
            parts.append("tool descriptions shortened")
        if self.turns_dropped:
            parts.append(f"{self.turns_dropped} older turns left out")
        if self.sections_dropped:
            parts.append(f"left out of the system prompt: {', '.join(self.sections_dropped)}")
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
    prompt is its first sentences, no tools go and only the newest turn is sent.

    `query` is what the tools are ranked against; default: what people said in the recent turns
    (`tool_selection.query_text`). The agent loop passes it without the volatile note.
    """
    room = limits.prompt_tokens
    fitted = Fitted(system, list(messages), list(tools), tools_offered=len(tools))

    system_cost = estimate_tokens(system) + MESSAGE_OVERHEAD
    system_room = int(room * SYSTEM_SHARE) - MESSAGE_OVERHEAD
    if system_cost > system_room + MESSAGE_OVERHEAD:
        fitted.system, fitted.sections_dropped = prompt.shorter(system, int(system_room * CHARS_PER_TOKEN))
        if not fitted.system.startswith(system.split(prompt.SECTION)[0]):
            fitted.cut.append("system prompt")
        system_cost = estimate_tokens(fitted.system) + MESSAGE_OVERHEAD
    room -= system_cost

    groups = history.turns(messages)
    newest = groups[-1] if groups else []
    older = groups[:-1]
    newest, newest_cost, cut = _shorten(newest, room)
    fitted.cut += cut
    room -= newest_cost

    older_costs = [sum(message_tokens(m) for m in turn) for turn in older]
    # A subset: (the compact tools, their costs, their indexes best first, those chosen so far)
    ranked: tuple[list[dict[str, Any]], list[int], list[int], list[int]] | None = None
    if definitions_tokens(tools) + sum(older_costs) > room and tools:
        compacted = [tool_selection.compact(d) for d in tools]
        fitted.tools_compacted = True
        fitted.tools = compacted
        costs = [definition_tokens(d) for d in compacted]
        if _block(costs, list(range(len(costs)))) + sum(older_costs) > room:
            if query is None:
                query = tool_selection.query_text(messages)
            order, needed = _needed_tools(compacted, costs, room, messages, query, vocabulary)
            ranked = compacted, costs, order, needed
            fitted.tools = [compacted[i] for i in sorted(needed)]
    room -= definitions_tokens(fitted.tools)

    kept: list[list[Message]] = []
    for turn, cost in zip(reversed(older), reversed(older_costs), strict=True):
        cut = []
        if cost > room and not kept:  # the turn before the newest: shortened rather than left out
            turn, cost, cut = _shorten(turn, room)
        if cost > room:
            break
        fitted.cut += [f"{what} of an earlier turn" for what in cut]
        kept.append(turn)
        room -= cost
    fitted.turns_dropped = len(older) - len(kept)
    fitted.messages = [m for turn in reversed(kept) for m in turn] + newest
    if ranked is not None:  # more tools, by rank, in what the history left
        compacted, costs, order, chosen = ranked
        budget = room + _block(costs, chosen)
        for i in order:
            if i not in chosen and _block(costs, [*chosen, i]) <= budget:
                chosen.append(i)
        fitted.tools = [compacted[i] for i in sorted(chosen)]
    fitted.answer_tokens = limits.answer_room(fitted.estimated_tokens)
    return fitted


CUT_NOTE_TOKENS = 30  # the "[cut to fit ...]" note, with room to spare


def _keep_chars(text: str, tokens: int) -> int:
    """The longest start of `text` (at least MIN_TEXT_CHARS) estimated at most `tokens`: found by
    halving, since a read-out of digits takes a token a character and prose one in three."""
    low, high = MIN_TEXT_CHARS, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if estimate_tokens(text[:middle]) <= tokens:
            low = middle
        else:
            high = middle - 1
    return low


def _shorten(turn: list[Message], room: int) -> tuple[list[Message], int, list[str]]:
    """`turn` with its longest texts shortened until it fits `room` (or none is long any more), its
    cost, and what was shortened ("a tool result"). A model's own answer ends at a whole sentence; a
    tool result or a person's message says it was cut."""
    cut: list[str] = []
    cost = sum(message_tokens(m) for m in turn)
    turn = list(turn)
    uncut = set(range(len(turn)))  # each text is cut once, to what the whole turn must lose
    while cost > room:
        longest = max(uncut, key=lambda i: len(turn[i].content), default=None)
        if longest is None or len(turn[longest].content) <= MIN_TEXT_CHARS:
            break
        uncut.discard(longest)
        m = turn[longest]
        keep = _keep_chars(m.content, estimate_tokens(m.content) - (cost - room) - CUT_NOTE_TOKENS)
        if m.role == "assistant":
            content = prompt.whole_sentences(m.content, keep)
        else:
            content = (
                m.content[:keep]
                + f"\n[cut to fit the model's context: {keep} of {len(m.content)} characters]"
            )
        turn[longest] = replace(m, content=content)
        what = "a tool result" if m.role == "tool" else f"the {m.role} message"
        if what not in cut:
            cut.append(what)
        cost = sum(message_tokens(x) for x in turn)
    return turn, cost, cut


def _block(costs: list[int], chosen: list[int]) -> int:
    """definitions_tokens of the chosen tools, from their costs."""
    return TOOLS_PREAMBLE + sum(costs[i] for i in chosen) if chosen else 0


def _needed_tools(
    compacted: list[dict[str, Any]],
    costs: list[int],
    room: int,
    messages: Sequence[Message],
    query: str,
    vocabulary: Mapping[str, str] | None,
) -> tuple[list[int], list[int]]:
    """(every tool's index in the order the room the history leaves is filled: by tier, the most score
    a token first; the needed ones): the tools in use and those that share words with what people said
    (the message being answered first), as many as NEEDED_TOOLS_SHARE of `room` takes (the best of them
    in any case)."""
    in_use = tool_selection.tools_in_use(messages)
    newest = prompt.without_note(tool_selection.query_text(messages, turns=0))
    current = tool_selection.tools_in_use(messages, turns=0)
    order = tool_selection.rank(compacted, query, in_use, vocabulary, costs, newest, current)
    fill = tool_selection.rank(compacted, query, in_use, vocabulary, costs, newest, current, per_cost=True)
    score = tool_selection.scores(compacted, query, vocabulary)
    names = [tool_selection.definition_parts(d)[0] for d in compacted]
    needed: list[int] = []
    for i in order:
        if names[i] not in in_use and score[i] <= 0:
            break  # rank puts the needed ones first
        # The best one whenever it fits at all: a 1024-token context may hold one tool and no more.
        cap = room if not needed else int(room * NEEDED_TOOLS_SHARE)
        if _block(costs, [*needed, i]) <= cap:
            needed.append(i)
    return fill, needed


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
