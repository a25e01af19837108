"""POSIX shell text split into simple commands and words, for deciding what each word is.

The deny groups read a command as text (see `command_text.analysis_views`);
some questions need the shell's own reading instead: which word is the
program, which words are its arguments, and whether a custom tool's
`{{.key}}` placeholder stands where one plain word of data does. `parse`
answers with the simple commands of a text (those inside `$(...)`,
backquotes and `<(...)` too, marked `nested`), each a list of words whose
parts are literal text (quotes removed), placeholders (`Slot`) and
expansions whose value is known only when the command runs (`Expansion`:
`$x`, `${...}`, `$(...)`, backquotes).

Covered: single, double and `$'...'` quotes, backslashes and line
continuations, comments, `$(...)`, `$((...))`, backquotes, `${...}`,
redirections (`>`, `2>&1`, `<`, `<<`, `<<-`, `<<<`, `<>`, `>|`, `&>`) and
here-documents, and the operators `;`, `&`, `&&`, `|`, `||`, `|&`, `(`, `)`
and newlines. A placeholder inside quotes, a comment, `${...}`, `$((...))`,
backquotes or a here-document body is reported in `misplaced`: there the
quoting of the value is literal text (`"…'$(…)'…"` expands, a `'` in the
value ends `'…'`), a newline in the value ends a comment, and a body
expands `$(...)`. A text the scanner cannot finish (an open quote) gives
`complete = False`: callers then refuse rather than guess.
"""

from __future__ import annotations

import re
from dataclasses import field

from edgeclaw.records import dataclass

