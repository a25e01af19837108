"""How an approval question reads, and how an answer is understood: the same on every terminal.

The serial console, `edgeclaw chat` and `edgeclaw tool call` all ask with
these words and accept these answers, so a technician's habit from one never
grants more than meant on another. Each answer word starts with a letter that
grants no more than the word ("always" starts with "a", which is *once*), so
a console reading only the first key can never read more permission into a
word than it carries.
"""

from __future__ import annotations

import math

from edgeclaw.tools.approval import ApprovalRequest, Decision

# One key answers on the console; a typed word (then Enter) answers anywhere.
KEYS = {
    "o": Decision.ALLOW_ONCE,
    "a": Decision.ALLOW_ONCE,
    "y": Decision.ALLOW_ONCE,
    "w": Decision.ALLOW_ALWAYS,
    "d": Decision.DENY,
    "n": Decision.DENY,
}
WORDS = {
    **KEYS,
    "once": Decision.ALLOW_ONCE,
    "allow": Decision.ALLOW_ONCE,
    "allow once": Decision.ALLOW_ONCE,
    "yes": Decision.ALLOW_ONCE,
    "always": Decision.ALLOW_ALWAYS,
    "allow always": Decision.ALLOW_ALWAYS,
    "deny": Decision.DENY,
    "no": Decision.DENY,
}
# Answers that are not answers before the question gives up with a deny.
MAX_TRIES = 3

HINT = "Answer o (allow once), w (allow always) or d (deny)."
DENIED_AFTER_TRIES = f"Denied (no answer after {MAX_TRIES} tries)."
TIMED_OUT = "No answer in time: denied."


def question_rows(request: ApprovalRequest) -> list[str]:
    """The question's head: which tool, then what it will do (indented, one row per summary line)."""
    rows = [f"Approval needed: {request.tool} wants to run:"]
    rows += ["  " + line for line in request.summary.splitlines() or [""]]
    ctx = request.ctx
    if ctx.parent_session:  # a subagent's call: say whose, so nobody approves it as their own
        child = ctx.session_key.removeprefix("subagent:")
        rows.append(f"  (asked by subagent {child} of session {ctx.parent_session})")
    return rows


def prompt(request: ApprovalRequest) -> str:
    """The line the answer is typed on, with the seconds left (whole seconds, rounded up)."""
    return f"allow once / always / deny [o/w/d] ({math.ceil(request.seconds_left)} s)? "


def parse_answer(text: str) -> Decision | None:
    """A typed answer (a key or a word, any case, surrounding blanks ignored); None when it is none."""
    return WORDS.get(" ".join(text.lower().split()))


def decided(decision: Decision) -> str:
    """What the person is told once they have answered."""
    if decision is Decision.ALLOW_ONCE:
        return "Allowed once."
    if decision is Decision.ALLOW_ALWAYS:
        return "Allowed from now on."
    return "Denied."
