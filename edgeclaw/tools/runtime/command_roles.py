"""What each word of a simple command is to the programs it runs: the program, code, or data.

`analyse` walks a command's words (from `shell_syntax.parse`) the way the
programs read them: leading assignments and reserved words, the program,
its options, and on through programs that run other programs (`env`,
`timeout 5`, `nice -n 5`, `xargs`, `flock FILE`, `busybox`, `find -exec`
...), so `nice -n 5 {{.x}}` is seen to make `{{.x}}` the program. Each word
gets a `Use`:

- `program`: it chooses what runs (the program name, a script a shell or
  an interpreter runs, the string of `sh -c`, the value of an option such
  as `tar --to-command=`, or a module of `python3 -m`);
- `code`: program text in another language (a `sed` script, an `awk`
  program, `python3 -c`, `perl -e`): it runs inside that program, which
  may itself run commands (`sed`'s `e`, awk's `system()`);
- `unknown`: edgeclaw cannot tell (an option of a wrapper or interpreter
  it does not know: that option might take the next word as its value);
- `data`: an operand or an option's value; `options_end` says a `--` came
  before it, so the program reads it as an operand however it starts.

Each `Invocation` also says whether the program would run what it reads on
its standard input (`stdin_code`): a shell or an interpreter without a
script (or with `-s`, `-i`, `-`), `xargs`, `sed` and `awk` programs that can
execute (`e`, `system()`, pipes) ... used to refuse such a background
process (see `process`), whose stdin no command check sees.

The tables cover the programs a small Linux board has; a program not in
them is an ordinary one whose words are data, except that its options that
run a program (`program_specs.PROGRAM_OPTIONS`) are still recognised.
"""

from __future__ import annotations

import re
from dataclasses import field

from edgeclaw.records import dataclass
from edgeclaw.tools.runtime.program_specs import (
    AWK,
    AWK_PROGRAM_OPTIONS,
    AWK_SPEC,
    CODE_OPERANDS,
    FIND,
    FIND_EXEC,
    INTERPRETERS,
    OPAQUE,
    PROGRAM_OPTIONS,
    PYTHON,
    PYTHON_SPEC,
    REPLS,
    RUN_STDIN,
    SED,
    SED_PROGRAM_OPTIONS,
    SED_SPEC,
    SHELL_SPEC,
    SHELLS,
    WRAPPERS,
    Role,
    Spec,
    awk_may_execute,
    option_matches,
    sed_may_execute,
)
from edgeclaw.tools.runtime.shell_syntax import Command, Word, parse

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=", re.S)
# Words that start a command without being one; the next word is the program.
_RESERVED_PREFIX = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"})
# Words after which the rest of the command is data (`for x in ...`) or nothing runs.
_RESERVED_DATA = frozenset({"for", "case", "select", "in", "fi", "done", "esac", "}", "function"})


@dataclass(frozen=True)
class Use:
    """One word of a command and the role the program gives it (data, code, a path ...)."""

    word: Word
    role: Role
    program: str  # the program the word is given to (for the program word: the one that runs it, or "")
    why: str  # for messages: "the program name", "the command line sh -c runs", "a sed script" ...
    options_end: bool = False


@dataclass
class Invocation:
    """One program a command line runs, and through which other program."""

    program: str  # basename of the program word ("" when it is not literal)
    word: Word
    via: str = ""  # the program that runs this one (`timeout`), "" at the start of the command
    stdin_code: str = ""  # why it would run what it reads on stdin; "" = it does not
    sandboxed: bool = False  # `sed --sandbox` / `gawk --sandbox`: no commands, no file writes


@dataclass
class Analysis:
    """What a command line does with each of its words."""

    uses: list[Use] = field(default_factory=list)
    invocations: list[Invocation] = field(default_factory=list)


# -- the walk ----------------------------------------------------------------------------------


