"""Regular-expression matching that a pathological pattern cannot turn into a frozen daemon.

`re` holds the interpreter lock for the whole of one match, so `(a|aa)+$` over a long line, run in a
worker thread, still stops the event loop, every channel and the watchdog; and nothing can interrupt
it. Two engines keep a search bounded by its deadline:

* `regex` (a compiled package, the default wherever PyPI has a wheel for it): matching releases the
  interpreter lock (`concurrent=True`) and honours a timeout.
* `re` in a child interpreter, where `regex` is not installed (32-bit ARM: PyPI has no wheel, and a Pi
  Zero has no compiler): the subjects go to the child in batches and the answer is awaited with the
  time left; a child that runs over is killed, so neither the lock nor the time is ever held past the
  deadline.

Both speak the syntax of `re` (the `regex` module's version-0 behaviour is compatible with it).
"""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from types import ModuleType
from typing import Any

WORKER_SCRIPT = Path(__file__).with_name("pattern_worker.py")


class PatternError(ValueError):
    """The pattern does not compile; the message is the engine's reason."""


class MatchTimeout(Exception):
    """Matching ran past the deadline."""


class MatchEngineFailed(RuntimeError):
    """The child interpreter that matches with `re` could not be started or stopped answering."""


def _regex_module() -> ModuleType | None:
    try:
        import regex  # only searches that match patterns pay for it
    except ImportError:
        return None
    return regex


def engine_name() -> str:
    """The engine this interpreter uses: "regex" or "re-worker"."""
    return "regex" if _regex_module() is not None else "re-worker"


class Deadline:
    """A point in time by which all of one search's matching must be done."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; raises MatchTimeout when none are."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise MatchTimeout
        return left


class Pattern:
    """One compiled pattern, bound to the `Matcher` that runs it."""

    def __init__(self, matcher: Matcher, key: int, pattern: str, compiled: Any) -> None:
        self._matcher = matcher
        self._key = key
        self.pattern = pattern
        self._compiled = compiled

    def select(self, subjects: Sequence[str], deadline: Deadline, *, full: bool = False) -> list[int]:
        """Indexes of the subjects the pattern finds something in (or matches whole, with `full`)."""
        return self._matcher._select(self, subjects, deadline, full)

    def matches(self, subject: str, deadline: Deadline, *, full: bool = False) -> bool:
        return bool(self.select([subject], deadline, full=full))


class Matcher:
    """Compiles and runs the patterns of one search; `close()` (or `with`) ends any child it started."""

    def __init__(self) -> None:
        self._regex = _regex_module()
        self._patterns: list[tuple[str, int]] = []
        self._child: _Child | None = None

    def __enter__(self) -> Matcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child = None

    def compile(self, pattern: str, *, ignore_case: bool = False) -> Pattern:
        flags = re.IGNORECASE if ignore_case else 0
        if self._regex is not None:
            try:
                compiled = self._regex.compile(pattern, flags)
            except self._regex.error as exc:
                raise PatternError(str(exc)) from None
        else:
            # Compiled here as well so a bad pattern is refused before any child starts; the child
            # compiles its own copy.
            try:
                compiled = re.compile(pattern, flags)
            except (re.error, OverflowError, RecursionError) as exc:
                raise PatternError(str(exc)) from None
        self._patterns.append((pattern, flags))
        return Pattern(self, len(self._patterns) - 1, pattern, compiled)

    def _select(self, pattern: Pattern, subjects: Sequence[str], deadline: Deadline, full: bool) -> list[int]:
        if not subjects:
            return []
        if self._regex is not None:
            method = pattern._compiled.fullmatch if full else pattern._compiled.search
            hits = []
            for index, subject in enumerate(subjects):
                try:
                    if method(subject, timeout=deadline.left(), concurrent=True) is not None:
                        hits.append(index)
                except TimeoutError:
                    raise MatchTimeout from None
            return hits
        if self._child is None:
            self._child = _Child(self._patterns)
        try:
            return self._child.select(pattern._key, list(subjects), full, deadline)
        except MatchTimeout:
            # The child may be deep inside a match that never ends: it goes, and a later call starts
            # a fresh one.
            self.close()
            raise


class _Child:
    """A child interpreter running `pattern_worker.py`: JSON lines in, JSON lines out."""

    def __init__(self, patterns: list[tuple[str, int]]) -> None:
        # -I: nothing from the environment or the user's site directory; -S: no site import (the
        # worker needs only the standard library), so it starts quickly even on a slow board.
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(WORKER_SCRIPT)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except OSError as exc:
            raise MatchEngineFailed(f"the pattern-matching child process could not start: {exc}") from None
        assert self._proc.stdin is not None and self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._proc.stdout, selectors.EVENT_READ)
        self._buffer = b""
        self._patterns = patterns
        self._sent = 0  # patterns compiled in the child so far (keys are indexes into `patterns`)

    def select(self, key: int, subjects: list[str], full: bool, deadline: Deadline) -> list[int]:
        while self._sent <= key:
            source, flags = self._patterns[self._sent]
            self._ask({"op": "compile", "pattern": source, "flags": flags}, deadline)
            self._sent += 1
        reply = self._ask({"op": "select", "key": key, "full": full, "subjects": subjects}, deadline)
        return [int(i) for i in reply["hits"]]

    def _ask(self, request: dict[str, Any], deadline: Deadline) -> dict[str, Any]:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(request).encode() + b"\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise MatchEngineFailed(f"the pattern-matching child process stopped: {exc}") from None
        line = self._read_line(deadline)
        reply = json.loads(line)
        if "error" in reply:
            raise PatternError(reply["error"])
        return reply

    def _read_line(self, deadline: Deadline) -> bytes:
        assert self._proc.stdout is not None
        while b"\n" not in self._buffer:
            if not self._selector.select(timeout=deadline.left()):
                deadline.left()  # raises MatchTimeout once the time is gone
                continue
            chunk = self._proc.stdout.read(65536)
            if chunk == b"":
                raise MatchEngineFailed(
                    f"the pattern-matching child process exited with status {self._proc.wait()}"
                )
            if chunk is not None:
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def kill(self) -> None:
        self._selector.close()
        self._proc.kill()
        self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                with suppress(OSError):  # a pipe the killed child left full: nothing more to say
                    stream.close()
