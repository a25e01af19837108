"""Redact credentials from tool output before it reaches the model, a log or a channel.

Every tool result passes through `Scrubber.scrub` on its way out of the
registry. Two kinds of secret are replaced by ``[REDACTED]``:

* values the daemon itself loaded from its config (API keys, the MQTT
  password), registered with `Scrubber.add_secret`. These go wherever they
  appear, whatever they look like;
* anything shaped like a well-known credential: provider API keys, cloud and
  chat tokens, JWTs, PEM private keys, passwords inside URIs, long hex strings,
  and ``key=value`` pairs whose key names a secret (the key stays, the value goes).

A registered secret is also found as JSON escapes it (``\"``, ``\u00e9``, the
``\u0026`` of encoders that escape HTML characters), as URLs percent-encode it,
and broken across lines (``fold``, wrapped logs): forms that tools produce
without anyone trying. Deliberate encodings (base64, hex, reversed, split
with spaces) are not chased: there is no end to them, and keeping a model
from reading the secrets at all is the sandbox's job, not the scrubber's.

The stance is fail closed: when a string could be a secret, it goes. A
redacted commit hash costs a little readability; a leaked key costs a rotation.

Scrubbing runs on every tool call, inside the registry's 30 µs dispatch
budget, so the common case -- short output with nothing secret in it -- is
settled by a few substring tests before the combined pattern ever runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import quote, quote_plus

__all__ = ["MIN_SECRET_LEN", "REDACTED", "Scrubber"]

REDACTED: Final = "[REDACTED]"

# A config value shorter than this is not registered: "on", "pi" or "123"
# would match inside ordinary words and numbers and shred every output, and a
# credential that short protects nothing anyway.
MIN_SECRET_LEN: Final = 4

# `scrub` repeats until nothing changes (see `Scrubber.scrub`): one pass for
# clean text, two when something was redacted. The cap is defence in depth: it
# bounds latency should a future pattern ever break the argument that the loop ends.
_MAX_PASSES: Final = 8

# --- The patterns -----------------------------------------------------------
#
# Python's regex engine tries every branch of an alternation at every position,
# but skips a branch at once when its first item is a literal or a character
# class that does not match. So each branch below starts with its literal and
# checks its left boundary with a lookbehind *after* it (``sk-(?<![...]sk-)``
# reads "sk-, not preceded by a token character"): about 3x faster than a
# leading lookbehind, which must run at every position.

# A PEM private key, through its END line. With no END line (output cut short
# by `head` or a size limit) it runs to the end of the text: half a key is
# still a key. Certificates and public keys are public and stay.
_PEM_PRIVATE_KEY = (
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?s:.*?)(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
)

# ``scheme://user:password@host``: only the password goes. The match starts at
# "://" (a cheap literal); the user is kept but scrubbed itself, since tokens
# are often passed as the user (https://ghp_...:x-oauth-basic@github.com).
# The password is greedy up to the *last* "@" so that an unescaped "@" inside
# it (mqtt://bob:p@ss@broker) does not leave its tail behind. RFC 3986 keeps
# "/", "?" and "#" out of the userinfo, which stops a URL with a port and an
# "@" later in its path from matching.
_URI_PASSWORD = r"://(?P<uri_user>[^\s:/@?#\"'<>]*):[^\s/?#\"'<>]+(?=@)"

# Key names whose value is a secret. A keyword may be the last part of a
# compound name (MQTT_PASSWORD, client.secret, x-auth-token, mqttPassword) but
# not the middle of a word (max_tokens, passwords, secretary). "/" may not
# precede it either, so "/etc/passwd: Permission denied" survives.
_KEYWORDS = (
    r"api[_-]?key|access[_-]?token|authorization|bearer|client[_-]?secret"
    r"|password|passwd|pwd|psk|private[_-]?key|secret(?:[_-]?(?:access[_-]?)?key)?|token"
)
# key, optional closing quote of a quoted key, separator (= : := => ==, the
# last so that code comparing against a literal password is caught too), and an
# auth scheme that is kept so "Authorization: Bearer [REDACTED]" stays readable.
# The value is either quoted (opening quote kept, runs to the closing quote or
# the end of the line) or bare (runs to whitespace or a delimiter of the
# surrounding syntax: JSON, query strings, calls). An earlier redaction counts
# as a value, so a second scrub leaves ``password=[REDACTED]`` alone.
# An empty value (``password = ""``, "Enter password:") does not match.
_KEY_VALUE = (
    r"(?=[AaBbCcPpSsTt])"  # first letters of _KEYWORDS: a cheap gate before the lookbehinds
    r"(?:(?<![A-Za-z0-9/])|(?<=[a-z0-9])(?=[A-Z]))"
    rf"(?P<kv>(?i:{_KEYWORDS})[\"']?[ \t]*(?::=|=>|==?|:)[ \t]*"
    r"(?:(?i:bearer|basic|token|digest)[ \t]+)?(?P<q>[\"'])?)"
    r"(?(q)(?:(?!(?P=q))[^\\\n]|\\.)++|(?:\[REDACTED\]|[^\s\"'&,;<>()\[\]{}])++)"
)

# A bare "Bearer <token>" outside a header line (curl -v, logs). The token
# must be long so "Bearer of bad news" survives.
_BEARER = r"[Bb](?<![A-Za-z0-9].)(?P<bearer>earer[ \t]+)[A-Za-z0-9._~+/-]{16,}=*"

# Provider tokens, recognised by their documented prefixes. Lengths are lower
# bounds, not exact, so a truncated or reformatted key still goes. The "sk-"
# bound keeps a file such as /home/user/sk-notes.txt intact (a long hyphenated
# name after "sk-" would not be: fail closed).
_TOKENS = (
    r"sk-(?<![A-Za-z0-9_-]sk-)[A-Za-z0-9_-]{20,}",  # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-)
    r"g(?<![A-Za-z0-9_]g)(?:h[pousr]_[A-Za-z0-9]{20,}|ithub_pat_[A-Za-z0-9_]{20,})",  # GitHub
    r"A(?<![A-Za-z0-9]A)(?:KIA|SIA)[A-Z0-9]{16}(?![A-Za-z0-9])",  # AWS access key ids
    r"xox(?<![A-Za-z0-9]xox)[abposr]-[A-Za-z0-9-]{10,}",  # Slack
    r"AIza(?<![A-Za-z0-9_-]AIza)[A-Za-z0-9_-]{35,}",  # Google API keys
    r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",  # JWTs
)

# 32 or more hex digits standing alone: hex-encoded keys, session secrets,
# HMAC keys. This also takes git commit hashes (40), sha256 digests (64) and
# `xxd -p` dumps, which are rarely secret -- but a hex secret has no other
# shape to tell it by, and failing closed is the point. Short hex (0x48,
# deadbeef, register values, MAC addresses, UUIDs with their dashes) stays.
# A "0x" prefix counts as a boundary and is kept.
_LONG_HEX = r"[0-9A-Fa-f](?:(?<![A-Za-z0-9].)|(?<=(?<![A-Za-z0-9])0[xX].))[0-9A-Fa-f]{31,}(?![A-Za-z0-9])"

# One pass over the text for all of them. ASCII mode keeps (?i) to ASCII
# letters: with Unicode case folding "pa\u017f\u017fword" (U+017F is the long s)
# would match "password", but `str.lower` leaves the long s alone, so the
# pre-filter below would miss it.
_PATTERNS: Final = re.compile(
    "|".join((_PEM_PRIVATE_KEY, _URI_PASSWORD, _KEY_VALUE, _BEARER, *_TOKENS, _LONG_HEX)),
    re.ASCII,
)

# The pre-filter: every match of _PATTERNS contains one of these literals, or
# (case-insensitively) one of the keywords, or a run of 32 hex digits. Text
# with none of them cannot match, and testing for them costs ~2 µs on 100
# characters against ~5 µs for _PATTERNS itself. Keep in step with the
# patterns above (tests check the two agree).
_LITERAL_TRIGGERS: Final = (
    "-----BEGIN",
    "://",
    "sk-",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "AKIA",
    "ASIA",
    "xox",
    "AIza",
    "eyJ",
)
_KEYWORD_TRIGGERS: Final = ("key", "token", "secret", "pass", "pwd", "psk", "bearer", "authorization")
_HEX_RUN: Final = re.compile(r"[0-9A-Fa-f]{32}")


_LINE_BREAK_CHARS: Final = "\r\n"
_LINE_BREAKS: Final = re.compile("[\r\n]")
_HEX_ESCAPE: Final = re.compile(r"\\u([0-9a-f]{4})")
_PERCENT_ESCAPE: Final = re.compile(r"%[0-9A-F]{2}")


def _encoded_forms(value: str) -> set[str]:
    """`value` and the forms it takes when a program escapes it for JSON or a URL."""
    forms = {value}
    ascii_json = json.dumps(value)[1:-1]
    # Go's encoding/json (and others) also escape &, < and >.
    html_safe = ascii_json.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    for escaped in (ascii_json, json.dumps(value, ensure_ascii=False)[1:-1], html_safe):
        for form in (escaped, escaped.replace("/", "\\/")):  # "\/" is legal JSON; some encoders write it
            forms.add(form)
            forms.add(_HEX_ESCAPE.sub(lambda m: "\\u" + m[1].upper(), form))  # \u00E9 as well
    for quoted in (quote(value, safe=""), quote(value), quote_plus(value)):
        forms.add(quoted)
        forms.add(_PERCENT_ESCAPE.sub(lambda m: m[0].lower(), quoted))  # %c3%a9 as well
    return forms


def _may_hold_pattern(text: str) -> bool:
    """False only when `_PATTERNS` certainly finds nothing in `text`."""
    for literal in _LITERAL_TRIGGERS:
        if literal in text:
            return True
    lowered = text.lower()
    for keyword in _KEYWORD_TRIGGERS:
        if keyword in lowered:
            return True
    return _HEX_RUN.search(text) is not None


def _replace(match: re.Match[str]) -> str:
    """What a `_PATTERNS` match becomes: the redaction, after whatever part of it is kept."""
    user = match["uri_user"]
    if user is not None:
        return f"://{_PATTERNS.sub(_replace, user)}:{REDACTED}"
    for kept in ("kv", "bearer"):
        end = match.end(kept)
        if end != -1:
            return match.string[match.start() : end] + REDACTED
    return REDACTED


def _redact_spans(text: str, finder: re.Pattern[str], view: str | None = None) -> str:
    """Replace the union of every occurrence `finder` reports with one redaction per merged span.

    `finder` reports, at each position, the longest secret starting there. Taking
    the union (rather than `re.sub`'s leftmost, non-overlapping matches) matters
    when two secrets overlap: "abcd1234" and "1234wxyz" in "abcd1234wxyz" would
    otherwise leave "wxyz" behind.

    With `view` (the text with its line breaks removed), occurrences are looked
    for there and redacted in `text` together with the line breaks inside them.
    """
    where: list[int] | None = None
    if view is not None:
        where = [i for i, c in enumerate(text) if c not in _LINE_BREAK_CHARS]  # view index -> text index
    spans: list[list[int]] = []
    for match in finder.finditer(text if view is None else view):
        start, end = match.start(), match.end(1)
        if where is not None:
            start, end = where[start], where[end - 1] + 1
        if spans and start < spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    pieces: list[str] = []
    copied = 0
    for start, end in spans:
        pieces += (text[copied:start], REDACTED)
        copied = end
    pieces.append(text[copied:])
    return "".join(pieces)


class Scrubber:
    """Replaces credentials in text with ``[REDACTED]``.

    One instance serves the whole daemon: register the secrets from the config
    with `add_secret` at start-up, then call `scrub` on every tool output.
    `scrub` is idempotent: scrubbing its result again changes nothing.
    """

    __slots__ = ("_secret_res", "_secrets")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        # (detector, finder) for the registered secrets, or None while there are
        # none. Replaced as one tuple, so a scrub running in a worker thread
        # never sees one regex rebuilt and the other not.
        self._secret_res: tuple[re.Pattern[str], re.Pattern[str]] | None = None
        for value in secrets:
            self.add_secret(value)

    def add_secret(self, value: str) -> None:
        """Always redact `value` from now on, wherever it appears and whatever its shape.

        Values shorter than `MIN_SECRET_LEN` (including "") are ignored; adding
        a value twice is harmless.
        """
        if len(value) < MIN_SECRET_LEN or value in self._secrets:
            return
        self._secrets.update(_encoded_forms(value))
        # Longest first: at a given position the finder reports the first
        # branch that matches, and a secret that contains another must win whole.
        # The detector only answers "is any secret here?" on the fast path.
        ordered = sorted(self._secrets, key=len, reverse=True)
        detector = re.compile("|".join(map(re.escape, ordered)))
        # The finder also knows the redaction itself, so that an occurrence
        # overlapping an earlier redaction (a secret starting with "]" right
        # after one) merges with it instead of cutting it in half, and one lying
        # wholly inside it (a secret "DACT") is left alone.
        with_marker = sorted([*ordered, REDACTED], key=len, reverse=True)
        finder = re.compile("(?=(" + "|".join(map(re.escape, with_marker)) + "))")
        self._secret_res = (detector, finder)

    def scrub(self, text: str) -> str:
        """`text` with every secret replaced by ``[REDACTED]``.

        One pass is not always enough: a redaction can make a neighbour
        stand alone (a hex run that followed a registered secret) or complete a
        registered secret that starts with "]". So passes repeat until nothing
        changes, which also makes the result idempotent by construction. Text
        with nothing secret in it -- nearly all of it -- takes exactly one
        cheap pass.
        """
        for _ in range(_MAX_PASSES):
            scrubbed = self._scrub_once(text)
            if scrubbed == text:
                break
            text = scrubbed
        return text

    def _scrub_once(self, text: str) -> str:
        # Registered secrets first and over the whole text: a pattern match that
        # ran into one (``token=`` followed by a secret containing a comma)
        # would otherwise redact only part of it.
        secret_res = self._secret_res
        if secret_res is not None:
            detector, finder = secret_res
            if detector.search(text) is not None:
                text = _redact_spans(text, finder)
            if "\n" in text or "\r" in text:
                view = _LINE_BREAKS.sub("", text)
                if detector.search(view) is not None:
                    text = _redact_spans(text, finder, view)
        if _may_hold_pattern(text):
            text = _PATTERNS.sub(_replace, text)
        return text