class _Walk:
    def __init__(self, analysis: Analysis) -> None:
        self.a = analysis

    def use(self, word: Word, role: Role, program: str, why: str, options_end: bool = False) -> None:
        self.a.uses.append(Use(word, role, program, why, options_end))

    def rest(
        self, words: list[Word], i: int, role: Role, program: str, why: str, options_end: bool = False
    ) -> None:
        for w in words[i:]:
            self.use(w, role, program, why, options_end)

    # A command, from its first word (after `via`, the program that runs it).
    def command(self, words: list[Word], i: int, via: str = "") -> None:
        while i < len(words):
            lit = words[i].literal
            if lit in _RESERVED_PREFIX and not via:
                self.use(words[i], "syntax", "", "a reserved word")
                i += 1
            elif _is_assignment(words[i]):
                self.use(words[i], "data", via, "a variable assignment")
                i += 1
            else:
                break
        if i >= len(words):
            return
        word = words[i]
        where = f"the program {via} runs" if via else "the program name"
        if word.literal is None:
            # A placeholder or an expansion chooses the program: nothing after it can be judged.
            self.use(word, "program", via, where)
            inv = Invocation("", word, via, stdin_code="its program is chosen when it runs")
            self.a.invocations.append(inv)
            self.rest(words, i + 1, "unknown", "", f"an argument of a program chosen by {word}")
            return
        name = word.literal.rsplit("/", 1)[-1]
        self.use(word, "program", via, where)
        inv = Invocation(name, word, via)
        self.a.invocations.append(inv)
        if name in _RESERVED_DATA and not via:
            self.rest(words, i + 1, "data", name, f"a word of {name}")
        elif name in WRAPPERS:
            self.wrapper(words, i + 1, inv)
        elif name in OPAQUE:
            inv.stdin_code = RUN_STDIN.get(name, "")
            self.rest(words, i + 1, "unknown", name, f"an argument of {name}, which runs commands")
        elif name in SHELLS:
            self.shell(words, i + 1, inv)
        elif PYTHON.fullmatch(name):
            self.interpreter(words, i + 1, inv, PYTHON_SPEC, frozenset({"-c", "-m"}), "-i")
        elif name in INTERPRETERS:
            spec, programs, interactive = INTERPRETERS[name]
            self.interpreter(words, i + 1, inv, spec, programs, interactive)
        elif name in AWK or name in SED:
            self.script_filter(words, i + 1, inv)
        elif name in CODE_OPERANDS:
            inv.stdin_code = RUN_STDIN.get(name, "")
            self.rest(words, i + 1, "code", name, f"a {name} program")
        elif name in FIND:
            self.find(words, i + 1, inv)
        else:
            if name in REPLS and not [w for w in words[i + 1 :] if not (w.literal or "-").startswith("-")]:
                inv.stdin_code = f"{name} without a script reads commands from its input"
            inv.stdin_code = inv.stdin_code or RUN_STDIN.get(name, "")
            self.plain(words, i + 1, inv)

    def plain(self, words: list[Word], i: int, inv: Invocation) -> None:
        """An ordinary program: its words are data, except the values of options that run a program."""
        options = PROGRAM_OPTIONS.get(inv.program, ())
        options_end = False
        expect_program = ""
        for w in words[i:]:
            lit = w.literal if w.literal is not None else w.prefix
            if expect_program:
                self.use(w, "program", inv.program, f"the value of {inv.program} {expect_program}")
                expect_program = ""
                continue
            if not options_end and lit == "--" and w.literal == "--":
                options_end = True
                self.use(w, "data", inv.program, "the end of the options")
                continue
            hit = "" if options_end else next((o for o in options if lit and option_matches(lit, o)), "")
            if hit:
                attached = (
                    "=" in lit if hit.startswith("--") else not lit.endswith(hit[1]) or w.literal is None
                )
                if attached:
                    # The value is in this word: it chooses the program when a placeholder is in it.
                    role: Role = "program" if w.literal is None else "data"
                    self.use(w, role, inv.program, f"the value of {inv.program} {hit}")
                else:
                    self.use(w, "data", inv.program, f"an option of {inv.program}")
                    expect_program = hit
                continue
            self.use(w, "data", inv.program, f"an argument of {inv.program}", options_end)

    def options(
        self, words: list[Word], i: int, spec: Spec, program: str
    ) -> tuple[int, list[tuple[str, Word | None]], bool]:
        """Read options from `i`: (index of the first operand, [(option, value word)], clean).

        `clean` is False when an option was not understood: the rest is then `unknown`. A word that
        starts with a placeholder is taken as the first operand (whether its value may begin with `-`
        is the caller's rule); a placeholder inside an option word is that option's value, unless the
        option letters themselves would come from it.
        """
        seen: list[tuple[str, Word | None]] = []
        while i < len(words):
            w = words[i]
            has_slot = w.literal is None
            lit = w.prefix if has_slot else (w.literal or "")
            if lit == "--" and not has_slot:
                self.use(w, "data", program, "the end of the options")
                return i + 1, seen, True
            is_option = lit.startswith("-") or (spec.plus_options and lit.startswith("+"))
            if not is_option or (lit == "-" and not has_slot) or len(lit) < 2:
                if has_slot and lit in ("-", "+"):
                    self.use(w, "unknown", program, f"an option of {program} chosen by the value")
                    return i + 1, seen, False
                return i, seen, True
            if spec.numeric and re.fullmatch(r"-\d+", lit) and not has_slot:
                self.use(w, "data", program, f"an option of {program}")
                i += 1
                continue
            if lit.startswith("--"):
                name, eq, _ = lit[2:].partition("=")
                if has_slot and not eq:
                    self.use(w, "unknown", program, f"an option of {program} chosen by the value")
                    return i + 1, seen, False
                full = _long_option(name, spec)
                if full is None:
                    if spec.strict:
                        self.use(w, "unknown", program, f"an option of {program} edgeclaw does not know")
                        return i + 1, seen, False
                    self.use(w, "data", program, f"an option of {program}")
                    i += 1
                    continue
                option = "--" + full
                if full in spec.long_arg and not eq:
                    self.use(w, "data", program, f"an option of {program}")
                    value = words[i + 1] if i + 1 < len(words) else None
                    if value is not None:
                        self.use(value, spec.role_of(option), program, _value_why(program, option, spec))
                    seen.append((option, value))
                    i += 2
                    continue
                role: Role = spec.role_of(option) if eq and full in spec.long_arg else "data"
                self.use(
                    w, role, program, _value_why(program, option, spec) if eq else f"an option of {program}"
                )
                seen.append((option, w))
                i += 1
                continue
            # A bundle of short options: `-abc`, `-n5`, `+o`.
            consumed_next = False
            role = "data"
            why = f"an option of {program}"
            j = 1
            while j < len(lit):
                ch = lit[j]
                option = "-" + ch
                if ch in spec.short_arg:
                    if j + 1 < len(lit) or has_slot:
                        seen.append((option, w))  # the value is attached
                        role, why = spec.role_of(option), _value_why(program, option, spec)
                    elif i + 1 < len(words):
                        value = words[i + 1]
                        self.use(w, "data", program, why)
                        self.use(value, spec.role_of(option), program, _value_why(program, option, spec))
                        seen.append((option, value))
                        consumed_next = True
                    else:
                        seen.append((option, None))
                    break
                if ch in spec.short_opt:
                    seen.append((option, w if j + 1 < len(lit) or has_slot else None))
                    break
                if ch in spec.short_flag or (not spec.strict and ch.isalpha()):
                    seen.append((option, None))
                    j += 1
                    continue
                if spec.strict:
                    self.use(w, "unknown", program, f"an option of {program} edgeclaw does not know")
                    return i + 1, seen, False
                j += 1
            else:
                if has_slot:
                    # `-{{.x}}`: the value would supply option letters.
                    self.use(w, "unknown", program, f"an option of {program} chosen by the value")
                    return i + 1, seen, False
            if not consumed_next:
                self.use(w, role, program, why)
            i += 2 if consumed_next else 1
            if seen and len(seen[-1][0]) == 2 and seen[-1][0][1] in spec.stops:
                return i, seen, True  # `python3 -c CODE ...`: what follows are the program's arguments
        return i, seen, True

    def wrapper(self, words: list[Word], i: int, inv: Invocation) -> None:
        name = inv.program
        spec = WRAPPERS[name]
        i, seen, clean = self.options(words, i, spec, name)
        if not clean:
            self.rest(words, i, "unknown", name, f"a word after an option of {name} edgeclaw does not know")
            return
        if any(spec.role_of(o) == "program" for o, _ in seen):
            # `env -S`, `flock -c`: the option's value is the command line; the rest is data for it.
            self.rest(words, i, "data", name, f"an argument of {name}")
            inv.stdin_code = ""
            return
        if name == "env":
            while i < len(words) and _is_assignment(words[i]):
                self.use(words[i], "data", name, "a variable assignment")
                i += 1
        for _ in range(spec.positional):
            if i < len(words):
                self.use(words[i], "data", name, f"an argument of {name}")
                i += 1
        if name == "flock" and i < len(words) and words[i].literal in ("-c", "--command"):
            # `flock FILE -c COMMAND`: the command line is run by a shell.
            self.use(words[i], "data", name, f"an option of {name}")
            self.rest(words, i + 1, "program", name, "the command line flock -c runs")
            return
        if name == "xargs":
            inv.stdin_code = RUN_STDIN["xargs"]
        if i < len(words):
            self.command(words, i, via=name)
        elif name in ("busybox",):
            return

    def shell(self, words: list[Word], i: int, inv: Invocation) -> None:
        name = inv.program
        i, seen, clean = self.options(words, i, SHELL_SPEC, name)
        flags = {o for o, _ in seen}
        if not clean:
            self.rest(words, i, "unknown", name, f"a word after an option of {name}")
            inv.stdin_code = f"{name} may read commands from its input"
            return
        if "-c" in flags:
            if i < len(words):
                self.use(words[i], "program", name, f"the command line {name} -c runs")
                self.rest(words, i + 1, "data", name, f"a positional parameter of {name} -c")
            return
        if "-i" in flags:
            inv.stdin_code = f"{name} -i is an interactive shell"
        if "-s" in flags or i >= len(words):
            inv.stdin_code = inv.stdin_code or f"{name} without a script reads commands from its input"
            self.rest(words, i, "data", name, f"a positional parameter of {name}")
            return
        script = words[i]
        self.use(script, "program", name, f"the script {name} runs")
        if script.literal in ("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"):
            inv.stdin_code = f"{name} {script.literal} reads commands from its input"
        self.rest(words, i + 1, "data", name, f"an argument of the script {name} runs")

    def interpreter(
        self,
        words: list[Word],
        i: int,
        inv: Invocation,
        spec: Spec,
        programs: frozenset[str],
        interactive: str,
    ) -> None:
        name = inv.program
        i, seen, clean = self.options(words, i, spec, name)
        flags = {o for o, _ in seen}
        if not clean:
            self.rest(words, i, "unknown", name, f"a word after an option of {name} edgeclaw does not know")
            inv.stdin_code = f"{name} may read a program from its input"
            return
        if interactive and interactive in flags:
            inv.stdin_code = f"{name} {interactive} is interactive"
        if flags & programs:
            self.rest(words, i, "data", name, f"an argument of {name}")
            return
        if i >= len(words):
            inv.stdin_code = inv.stdin_code or f"{name} without a script reads a program from its input"
            return
        script = words[i]
        self.use(script, "program", name, f"the script {name} runs")
        if script.literal in ("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"):
            inv.stdin_code = f"{name} - reads a program from its input"
        self.rest(words, i + 1, "data", name, f"an argument of the script {name} runs")

    def script_filter(self, words: list[Word], i: int, inv: Invocation) -> None:
        """sed and awk: the script is code (options -e/-f, or the first operand); the rest are files."""
        name = inv.program
        is_sed = name in SED
        spec = SED_SPEC if is_sed else AWK_SPEC
        kind = "a sed script" if is_sed else "an awk program"
        i, seen, clean = self.options(words, i, spec, name)
        if not clean:
            self.rest(words, i, "unknown", name, f"a word after an option of {name} edgeclaw does not know")
            inv.stdin_code = f"{name} with an option edgeclaw does not know"
            return
        flags = {o for o, _ in seen}
        inv.sandboxed = "--sandbox" in flags or (not is_sed and "-S" in flags and name == "gawk")
        program_options = SED_PROGRAM_OPTIONS if is_sed else AWK_PROGRAM_OPTIONS
        scripts = [v for o, v in seen if o in program_options]
        if not scripts and i < len(words):
            self.use(words[i], "code", name, kind)
            scripts = [words[i]]
            i += 1
        files = words[i:]
        options_end = _after_double_dash(words, i)
        for w in files:
            if w.literal == "--" and not options_end:
                options_end = True
                self.use(w, "data", name, "the end of the options")
                continue
            self.use(w, "data", name, f"an input file of {name}", options_end)
        reads_stdin = not files or any(w.literal in ("-", "/dev/stdin") for w in files)
        if reads_stdin and not inv.sandboxed:
            file_scripts = any(o in ("-f", "--file", "-E", "--exec") for o, _ in seen)
            texts = [w.literal for w in scripts]
            if (
                file_scripts
                or any(t is None for t in texts)
                or any((sed_may_execute(t) if is_sed else awk_may_execute(t)) for t in texts if t is not None)
            ):
                what = "its e command" if is_sed else "system() or a pipe"
                inv.stdin_code = (
                    f"{name} reading its input could run it ({what}); use --sandbox"
                    + (" (gawk)" if not is_sed else "")
                    + " or give it a file"
                )

    def find(self, words: list[Word], i: int, inv: Invocation) -> None:
        while i < len(words):
            w = words[i]
            if w.literal in FIND_EXEC:
                self.use(w, "data", "find", f"the action {w.literal}")
                end = i + 1
                while end < len(words) and words[end].literal not in (";", "+"):
                    end += 1
                self.command(words[i + 1 : end], 0, via=f"find {w.literal}")
                if end < len(words):
                    self.use(words[end], "data", "find", "the end of an -exec")
                i = end + 1
                continue
            self.use(w, "data", "find", "an argument of find")
            i += 1


