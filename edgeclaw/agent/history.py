"""A session's history as the model sees it: decoded, repaired and trimmed to a budget.

Trimming works on whole turns (a user message and everything up to the next
one), so a tool call is never separated from its result, and what reaches
the provider always starts with a user message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from edgeclaw.agent.messages import Message

log = logging.getLogger("edgeclaw.agent")

INTERRUPTED = "error: this call was interrupted before it returned a result"


def decode(rows: Sequence[tuple[int, str]]) -> list[tuple[int, Message]]:
    out: list[tuple[int, Message]] = []
    for row_id, body in rows:
        try:
            out.append((row_id, Message.from_json(body)))
        except (ValueError, KeyError, TypeError):
            log.warning("skipping an unreadable stored message (row %d)", row_id)
    return out


def repair(messages: list[Message]) -> list[Message]:
    """Give every tool call a result (a daemon stopped mid-call leaves some without) and drop strays."""
    out: list[Message] = []
    pending: dict[str, str] = {}

    def close_pending() -> None:
        for call_id, name in pending.items():
            out.append(Message("tool", INTERRUPTED, tool_call_id=call_id, name=name, is_error=True))
        pending.clear()

    for m in messages:
        if m.role == "tool":
            if m.tool_call_id in pending:
                pending.pop(m.tool_call_id)
                out.append(m)
            continue  # a result without its call would be refused by every provider
        close_pending()
        out.append(m)
        if m.role == "assistant":
            pending.update({c.id: c.name for c in m.tool_calls})
    close_pending()
    return out


def turns(messages: Sequence[Message]) -> list[list[Message]]:
    groups: list[list[Message]] = []
    for m in messages:
        if m.role == "user" or not groups:
            groups.append([])
        groups[-1].append(m)
    return groups


def trim(messages: Sequence[Message], budget_tokens: int) -> list[Message]:
    """The newest whole turns that fit the budget; the newest turn is kept even when it alone is over."""
    kept: list[list[Message]] = []
    used = 0
    for turn in reversed(turns(messages)):
        cost = sum(m.estimated_tokens() for m in turn)
        if kept and used + cost > budget_tokens:
            break
        kept.append(turn)
        used += cost
    window = [m for turn in reversed(kept) for m in turn]
    # Providers expect the conversation to open with the user.
    while window and window[0].role != "user":
        window.pop(0)
    return window
