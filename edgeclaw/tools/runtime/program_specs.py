"""The programs a command may run, as `command_roles` reads them: each one's options (which take a
value, which run a program or take code), shells, interpreters and REPLs, the programs that run what
they read on stdin, and whether a `sed` script or an `awk` program may execute commands.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from edgeclaw.records import dataclass

Role = Literal["program", "code", "unknown", "data", "syntax"]


# -- option specs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """How one program reads its options, and what their values and operands are."""

    short_arg: str = ""  # short options that take a value (attached or the next word)
    short_opt: str = ""  # short options whose value, if any, is attached (`sed -i.bak`)
    short_flag: str = ""  # short options that take none
    long_arg: tuple[str, ...] = ()
    long_flag: tuple[str, ...] = ()  # (`--name=value` on one of these is an optional value)
    value_roles: tuple[tuple[str, Role], ...] = ()  # option ("-c", "--eval") -> the role of its value
    stops: str = ""  # short options after whose value option parsing ends (`python3 -c CODE args`)
    positional: int = 0  # wrapper: operands of its own before the program it runs
    numeric: bool = False  # `nice -5`: a number is an option
    strict: bool = True  # an unknown option makes the rest `unknown`
    plus_options: bool = False  # shells: `+o name`, `+x`

    def role_of(self, option: str) -> Role:
        return dict(self.value_roles).get(option, "data")


WRAPPERS: dict[str, Spec] = {
    "env": Spec(
        short_arg="uCS",
        short_flag="i0v",
        long_arg=("unset", "chdir", "split-string"),
        long_flag=("ignore-environment", "null", "debug", "block-signal", "default-signal", "ignore-signal",
                   "list-signal-handling"),
        value_roles=(("-S", "program"), ("--split-string", "program")),
    ),
    "timeout": Spec(
        short_arg="sk", short_flag="v", long_arg=("signal", "kill-after"),
        long_flag=("foreground", "preserve-status", "verbose"), positional=1,
    ),
    "nice": Spec(short_arg="n", long_arg=("adjustment",), numeric=True),
    "nohup": Spec(),
    "setsid": Spec(short_flag="cfw", long_flag=("ctty", "fork", "wait")),
    "stdbuf": Spec(short_arg="ioe", long_arg=("input", "output", "error")),
    "ionice": Spec(short_arg="cnpPu", short_flag="t", long_arg=("class", "classdata", "pid", "pgid", "uid"),
                    long_flag=("ignore",)),
    "chrt": Spec(
        short_arg="TPD", short_flag="abdfiormRpv",
        long_arg=("sched-runtime", "sched-period", "sched-deadline"),
        long_flag=("all-tasks", "batch", "deadline", "fifo", "idle", "other", "rr", "reset-on-fork", "max",
                   "pid", "verbose"),
        positional=1,
    ),
    "taskset": Spec(short_flag="acp", long_flag=("all-tasks", "cpu-list", "pid"), positional=1),
    "time": Spec(short_arg="fo", short_flag="apqv", long_arg=("format", "output"),
                  long_flag=("append", "portability", "quiet", "verbose")),
    "xargs": Spec(
        short_arg="adEILnPs", short_opt="eil", short_flag="0oprtx",
        long_arg=("arg-file", "delimiter", "eof", "replace", "max-lines", "max-args", "max-procs",
                  "max-chars", "process-slot-var"),
        long_flag=("null", "open-tty", "interactive", "no-run-if-empty", "verbose", "exit", "show-limits"),
    ),
    "flock": Spec(
        short_arg="wEc", short_flag="sxunoFv",
        long_arg=("timeout", "wait", "conflict-exit-code", "command"),
        long_flag=("shared", "exclusive", "unlock", "nonblock", "nb", "close", "no-fork", "verbose"),
        value_roles=(("-c", "program"), ("--command", "program")), positional=1,
    ),
    "chroot": Spec(long_arg=("userspec", "groups"), long_flag=("skip-chdir",), positional=1),
    "exec": Spec(short_arg="a", short_flag="cl"),
    "command": Spec(short_flag="pvV"),
    "builtin": Spec(),
    "busybox": Spec(),
    "nocache": Spec(),
    "eatmydata": Spec(),
}  # fmt: skip

# Programs that run another program in ways not modelled here (privileges, namespaces, tracing,
# remote hosts, editors and pagers with their `!`): every word after them could be the program.
OPAQUE = frozenset(
    {"sudo", "doas", "su", "runuser", "pkexec", "setpriv", "capsh", "chpst", "start-stop-daemon",
     "systemd-run", "unshare", "nsenter", "strace", "ltrace", "gdb", "valgrind", "script", "unbuffer",
     "parallel", "watch", "ssh", "firejail", "bwrap", "sg", "newgrp", "ip", "fakeroot", "proot",
     "torsocks", "proxychains", "proxychains4", "faketime", "catchsegv", "dbus-run-session", "xvfb-run",
     "expect", "vi", "vim", "nvim", "view", "ex", "emacs", "less", "more", "man", "eval", "source", ".",
     "trap", "alias"}
)  # fmt: skip

SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "fish", "csh", "tcsh", "posh", "lksh",
     "rbash", "hush"}
)  # fmt: skip
SHELL_SPEC = Spec(
    short_arg="oO", short_flag="abcefhiklmnprstuvxBCEHPT", long_arg=("rcfile", "init-file"),
    strict=False, plus_options=True,
)  # fmt: skip

PYTHON = re.compile(r"(?:python|pypy)[0-9.]*")
PYTHON_SPEC = Spec(
    short_arg="cmWX", short_flag="bBdEhiIOPqsSuvVx", long_arg=("check-hash-based-pycs",),
    long_flag=("help", "version", "help-env", "help-xoptions", "help-all"),
    value_roles=(("-c", "code"), ("-m", "program")), stops="cm",
)  # fmt: skip

# Interpreters: the spec, the options whose value is the program text (with those, operands are
# data), and the flag that makes them interactive.
INTERPRETERS: dict[str, tuple[Spec, frozenset[str], str]] = {
    "perl": (
        Spec(short_arg="eEIMm", short_opt="0CdDFilx", short_flag="acfhnpsStTuUvVwWX",
              value_roles=(("-e", "code"), ("-E", "code"), ("-M", "code"), ("-m", "code"))),
        frozenset({"-e", "-E"}), "",
    ),
    "ruby": (
        Spec(short_arg="eIrCE", short_opt="0FxKTW", short_flag="acdhlnpsSuvwy",
              value_roles=(("-e", "code"), ("-r", "code"))),
        frozenset({"-e"}), "",
    ),
    "node": (
        Spec(short_arg="erp", short_flag="cihv",
              long_arg=("eval", "require", "print", "import", "loader", "experimental-loader", "input-type"),
              value_roles=(("-e", "code"), ("--eval", "code"), ("-p", "code"), ("--print", "code"),
                           ("-r", "code"), ("--require", "code"), ("--import", "code"), ("--loader", "code"),
                           ("--experimental-loader", "code")),
              strict=False),
        frozenset({"-e", "--eval", "-p", "--print"}), "-i",
    ),
    "php": (
        Spec(short_arg="cdfrBREFzt", short_flag="aehilmnsvwH",
              value_roles=(("-r", "code"), ("-B", "code"), ("-R", "code"), ("-E", "code"), ("-d", "code"),
                           ("-z", "code"), ("-f", "program"), ("-F", "program"))),
        frozenset({"-r", "-f", "-R", "-F"}), "-a",
    ),
    "lua": (
        Spec(short_arg="el", short_flag="ivEW", value_roles=(("-e", "code"), ("-l", "code"))),
        frozenset({"-e"}), "-i",
    ),
}  # fmt: skip
INTERPRETERS["nodejs"] = INTERPRETERS["node"]
INTERPRETERS["luajit"] = INTERPRETERS["lua"]
for _v in ("5.1", "5.2", "5.3", "5.4"):
    INTERPRETERS[f"lua{_v}"] = INTERPRETERS["lua"]
# Interpreters with a prompt of their own when given no script.
REPLS = frozenset(
    {"tclsh", "wish", "irb", "pry", "jshell", "R", "julia", "octave", "guile", "sbcl", "clisp", "erl",
     "iex", "ghci", "deno", "bun", "sqlite3", "mysql", "psql", "ftp", "lftp", "bc"}
)  # fmt: skip
# Programs that run commands given to them on stdin whatever their arguments.
RUN_STDIN = {
    "xargs": "xargs runs a program with what it reads",
    "parallel": "parallel runs the commands it reads",
    "dc": "dc runs commands from its input ('!')",
    "ed": "ed runs shell commands from its input ('!')",
    "red": "ed runs shell commands from its input ('!')",
    "ex": "ex runs shell commands from its input ('!')",
    "vi": "vi runs shell commands from its input ('!')",
    "vim": "vim runs shell commands from its input ('!')",
    "nvim": "vim runs shell commands from its input ('!')",
    "gdb": "gdb runs shell commands from its input",
    "sqlite3": "sqlite3 runs shell commands from its input ('.shell')",
    "expect": "expect runs the script it reads",
    "script": "script starts an interactive shell",
    "su": "su starts a shell",
    "busybox": "",  # decided by its applet
}

AWK = frozenset({"awk", "gawk", "mawk", "nawk", "original-awk"})
AWK_SPEC = Spec(
    short_arg="fFveEilW", short_opt="dDLop", short_flag="bcCghMNnOPrsStV",
    long_arg=("file", "field-separator", "assign", "source", "exec", "include", "load"),
    long_flag=("sandbox", "characters-as-bytes", "traditional", "copyright", "dump-variables", "debug",
               "gen-pot", "help", "lint", "bignum", "use-lc-numeric", "non-decimal-data", "pretty-print",
               "optimize", "profile", "posix", "re-interval", "no-optimize", "version"),
    value_roles=(("-f", "code"), ("--file", "code"), ("-e", "code"), ("--source", "code"), ("-E", "code"),
                 ("--exec", "code"), ("-i", "code"), ("--include", "code"), ("-l", "code"),
                 ("--load", "code"), ("-W", "code")),
)  # fmt: skip
AWK_PROGRAM_OPTIONS = frozenset({"-f", "--file", "-e", "--source", "-E", "--exec"})
SED = frozenset({"sed", "gsed"})
SED_PROGRAM_OPTIONS = frozenset({"-e", "--expression", "-f", "--file"})
SED_SPEC = Spec(
    short_arg="efl", short_opt="i", short_flag="nrEsuz",
    long_arg=("expression", "file", "line-length"),
    long_flag=("quiet", "silent", "debug", "follow-symlinks", "in-place", "posix", "regexp-extended",
               "separate", "sandbox", "unbuffered", "null-data", "help", "version"),
    value_roles=(("-e", "code"), ("--expression", "code"), ("-f", "code"), ("--file", "code")),
)  # fmt: skip
# Programs whose operands are programs in their own language (dc's `!`, m4's `syscmd`).
CODE_OPERANDS = frozenset({"dc", "m4"})
FIND = frozenset({"find", "gfind"})
FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})

# Options with which an otherwise ordinary program runs a program (or a shell command) of the
# caller's choosing. Long options match by unambiguous prefix too, short ones inside a bundle.
PROGRAM_OPTIONS: dict[str, tuple[str, ...]] = {
    "sort": ("--compress-program",),
    "tar": ("--to-command", "--use-compress-program", "-I", "--checkpoint-action", "--rsh-command",
            "--info-script", "-F", "--new-volume-script"),
    "find": ("-exec", "-execdir", "-ok", "-okdir"),
    "rsync": ("-e", "--rsh", "--rsync-path"),
    "git": ("-c", "--config-env", "--exec-path", "--upload-pack", "--receive-pack"),
    "zip": ("-T", "--test", "-TT", "--unzip-command"),
    "diff3": ("--diff-program",),
    "sdiff": ("--diff-program",),
    "cpio": ("--rsh-command",),
    "wget": ("--use-askpass", "-e", "--execute"),
    "man": ("-P", "--pager", "-H", "--html"),
}  # fmt: skip


def option_matches(word: str, option: str) -> bool:
    """Whether `word` gives `option` (long: by unambiguous prefix, as getopt does; short: in a bundle)."""
    if option.startswith("--"):
        name = word.split("=", 1)[0]
        return word.startswith("--") and len(name) > 2 and option.startswith(name)
    if len(option) == 2:
        return word.startswith("-") and not word.startswith("--") and option[1] in word[1:]
    return word == option


def runs_program_option(program: str, words: Iterable[str]) -> bool:
    """Whether `words` give `program` an option that makes it run another program."""
    options = PROGRAM_OPTIONS.get(program, ())
    return any(option_matches(w, o) for w in words for o in options)


# sed: a command `e` (run the pattern space, or the rest of its line), or the `e` flag of `s`.
SED_S_FLAGS = re.compile(r"[gpiImMe0-9]*(?:w\s.*)?$")


def sed_may_execute(script: str) -> bool:
    """Whether a sed script may run a command (GNU `e`): conservatively True when unsure."""
    i, n = 0, len(script)
    while i < n:
        c = script[i]
        if c in " \t\n;{}!" or c.isdigit() or c in "$,~+":
            i += 1
        elif c == "/" or c == "\\":
            # An address regex: skip to its closing delimiter.
            delim = "/" if c == "/" else (script[i + 1] if i + 1 < n else "")
            i = skip_delimited(script, i + (1 if c == "/" else 2), delim)
            if i < 0:
                return True
        elif c == "s" or c == "y":
            if i + 1 >= n:
                return True
            delim = script[i + 1]
            j = skip_delimited(script, i + 2, delim)
            j = skip_delimited(script, j, delim) if j >= 0 else -1
            if j < 0:
                return True
            end = j
            while end < n and script[end] not in ";\n}":
                end += 1
            if c == "s" and "e" in re.sub(r"w\s.*", "", script[j:end]):
                return True
            i = end
        elif c in "aic":
            i = line_end(script, i)  # its text
        elif c in "rRwWbtT:":
            i = line_end(script, i)  # a file name or a label
        elif c == "e":
            return True
        elif c.isalpha() or c in "=#":
            if c == "#":
                i = line_end(script, i)
            else:
                i += 1
        else:
            return True
    return False


def skip_delimited(text: str, i: int, delim: str) -> int:
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == delim:
            return i + 1
        else:
            i += 1
    return -1


def line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end


def awk_may_execute(program: str) -> bool:
    """Whether an awk program may run a command: system(), or a pipe to or from one."""
    return bool(re.search(r"\bsystem\s*\(", program)) or bool(re.search(r"(?<!\|)\|(?!\|)", program))
