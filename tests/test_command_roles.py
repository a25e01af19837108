"""The shell parser and what each word is to the programs a command runs: the pieces behind custom-tool
template checks and the refusal of background programs that run their stdin."""

from __future__ import annotations

import pytest

from edgeclaw.tools.runtime.command_roles import analyse, stdin_runner
from edgeclaw.tools.runtime.shell_syntax import Expansion, Slot, parse


def words(text: str) -> list[list[str]]:
    return [[str(w) for w in c.words] for c in parse(text).commands]


def test_simple_commands_words_and_redirections() -> None:
    parsed = parse("ls -la | grep 'a b' > out.txt; echo hi && cat <in 2>&1")
    assert [[str(w) for w in c.words] for c in parsed.commands] == [
        ["ls", "-la"],
        ["grep", "a b"],
        ["echo", "hi"],
        ["cat"],
    ]
    assert [str(w) for w in parsed.commands[1].redirect_targets] == ["out.txt"]
    assert parsed.commands[3].stdin_redirected and not parsed.commands[0].stdin_redirected


def test_substitutions_are_commands_too() -> None:
    parsed = parse('echo $(id -u) "x $(whoami)" `date` <(ls)')
    nested = [[str(w) for w in c.words] for c in parsed.commands if c.nested]
    assert nested == [["id", "-u"], ["whoami"], ["date"], ["ls"]]
    outer = next(c for c in parsed.commands if not c.nested)
    assert all(any(isinstance(p, Expansion) for p in w.parts) for w in outer.words[1:])


def test_quotes_escapes_and_continuations() -> None:
    assert words("r'm' \"-rf\" \\/") == [["rm", "-rf", "/"]]
    assert words("echo a\\\nb") == [["echo", "ab"]]
    assert words("echo $'\\x41'") == [["echo", "A"]]
    assert not parse("echo 'open").complete
    assert not parse('echo "open').complete
    assert not parse("echo $(open").complete


def test_here_documents_are_skipped_but_their_substitutions_count() -> None:
    parsed = parse("cat <<EOF\nrm -rf / $(sh)\nEOF\necho after")
    assert [[str(w) for w in c.words] for c in parsed.commands] == [["cat"], ["sh"], ["echo", "after"]]
    quoted = parse("cat <<'EOF'\n$(sh)\nEOF")
    assert [[str(w) for w in c.words] for c in quoted.commands] == [["cat"]]


def test_placeholders_and_where_they_stand() -> None:
    parsed = parse("printf %s {{.a}} x={{.b}} \"{{.c}}\" '{{.d}}' # {{.e}}", placeholders=True)
    first = parsed.commands[0]
    assert first.words[2].parts == [Slot("a")] and first.words[2].leading_slot == Slot("a")
    assert first.words[3].prefix == "x=" and first.words[3].leading_slot is None
    assert [(m.key, m.where) for m in parsed.misplaced] == [
        ("c", "inside double quotes"),
        ("d", "inside single quotes"),
        ("e", "inside a comment"),
    ]
    assert str(parse("echo {{.a}}").commands[0].words[1]) == "{{.a}}"  # not a placeholder here


def roles(template: str) -> dict[str, tuple[str, bool]]:
    """Each placeholder's role, and whether its value could be read as an option."""
    found = {}
    for command in parse(template, placeholders=True).commands:
        for use in analyse(command).uses:
            for slot in use.word.slots:
                found[slot.key] = (use.role, use.word.leading_slot is slot and not use.options_end)
    return found


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("du -s {{.p}}", {"p": ("data", True)}),
        ("du -s -- {{.p}}", {"p": ("data", False)}),
        ("ls --color={{.p}}", {"p": ("data", False)}),
        ("timeout 5 {{.p}}", {"p": ("program", True)}),
        ("timeout {{.t}} ls {{.p}}", {"t": ("data", True), "p": ("data", True)}),
        ("nice -n {{.n}} ls", {"n": ("data", True)}),
        ("env -S {{.p}}", {"p": ("program", True)}),
        ("sh -c 'echo $1' sh {{.p}}", {"p": ("data", True)}),
        ("sed -e {{.s}} -- {{.f}}", {"s": ("code", True), "f": ("data", False)}),
        ("awk -v x={{.v}} {{.p}} f", {"v": ("data", False), "p": ("code", True)}),
        ("python3 -c {{.c}} {{.a}}", {"c": ("code", True), "a": ("data", True)}),
        ("find {{.d}} -name {{.n}} -exec grep -l -- {{.p}} {} +",
         {"d": ("data", True), "n": ("data", True), "p": ("data", False)}),
        ("tar -cf x.tar --use-compress-program {{.p}} .", {"p": ("program", True)}),
        ("timeout --bogus 5 {{.p}}", {"p": ("unknown", True)}),
    ],
)  # fmt: skip
def test_roles_through_wrappers_and_interpreters(template: str, expected: dict) -> None:
    assert roles(template) == expected


@pytest.mark.parametrize(
    "command",
    ["sh", "bash -i", "zsh -s", "sh -", "python3", "python3 -i x.py", "pypy3", "perl", "ruby", "node",
     "lua", "php -a", "env X=1 sh", "exec dash", "timeout 9 bash", "nice -n 1 sh", "stdbuf -oL python3",
     "busybox sh", "xargs rm", "xargs -0 -n1 echo", "dc", "ed notes.txt", "sqlite3", "sed e", "sed 's/x/y/e'",
     "sed -n '1e id'", "awk '{print | \"sh\"}'", "gawk -f prog.awk", "$CMD", "echo 'open", "ls; bash",
     "echo $(sh)"],
)  # fmt: skip
def test_programs_that_run_their_stdin(command: str) -> None:
    assert stdin_runner(command), command


@pytest.mark.parametrize(
    "command",
    ["cat", "sleep 100", "tail -f log.txt", "python3 tool.py", "sh run.sh", "bash -c 'read x; echo $x'",
     "perl -ne print", "node server.js", "sed -u 's/a/b/'", "sed s/e/E/g", "sed --sandbox e",
     "sed 's/a/b/w out.txt'", "awk '{print $1}'", "gawk --sandbox '{system($0)}'", "bash < script.sh",
     "sh <<EOF\necho hi\nEOF", "grep -e pattern", "sort", "sed e notes.txt"],
)  # fmt: skip
def test_programs_that_read_their_stdin_as_data(command: str) -> None:
    assert stdin_runner(command) == "", command