PLACEHOLDER = re.compile(r"\{\{\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

_BLANK = frozenset(" \t")
_OPERATOR = frozenset(";&|()")
_REDIRECT_START = frozenset("<>")
_NAME_CHAR = re.compile(r"[A-Za-z0-9_]")
_SPECIAL_PARAM = frozenset("@*#?$!-0123456789")


@dataclass(frozen=True)
class Slot:
    """A custom tool's `{{.key}}` placeholder."""

    key: str


@dataclass(frozen=True)
class Expansion:
    """A part whose value the shell computes when it runs: `$x`, `${...}`, `$(...)`, backquotes."""

    source: str


Part = str | Slot | Expansion


@dataclass
class Word:
    """One shell word: literal text and the expansions in it."""

    parts: list[Part] = field(default_factory=list)
    quoted: bool = False  # some of it was quoted or escaped

    def add(self, part: Part) -> None:
        if isinstance(part, str) and self.parts and isinstance(self.parts[-1], str):
            self.parts[-1] += part
        elif part != "":
            self.parts.append(part)

    @property
    def literal(self) -> str | None:
        """The word's text when it is all literal (no placeholder, no expansion), else None."""
        if all(isinstance(p, str) for p in self.parts):
            return "".join(self.parts)  # type: ignore[arg-type]
        return None

    @property
    def slots(self) -> list[Slot]:
        return [p for p in self.parts if isinstance(p, Slot)]

    @property
    def leading_slot(self) -> Slot | None:
        """The placeholder the word starts with: its value decides how the word begins (`-`...)."""
        first = self.parts[0] if self.parts else None
        return first if isinstance(first, Slot) else None

    @property
    def has_expansion(self) -> bool:
        return any(isinstance(p, Expansion) for p in self.parts)

    @property
    def prefix(self) -> str:
        """The literal text before the first placeholder or expansion (`--to-command=` ...)."""
        out = []
        for p in self.parts:
            if not isinstance(p, str):
                break
            out.append(p)
        return "".join(out)

    def __str__(self) -> str:
        return "".join(
            p if isinstance(p, str) else (f"{{{{.{p.key}}}}}" if isinstance(p, Slot) else p.source)
            for p in self.parts
        )


@dataclass
class Command:
    """One simple command: its words (redirections taken out), and where its stdin comes from."""

    words: list[Word] = field(default_factory=list)
    redirect_targets: list[Word] = field(default_factory=list)
    stdin_redirected: bool = False  # `< file`, a here-document or here-string
    nested: bool = False  # inside a command or process substitution


@dataclass(frozen=True)
class Misplaced:
    """Something the parser found where it does not belong (a key and where)."""

    key: str
    where: str


@dataclass
class Parsed:
    """A command line parsed: its simple commands, and whether it was complete."""

    commands: list[Command] = field(default_factory=list)
    misplaced: list[Misplaced] = field(default_factory=list)
    complete: bool = True


class _Incomplete(Exception):
    pass


class _Parser:
    def __init__(self, text: str, placeholders: bool) -> None:
        self.s = text
        self.n = len(text)
        self.placeholders = placeholders
        self.out = Parsed()
        # Here-documents whose bodies start at the next newline: (delimiter, strip tabs, expands).
        self.pending_heredocs: list[tuple[str, bool, bool]] = []

    # -- helpers ----------------------------------------------------------
    def _slot_at(self, i: int) -> re.Match[str] | None:
        return PLACEHOLDER.match(self.s, i) if self.placeholders else None

    def _misplaced(self, key: str, where: str) -> None:
        self.out.misplaced.append(Misplaced(key, where))

    # -- command lists ----------------------------------------------------
    def commands(self, i: int, *, closer: str | None, nested: bool) -> int:
        """Parse commands from `i` until `closer` (")" or None = end of text); returns the index after it."""
        cmd = Command(nested=nested)
        word: Word | None = None
        redirect: str | None = None  # the operator whose target word comes next

        def end_word() -> None:
            nonlocal word, redirect
            if word is None:
                return
            if not word.parts and not word.quoted:
                word = None  # only a line continuation: no word at all
                return
            if redirect is not None:
                cmd.redirect_targets.append(word)
                if redirect.startswith("<<") and redirect != "<<<":
                    delimiter = word.literal if word.literal is not None else str(word)
                    self.pending_heredocs.append((delimiter, redirect == "<<-", not word.quoted))
                redirect = None
            else:
                cmd.words.append(word)
            word = None

        def end_command() -> None:
            nonlocal cmd
            end_word()
            if cmd.words or cmd.redirect_targets:
                self.out.commands.append(cmd)
            cmd = Command(nested=nested)

        while i < self.n:
            c = self.s[i]
            slot = self._slot_at(i)
            if slot is not None:
                word = word or Word()
                word.add(Slot(slot.group(1)))
                i = slot.end()
                continue
            if c in _BLANK:
                end_word()
                i += 1
            elif c == "\n":
                end_word()
                end_command()
                i = self._heredoc_bodies(i + 1)
            elif c == "#" and word is None:
                i = self._comment(i)
            elif c == ")" and closer == ")":
                end_command()
                return i + 1
            elif c == "(" and word is None and not cmd.words:
                # A subshell or `((...))`: its commands are commands like any other.
                end_command()
                i = self.commands(i + 1, closer=")", nested=nested)
            elif c in _REDIRECT_START and self.s.startswith("(", i + 1):
                word = word or Word()
                i = self._expansion(i, word, quoted=False)  # process substitution
            elif c in _REDIRECT_START or self.s.startswith("&>", i):
                # `2>` : a word of digits right before the operator is the file descriptor.
                fd = word.literal if word is not None else None
                if word is not None and fd is not None and fd.isdigit():
                    word = None
                else:
                    end_word()
                    fd = None
                op = self._redirect_op(i)
                i += len(op)
                if op.startswith("<") and fd in (None, "0"):
                    cmd.stdin_redirected = True
                if op in ("<&", ">&") and self.s.startswith("-", i):
                    i += 1  # `>&-` closes the descriptor: no target word
                    continue
                redirect = op
                while i < self.n and self.s[i] in _BLANK:
                    i += 1
            elif c in _OPERATOR:
                end_command()
                i += 1
            else:
                word = word or Word()
                i = self._word_part(i, word)
        if closer is not None:
            raise _Incomplete
        end_command()
        return i

    def _redirect_op(self, i: int) -> str:
        for op in ("<<<", "<<-", "&>>", "<<", ">>", "<&", ">&", "<>", ">|", "&>", "<", ">"):
            if self.s.startswith(op, i):
                return op
        return self.s[i]

    def _comment(self, i: int) -> int:
        end = self.s.find("\n", i)
        end = self.n if end < 0 else end
        for m in PLACEHOLDER.finditer(self.s, i, end) if self.placeholders else ():
            self._misplaced(m.group(1), "inside a comment")
        return end

    def _heredoc_bodies(self, i: int) -> int:
        """Skip the bodies of the here-documents opened on the line just ended."""
        while self.pending_heredocs:
            delimiter, strip, expands = self.pending_heredocs.pop(0)
            while True:
                if i >= self.n:
                    return i  # an unterminated body runs to the end, as in sh
                end = self.s.find("\n", i)
                end = self.n if end < 0 else end
                line = self.s[i:end]
                if (line.lstrip("\t") if strip else line) == delimiter:
                    i = end + 1
                    break
                for m in PLACEHOLDER.finditer(line) if self.placeholders else ():
                    self._misplaced(m.group(1), "inside a here-document")
                if expands:
                    self._body_expansions(line)
                i = end + 1
        return i

    def _body_expansions(self, line: str) -> None:
        """`$(...)` and backquotes in an unquoted here-document body run when the shell reads it."""
        inner = _Parser(line, placeholders=False)
        scratch = Word()
        j = 0
        try:
            while j < len(line):
                if line[j] == "\\":
                    j += 2
                elif line[j] in "$`":
                    j = inner._expansion(j, scratch, quoted=True)
                else:
                    j += 1
        except _Incomplete:
            pass  # the shell would fail on it; what was found so far still counts
        self.out.commands.extend(inner.out.commands)

    # -- words --------------------------------------------------------------
    def _word_part(self, i: int, word: Word) -> int:
        s = self.s
        c = s[i]
        if c == "\\":
            if s.startswith("\\\n", i):
                return i + 2  # a line continuation joins the lines
            if i + 1 >= self.n:
                word.add("\\")
                return i + 1
            word.quoted = True
            word.add(s[i + 1])
            return i + 2
        if c == "'":
            end = s.find("'", i + 1)
            if end < 0:
                raise _Incomplete
            body = s[i + 1 : end]
            for m in PLACEHOLDER.finditer(body) if self.placeholders else ():
                self._misplaced(m.group(1), "inside single quotes")
            word.quoted = True
            word.add(body)
            return end + 1
        if c == '"':
            word.quoted = True
            return self._double_quoted(i + 1, word)
        if s.startswith("$'", i):
            return self._ansi_c(i + 2, word)
        if c == "$" or c == "`":
            return self._expansion(i, word, quoted=False)
        word.add(c)
        return i + 1

    def _double_quoted(self, i: int, word: Word) -> int:
        s = self.s
        while i < self.n:
            slot = self._slot_at(i)
            if slot is not None:
                self._misplaced(slot.group(1), "inside double quotes")
                word.add(slot.group(0))
                i = slot.end()
                continue
            c = s[i]
            if c == '"':
                return i + 1
            if c == "\\" and i + 1 < self.n:
                nxt = s[i + 1]
                if nxt == "\n":
                    i += 2
                    continue
                word.add(nxt if nxt in '$`"\\' else "\\" + nxt)
                i += 2
            elif c == "$" or c == "`":
                i = self._expansion(i, word, quoted=True)
            else:
                word.add(c)
                i += 1
        raise _Incomplete

    def _ansi_c(self, i: int, word: Word) -> int:
        s = self.s
        start = i
        while i < self.n:
            if s[i] == "\\":
                i += 2
            elif s[i] == "'":
                body = s[start:i]
                for m in PLACEHOLDER.finditer(body) if self.placeholders else ():
                    self._misplaced(m.group(1), "inside $'...' quotes")
                try:
                    decoded = body.encode("latin-1", "backslashreplace").decode("unicode_escape")
                except (UnicodeDecodeError, ValueError):
                    decoded = body
                word.quoted = True
                word.add(decoded)
                return i + 1
            else:
                i += 1
        raise _Incomplete

    def _expansion(self, i: int, word: Word, *, quoted: bool) -> int:
        """`$...`, `${...}`, `$(...)`, `$((...))`, backquotes, `<(...)`: an Expansion part."""
        s = self.s
        start = i
        if s.startswith("$((", i):
            end = self._balanced(i + 3, "((", "))")
            for m in PLACEHOLDER.finditer(s, i, end) if self.placeholders else ():
                self._misplaced(m.group(1), "inside $((...)) arithmetic")
            i = end
        elif s.startswith("$(", i) or s.startswith("<(", i) or s.startswith(">(", i):
            i = self.commands(i + 2, closer=")", nested=True)
        elif s[i] == "`":
            end = i + 1
            while end < self.n and s[end] != "`":
                end += 2 if s[end] == "\\" else 1
            if end >= self.n:
                raise _Incomplete
            body = s[i + 1 : end]
            for m in PLACEHOLDER.finditer(body) if self.placeholders else ():
                self._misplaced(m.group(1), "inside backquotes")
            inner = _Parser(re.sub(r"\\([$`\\])", r"\1", body), placeholders=False)
            try:
                inner.commands(0, closer=None, nested=True)
            except _Incomplete:
                raise _Incomplete from None
            self.out.commands.extend(inner.out.commands)
            i = end + 1
        elif s.startswith("${", i):
            end = self._balanced(i + 2, "{", "}")
            for m in PLACEHOLDER.finditer(s, i, end) if self.placeholders else ():
                self._misplaced(m.group(1), "inside ${...}")
            i = end
        else:  # $name, $1, $@ ...; a lone `$` is literal
            j = i + 1
            if j < self.n and s[j] in _SPECIAL_PARAM:
                j += 1
            else:
                while j < self.n and _NAME_CHAR.match(s[j]):
                    j += 1
            if j == i + 1:
                word.add("$")
                return j
            i = j
        word.add(Expansion(s[start:i]))
        if quoted:
            word.quoted = True
        return i

    def _balanced(self, i: int, opener: str, closer: str) -> int:
        """The index after the `closer` matching an already-open `opener` (quotes skipped)."""
        depth = 1
        s = self.s
        while i < self.n:
            if s[i] == "\\":
                i += 2
            elif s[i] == "'" and opener == "{":
                end = s.find("'", i + 1)
                if end < 0:
                    raise _Incomplete
                i = end + 1
            elif s.startswith(closer, i):
                depth -= 1
                i += len(closer)
                if depth == 0:
                    return i
            elif s.startswith(opener, i) or (opener == "{" and s.startswith("${", i)):
                depth += 1
                i += len(opener) if s.startswith(opener, i) else 2
            else:
                i += 1
        raise _Incomplete


def parse(text: str, *, placeholders: bool = False) -> Parsed:
    """The simple commands of `text` (see above); with `placeholders`, `{{.key}}` is read as a Slot."""
    parser = _Parser(text, placeholders)
    try:
        parser.commands(0, closer=None, nested=False)
    except _Incomplete:
        parser.out.complete = False
    return parser.out
