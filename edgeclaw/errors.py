"""The exception families, one per layer.

Backends raise `BackendError`; tools raise `ToolError` (the call ran and
failed) or `ToolRefused` (the call was stopped before it could touch
anything). The registry turns all of them into tool results, so no exception
from a tool ever reaches a channel.
"""

from __future__ import annotations


class EdgeclawError(Exception):
    """Base of every error edgeclaw raises on purpose."""


class ConfigError(EdgeclawError):
    """A configuration (or profile) file is wrong. Names file, key and what was expected."""

    def __init__(self, source: str, key: str, problem: str, line: int | None = None) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        self.line = line  # in the file, where it is known
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"{self.source}: {self.key}" if self.key else self.source
        at = f" (line {self.line})" if self.line is not None else ""
        return f"{where}: {self.problem}{at}"

    def at_line(self, line: int | None) -> ConfigError:
        """The same error, placed on a line of its file."""
        return ConfigError(self.source, self.key, self.problem, line)


class ConfigErrors(EdgeclawError):
    """Several configuration problems found in one pass, so a user fixes them all at once."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


class ToolError(EdgeclawError):
    """The tool ran and failed; the message is shown to the caller (and the model)."""


class ToolRefused(EdgeclawError):
    """The call was refused before the tool body touched anything (bounds, policy, sandbox)."""


class BackendError(EdgeclawError):
    """A hardware, sandbox or store backend failed; the message is meant for people.

    `errno` keeps the operating system's error number when one caused it (None otherwise), so a
    program can act on the value rather than parse the words.
    """

    errno: int | None = None

    def __init__(self, *args: object, errno: int | None = None) -> None:
        super().__init__(*args)
        self.errno = errno