def _after_double_dash(words: list[Word], i: int) -> bool:
    """Whether the options ended with a `--` right before word `i`."""
    return i > 0 and words[i - 1].literal == "--"


def _value_why(program: str, option: str, spec: Spec) -> str:
    role = spec.role_of(option)
    if role == "program":
        return f"the program or command line of {program} {option}"
    if role == "code":
        return f"the {program} code of {option}"
    return f"the value of {program} {option}"


def _long_option(name: str, spec: Spec) -> str | None:
    """The long option `name` abbreviates (getopt accepts any unambiguous prefix), or None."""
    known = spec.long_arg + spec.long_flag
    if name in known:
        return name
    matches = [o for o in known if o.startswith(name)] if name else []
    return matches[0] if len(matches) == 1 else None


def _is_assignment(word: Word) -> bool:
    first = word.parts[0] if word.parts else None
    return isinstance(first, str) and bool(_ASSIGNMENT.match(first))


# -- the questions callers ask -----------------------------------------------------------------


def analyse(command: Command) -> Analysis:
    analysis = Analysis()
    _Walk(analysis).command(command.words, 0)
    return analysis


def stdin_runner(text: str) -> str:
    """Why some program in `text` would run what arrives on its standard input, or "" when none would.

    Every simple command counts unless its stdin is redirected from a file or
    a here-document (data written to the first command of a pipeline flows
    down the pipe). Text that cannot be parsed counts as running its input.
    """
    parsed = parse(text)
    if not parsed.complete:
        return "edgeclaw cannot parse the command"
    for command in parsed.commands:
        if command.stdin_redirected:
            continue
        for inv in analyse(command).invocations:
            if inv.stdin_code:
                return inv.stdin_code
    return ""
