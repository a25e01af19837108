"""Shell command text: the checks and normal form before anything looks at a command.

`normalise` is what runs: NUL bytes and control characters are refused,
the text is put in Unicode NFKC form (fullwidth letters become ASCII) and
invisible characters (zero-width spaces and joiners, BOM, soft hyphen, bidi
controls) are removed. What is checked is exactly what runs.

`analysis_views` are for the deny groups only, never run: extra readings of
the same text with the usual shell evasions undone (quotes and backslashes
removed, `$IFS` read as a space, empty positional parameters dropped, line
continuations joined, `$'\\x72m'` decoded, `{a,b}` brace lists spread, and
Cyrillic/Greek look-alike letters folded to ASCII), so `r'm' -rf /`,
`rm${IFS}-rf${IFS}/` and `rm -rf /` spelt with a Cyrillic `m` all read as
`rm -rf /`.

`simple_commands` splits a command line into its simple commands for the
allowlist; anything with command substitution returns None (never
auto-allowed).
"""

from __future__ import annotations

import re
import shlex
import unicodedata

from edgeclaw.errors import ToolRefused

MAX_COMMAND_CHARS = 16 * 1024

# Characters with no visible width: used to split a word so a pattern misses it.
INVISIBLE = frozenset(
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e"
    "\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\u206a\u206b\u206c\u206d\u206e\u206f"
    "\u3164\ufeff\uffa0"
)
_STRIP_INVISIBLE = dict.fromkeys(map(ord, INVISIBLE))

# Letters NFKC leaves alone that look like ASCII ones. Folded only for checking.
_CONFUSABLES = str.maketrans(
    # Cyrillic, Greek and Latin letters outside ASCII ...
    (
        "\u0430\u0432\u0441\u0501\u0435\u04bb\u0456\u0458\u043a\u043c\u043d\u043e\u0440\u051b"
        "\u0455\u0442\u0443\u0445\u051d\u0261\u04cf\u0410\u0412\u0421\u0415\u041d\u0406\u0408"
        "\u041a\u041c\u041e\u0420\u0405\u0422\u0425\u0423\u03b1\u03bf\u03c1\u03bd\u03c4\u03b9"
        "\u03ba\u03c5\u03c7\u0391\u0392\u0395\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4"
        "\u03a5\u03a7\u0396\u0131\u0237\u2113\u017f"
    ),
    # ... and the ASCII letters they imitate, position by position.
    ("abcdehijkmhopqstyxwglABCEHIJKMOPSTXYaopvtikuxABEHIKMNOPTYXZijls"),
)

_CONTINUATION = re.compile(r"\\\r?\n")
_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.S)
_IFS = re.compile(r"\$\{IFS[^}]*\}|\$IFS\b")
_EMPTY_PARAMS = re.compile(r"\$\{[0-9@*#]\}|\$[0-9@*]")
_BRACES = re.compile(r"\{([^{}\s,]*(?:,[^{}\s,]*)+)\}")
_SPACES = re.compile(r"[ \t]+")
_SUBSTITUTION = re.compile(r"\$\(|`|<\(|>\(")
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", ";;", "(", ")", "|&"})
_REDIRECTS = frozenset({">", ">>", "<", "<<", "<<<", ">&", "<&", "&>", "&>>", ">|", "<>"})


def normal_form(text: str) -> str:
    """NFKC, invisible characters removed, line ends as `\\n`: the text transformations of `normalise`.

    Also applied to each custom-tool argument *before* it is shell-quoted:
    NFKC turns a fullwidth apostrophe (U+FF07) into `'`, so normalising after
    quoting could end a quoted word early and let an argument run as code.
    """
    # Removing an invisible character can bring a letter and a combining mark together, and NFKC
    # can produce an invisible character: repeat until nothing changes, so the result is a fixed
    # point (normalising it again gives it back, which the custom tools rely on).
    for _ in range(4):
        done = unicodedata.normalize("NFKC", text.translate(_STRIP_INVISIBLE)).translate(_STRIP_INVISIBLE)
        if done == text:
            break
        text = done
    return text.replace("\r\n", "\n").replace("\r", "\n")


def normalise(command: str) -> str:
    """The form of `command` that is checked and run. Raises ToolRefused for unusable text."""
    if not isinstance(command, str):
        raise ToolRefused("the command must be a string")
    if "\x00" in command:
        raise ToolRefused("refused command: it contains a NUL byte")
    text = normal_form(command)
    for ch in text:
        if (ord(ch) < 0x20 and ch not in "\n\t") or ord(ch) == 0x7F or 0x80 <= ord(ch) < 0xA0:
            raise ToolRefused(f"refused command: it contains the control character U+{ord(ch):04X}")
    text = text.strip()
    if not text:
        raise ToolRefused("refused command: it is empty")
    if len(text) > MAX_COMMAND_CHARS:
        raise ToolRefused(f"refused command: longer than {MAX_COMMAND_CHARS} characters")
    return text


def _decode_ansi_c(match: re.Match[str]) -> str:
    body = match.group(1)
    try:
        return body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except (UnicodeDecodeError, ValueError):
        return body


def _spread_braces(match: re.Match[str]) -> str:
    return " ".join(match.group(1).split(","))


def analysis_views(text: str) -> tuple[str, ...]:
    """`text` as written, plus readings with shell evasions undone (for matching only)."""
    folded = text.translate(_CONFUSABLES)
    flat = _CONTINUATION.sub("", folded)
    flat = _ANSI_C.sub(_decode_ansi_c, flat)
    flat = _IFS.sub(" ", flat)
    flat = _EMPTY_PARAMS.sub("", flat)
    # Backslash-escaped characters stand for themselves; quotes only group.
    flat = re.sub(r"\\(.)", r"\1", flat)
    flat = flat.replace("'", "").replace('"', "")
    flat = _SPACES.sub(" ", flat)
    spread = _BRACES.sub(_spread_braces, flat)
    views = [text]
    for view in (folded, flat, spread):
        if view not in views:
            views.append(view)
    return tuple(views)


def has_substitution(text: str) -> bool:
    """Command or process substitution anywhere (even quoted: double quotes still expand it)."""
    return bool(_SUBSTITUTION.search(text))


def simple_commands(text: str) -> list[list[str]] | None:
    """The words of each simple command in `text`, or None when it cannot be split safely.

    Used only to decide whether every program in a command line is on the
    allowlist, so anything unusual (substitutions, unbalanced quotes) gives
    None, which never matches an allowlist.
    """
    if has_substitution(text):
        return None
    joined = _CONTINUATION.sub("", text).replace("\n", " ; ")
    lexer = shlex.shlex(joined, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:
        return None
    commands: list[list[str]] = []
    current: list[str] = []
    skip_next = False
    for tok in tokens:
        if skip_next:
            skip_next = False
            continue
        if tok in _SEPARATORS:
            if current:
                commands.append(current)
            current = []
        elif tok in _REDIRECTS or (tok[:-1].isdigit() and tok[-1:] in "<>" and len(tok) > 1):
            skip_next = True  # the redirection target is a file, not a word of the command
        elif set(tok) <= set(";&|()<>"):
            return None  # an operator we do not know
        else:
            current.append(tok)
    if current:
        commands.append(current)
    return commands


def program_of(words: list[str]) -> str:
    """The program a simple command runs: the first word after `VAR=value` assignments, as a basename."""
    for word in words:
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word, re.S):
            continue
        return word.rsplit("/", 1)[-1]
    return ""
