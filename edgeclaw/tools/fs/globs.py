"""Globs as regular expressions, and matching under a deadline for search and glob."""

from __future__ import annotations

import re

from edgeclaw.errors import ToolError
from edgeclaw.tools.fs.pattern_match import (
    Deadline,
    MatchEngineFailed,
    Matcher,
    MatchTimeout,
    Pattern,
    PatternError,
)


def _glob_segment(part: str) -> str:
    """One path segment of a glob as a regex: `*`, `?` and `[...]` never match '/'."""
    out: list[str] = []
    i = 0
    while i < len(part):
        c = part[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := part.find("]", i + 2)) != -1:
            body = part[i + 1 : end]
            negate = body.startswith("!")
            if negate:
                body = body[1:]
            # Escape everything but '-' so ranges work and nothing else is special.
            escaped = "".join("-" if ch == "-" else re.escape(ch) for ch in body)
            out.append(f"[^/{escaped}]" if negate else f"[{escaped}]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


# A pathological pattern ((a+)+$, or .*x over a megabyte line) must not freeze the event loop, every
# channel and the watchdog, nor run forever: matching goes through `pattern_match`, which bounds one
# search by MATCH_BUDGET_S however bad the pattern, with or without the compiled `regex` package.
MATCH_BUDGET_S = 20.0


class MatchDeadline(Deadline):
    def __init__(self, seconds: float | None = None) -> None:
        super().__init__(MATCH_BUDGET_S if seconds is None else seconds)

    def expired(self) -> ToolError:
        return ToolError(
            f"pattern matching took longer than {self.seconds:g} s; use a simpler pattern or a narrower path"
        )


def select_matches(
    pattern: Pattern, subjects: list[str], deadline: MatchDeadline, *, full: bool = False
) -> list[int]:
    try:
        return pattern.select(subjects, deadline, full=full)
    except MatchTimeout:
        raise deadline.expired() from None
    except MatchEngineFailed as exc:
        raise ToolError(f"pattern matching failed: {exc}") from None


def _glob_source(pattern: str) -> str:
    """A '/'-separated glob as a regex, where a `**` segment spans any number of directories."""
    parts = [p for p in pattern.split("/") if p]
    out: list[str] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append(".+" if last else "(?:[^/]+/)*")
        else:
            out.append(_glob_segment(part) + ("" if last else "/"))
    return "".join(out)


def compile_glob(matcher: Matcher, pattern: str) -> Pattern:
    try:
        return matcher.compile(_glob_source(pattern))
    except PatternError as exc:
        raise ToolError(f"invalid glob pattern {pattern!r}: {exc}") from exc


def has_magic(part: str) -> bool:
    return any(c in part for c in "*?[")
