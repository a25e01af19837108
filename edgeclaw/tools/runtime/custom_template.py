"""A custom tool's command template: where each `{{.key}}` stands, and what its value may be.

Safe by construction, checked when the definition is loaded (config check,
start-up, and the runtime `define`):

- a placeholder stands where one plain word of data does: not inside
  quotes, a comment, `${...}`, `$((...))`, backquotes or a here-document
  (`shell_syntax`);
- never where the value would choose what runs: the program name, the
  program a wrapper runs (`timeout 5 {{.x}}`, `nice -n 5 {{.x}}`, `env`,
  `xargs`, `sudo`, `find -exec`), the command line of `sh -c`, a script a
  shell or an interpreter runs, an option value such as
  `tar --to-command=` (`command_roles`);
- where a program reads code (a `sed` script, an `awk` program,
  `python3 -c`, `perl -e`) only when the definition lists the parameter in
  `code_args` (or the program runs with `--sandbox`: GNU sed and gawk then
  run no commands and write no files).

At each call (`check_values`): a value that begins with `-`, in a place
where the program reads options (the start of a word, no `--` before it),
is refused unless the parameter is listed in `option_args`, so
`du {{.path}}` never meets `--files0-from=/etc/passwd`.

The deny groups read the template with each value as the one word of data
it is (`deny_reading`): `msg = "hello; rm -rf /"` is a message, not a
command, while `rm -rf {{.path}}` with path `/` is still refused.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from edgeclaw.errors import ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.tools.runtime.command_roles import analyse
from edgeclaw.tools.runtime.command_text import normal_form
from edgeclaw.tools.runtime.shell_syntax import PLACEHOLDER, parse

# What the shell reads specially in an unquoted word; inside the quotes a value gets, each is
# plain text. Folded to `_` for the deny groups' reading, so they see one word of data.
# `=` stays: `of=/dev/sda` means the same to dd quoted or not.
_SHELL_SIGNIFICANT = str.maketrans(dict.fromkeys(" \t\n;&|()<>'\"`$\\{}*?[]#!~", "_"))


class InvalidDefinition(ValueError):
    """A custom tool definition that cannot be used; the message says why."""


@dataclass(frozen=True)
class Occurrence:
    """Where a placeholder sits in a custom tool's command, and the role it has there."""

    key: str
    role: str  # "data" or "code"
    program: str
    why: str
    reads_options: bool  # the value starts a word the program may read as an option


@dataclass(frozen=True)
class Template:
    """A custom tool's command with its placeholders checked."""

    command: str
    occurrences: tuple[Occurrence, ...]
    option_args: frozenset[str]
    code_args: frozenset[str]

    @classmethod
    def load(
        cls, command: str, *, parameters: Iterable[str], option_args: Iterable[str], code_args: Iterable[str]
    ) -> Template:
        """Check the template against the rules above. Raises InvalidDefinition naming the problem."""
        params = set(parameters)
        option_set, code_set = frozenset(option_args), frozenset(code_args)
        for field_name, names in (("option_args", option_set), ("code_args", code_set)):
            unknown = sorted(names - params)
            if unknown:
                raise InvalidDefinition(f"{field_name}: {', '.join(unknown)} not in parameters")
        parsed = parse(command, placeholders=True)
        if not parsed.complete:
            raise InvalidDefinition("command: the shell cannot read it (an unclosed quote or parenthesis)")
        for m in parsed.misplaced:
            raise InvalidDefinition(
                f"command: placeholder {{{{.{m.key}}}}} is {m.where}; write it as a bare word "
                "(the value is shell-quoted for you)"
            )
        found: list[Occurrence] = []
        for cmd in parsed.commands:
            a = analyse(cmd)
            sandboxed = {inv.program for inv in a.invocations if inv.sandboxed}
            for use in a.uses:
                for slot in use.word.slots:
                    role = use.role
                    if role in ("program", "unknown"):
                        what = "is " + use.why if role == "program" else f"stands {use.why}"
                        raise InvalidDefinition(
                            f"command: placeholder {{{{.{slot.key}}}}} {what}: the value would choose "
                            "what runs; name the program in the template"
                        )
                    if role == "code":
                        if use.program in sandboxed:
                            role = "data"  # --sandbox: no commands, no file writes
                        elif slot.key not in code_set:
                            raise InvalidDefinition(
                                f"command: placeholder {{{{.{slot.key}}}}} is {use.why}, program code "
                                f"that {use.program} runs (it may run commands: sed's e, awk's system()); "
                                f'list it in code_args = ["{slot.key}"] if the caller may write code'
                            )
                    reads_options = use.word.leading_slot is slot and not use.options_end
                    found.append(Occurrence(slot.key, role, use.program, use.why, reads_options))
        # Redirection targets (`> {{.file}}`) and here-strings are file names and data: no options.
        return cls(command, tuple(found), option_set, code_set)

    @property
    def placeholders(self) -> list[str]:
        return list(dict.fromkeys(PLACEHOLDER.findall(self.command)))

    def render(self, args: Mapping[str, Any]) -> str:
        """The command with every `{{.key}}` replaced by the shell-quoted argument (missing = '').

        Each value is put in normal form first (see `command_text.normal_form`), so
        the rendered command is already what `normalise` returns and the quoting
        survives it.
        """
        return PLACEHOLDER.sub(lambda m: shlex.quote(value_text(args.get(m.group(1)))), self.command)

    def check_values(self, args: Mapping[str, Any]) -> None:
        """Refuse a value beginning with `-` where the program would read it as an option."""
        for occ in self.occurrences:
            if not occ.reads_options or occ.key in self.option_args or occ.role == "code":
                continue
            value = value_text(args.get(occ.key))
            if value.startswith("-"):
                raise ToolRefused(
                    f"refused argument {occ.key!r}: it begins with '-', so {occ.program} would read it as "
                    "an option; this tool does not accept options there (the definition's option_args)"
                )

    def deny_reading(self, args: Mapping[str, Any]) -> str:
        """The text the deny groups check: data values as one word each, code values as written."""
        code = {o.key for o in self.occurrences if o.role == "code"}

        def one(m: Any) -> str:
            value = value_text(args.get(m.group(1)))
            if m.group(1) in code:
                return value
            return value.translate(_SHELL_SIGNIFICANT) or "''"

        return PLACEHOLDER.sub(one, self.command)


def value_text(value: Any) -> str:
    """An argument as the text it becomes in the command, in normal form."""
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, int | float):
        text = repr(value)
    else:
        import json

        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return normal_form(text)
