"""Redact credentials from text before it leaves the daemon: to a model, a channel, an event or a log.

`Scrubber.scrub` runs on every tool result, chat reply, provider request, audit
event and log record. Two kinds of secret are replaced by ``[REDACTED]``:

* values the daemon itself loaded from its config (API keys, the MQTT
  password, HMAC keys), registered with `Scrubber.add_secret`. These go
  wherever they appear, whatever they look like;
* anything shaped like a well-known credential: provider API keys, cloud,
  payment and chat tokens, webhook URLs, JWTs, PEM private keys (also a body
  read without its BEGIN line), passwords inside URIs and ``.netrc`` lines,
  long hex strings, long random-looking base64 runs (a bare AWS secret key in
  a CSV has no other shape), and ``key=value`` pairs whose key names a secret
  (the key stays, the value goes).

A registered secret is also found in the forms programs put it in without
anyone trying: JSON escapes (``\\"``, ``\\u00e9``, the ``\\u0026`` of encoders that
escape HTML characters), URL percent-encoding, hex and base64 (also inside a
longer base64 text, such as ``user:secret`` in a Basic header), and broken
across lines (``fold``, wrapped logs). Text is also read as a terminal shows
it: a secret split by characters a terminal does not display (a bare CR, NUL,
DEL, ANSI colour sequences, zero-width characters) is still that secret.
Deliberate transformations (reversed, split with spaces, encrypted) are not
chased: there is no end to them, and keeping a model from reading the secrets
at all is the sandbox's job, not the scrubber's.

The stance is fail closed: when a string could be a secret, it goes. A
redacted commit hash costs a little readability; a leaked key costs a rotation.

Scrubbing runs on every tool call, inside the registry's 30 µs dispatch
budget, so the common case -- short output with nothing secret in it -- is
settled by a few substring tests before the combined pattern ever runs.
"""

from __future__ import annotations

import base64
import binascii
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

# Encoded forms (hex, base64) shorter than this are not looked for: a handful
# of base64 characters turns up in ordinary base64 text by chance.
_MIN_ENCODED_LEN: Final = 8

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
# The same key read from its middle (`read_file` with start_line, `tail`): the
# base64 lines before an END line go with it. Lines in the middle with no END
# line are long base64 runs, which `_BASE64_RUN` takes.
_PEM_TAIL = (
    r"(?m:^)(?:[A-Za-z0-9+/=]{1,100}\r?\n)+"
    r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
)

# ``scheme://user:password@host``: only the password goes. The match starts at
# "://" (a cheap literal); the user is kept but scrubbed itself, since tokens
# are often passed as the user (https://ghp_...:x-oauth-basic@github.com).
# The password is greedy up to the *last* "@" so that an unescaped "@" inside
# it (mqtt://bob:p@ss@broker) does not leave its tail behind. RFC 3986 keeps
# "/", "?" and "#" out of the userinfo, which stops a URL with a port and an
# "@" later in its path from matching.
_URI_PASSWORD = r"://(?P<uri_user>[^\s:/@?#\"'<>]*):[^\s/?#\"'<>]+(?=@)"

# Webhook URLs are credentials in their path: whoever has the URL can post.
# The host stays, the path goes.
_WEBHOOK = (
    r"(?P<hook>hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]{20,}"
    r"|(?P<hook2>discord(?:app)?\.com/api/webhooks/)[0-9]+/[A-Za-z0-9_-]{20,}"
)

# Key names whose value is a secret. A keyword may be the last part of a
# compound name (MQTT_PASSWORD, client.secret, x-auth-token, mqttPassword,
# AccountKey) but not the middle of a word (max_tokens, passwords, secretary).
# "/" may not precede it either, so "/etc/passwd: Permission denied" survives,
# unless "=" follows: a key=value in a path or file name (/tmp/PASSWORD=x/y,
# "open failed: data/API_KEY=sk...") carries its value as much as anywhere.
# "pass" counts only as the end of a compound name (DB_PASS, smtp.pass), since
# a bare "PASS: test_gpio" is a test report.
_KEYWORDS = (
    r"api[_-]?key|access[_-]?token|authorization|bearer|client[_-]?secret|credentials?"
    r"|(?:access|account|app|auth|encryption|master|private|shared[_-]?access|signing)[_-]?key"
    r"|pass(?:word|wd|phrase|code)|pwd|psk|secret(?:[_-]?(?:access[_-]?)?key)?|token"
    r"|(?<=[_.a-z0-9-])pass"
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
    r"(?=[AaBbCcEeMmPpSsTt])"  # first letters of _KEYWORDS: a cheap gate before the lookbehinds
    r"(?:(?<![A-Za-z0-9/])|(?<=[a-z0-9])(?=[A-Z])"
    rf"|(?<=/)(?=(?i:{_KEYWORDS})[\"']?[ \t]*(?::=|=>|=)))"
    rf"(?P<kv>(?i:{_KEYWORDS})[\"']?[ \t]*(?::=|=>|==?|:)[ \t]*"
    r"(?:(?i:bearer|basic|token|digest)[ \t]+)?(?P<q>[\"'])?)"
    r"(?(q)(?:(?!(?P=q))[^\\\n]|\\.)++|(?:\[REDACTED\]|[^\s\"'&,;<>()\[\]{}])++)"
)

# Signatures in query strings: Azure SAS ``sig=``, S3/GCS presigned URLs.
_QUERY_SIGNATURE = (
    r"[?&](?P<qs>(?i:sig|signature|x-amz-signature|x-goog-signature|x-amz-security-token)=)[^\s&#\"'<>]+"
)

# .netrc and similar: "login bob password hunter2", or a "password hunter2" line.
_NETRC = (
    r"l(?<![A-Za-z0-9]l)(?P<netrc>ogin[ \t]+\S+[ \t]+password[ \t]+)[^\s\"']+"
    r"|(?m:^)(?P<netrc2>[ \t]*password[ \t]+)[^\s\"']+(?=[ \t]*\r?(?m:$))"
)

# A bare "Bearer <token>" outside a header line (curl -v, logs). The token
# must be long so "Bearer of bad news" survives.
_BEARER = r"[Bb](?<![A-Za-z0-9].)(?P<bearer>earer[ \t]+)[A-Za-z0-9._~+/-]{16,}=*"

# Tokens recognised by their documented prefixes. Lengths are lower bounds,
# not exact, so a truncated or reformatted key still goes. Every branch spans a
# run of at least 20 token characters, which is what the pre-filter looks for.
# The "sk-" bound keeps a file such as /home/user/sk-notes.txt intact (a long
# hyphenated name after "sk-" would not be: fail closed).
_W = "A-Za-z0-9"  # token characters, inside [...]
_TOKENS = (
    rf"sk-(?<![{_W}_-]sk-)[{_W}_-]{{20,}}",  # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-)
    rf"g(?<![{_W}_]g)(?:h[pousr]_[{_W}]{{20,}}|ithub_pat_[{_W}_]{{20,}})",  # GitHub
    rf"A(?<![{_W}]A)(?:KIA|SIA)[A-Z0-9]{{16}}(?![{_W}])",  # AWS access key ids
    rf"xox(?<![{_W}]xox)[abposre]-[{_W}-]{{15,}}",  # Slack tokens
    rf"xapp-(?<![{_W}]xapp-)[0-9]-[{_W}-]{{15,}}",  # Slack app-level tokens
    rf"AIza(?<![{_W}_-]AIza)[{_W}_-]{{35,}}",  # Google API keys
    rf"GOCSPX-(?<![{_W}_-]GOCSPX-)[{_W}_-]{{20,}}",  # Google OAuth client secrets
    rf"ya29\.(?<![{_W}_-]ya29\.)[{_W}_-]{{20,}}",  # Google OAuth access tokens
    rf"eyJ(?<![{_W}_-]eyJ)[{_W}_-]{{5,}}\.[{_W}_-]{{5,}}\.[{_W}_-]*",  # JWTs
    rf"[rs]k_(?<![{_W}_-][rs]k_)(?:live|test)_[{_W}]{{16,}}",  # Stripe secret and restricted keys
    rf"whsec_(?<![{_W}_-]whsec_)[{_W}]{{24,}}",  # Stripe webhook signing secrets
    # GitLab personal, deploy, runner, trigger, feed, incoming-mail, agent, SCIM and CI tokens
    rf"gl(?<![{_W}_-]gl)(?:pat|dt|rt|ptt|ft|imt|agent|soat|cbt)-[{_W}_-]{{20,}}",
    rf"gl(?<![{_W}_-]gl)(?:sa|c)_[{_W}+/=_]{{30,}}",  # Grafana service-account and cloud tokens
    rf"hf_(?<![{_W}_-]hf_)[{_W}]{{30,}}",  # Hugging Face
    rf"api_org_(?<![{_W}_-]api_org_)[{_W}]{{30,}}",  # Hugging Face organisation tokens
    rf"SG\.(?<![{_W}_-]SG\.)[{_W}_-]{{16,32}}\.[{_W}_-]{{20,64}}",  # SendGrid
    rf"npm_(?<![{_W}_-]npm_)[{_W}]{{30,}}",  # npm
    rf"pypi-(?<![{_W}_-]pypi-)[{_W}_-]{{50,}}",  # PyPI upload tokens
    rf"shp(?<![{_W}_-]shp)(?:at|ss|ca|pa)_[a-fA-F0-9]{{32}}",  # Shopify
    rf"SK(?<![{_W}]SK)[0-9a-fA-F]{{32}}(?![{_W}])",  # Twilio API keys
    rf"key-(?<![{_W}_-]key-)[{_W}]{{32}}",  # Mailgun
    rf"do(?<![{_W}_-]do)[opr]_v1_[a-f0-9]{{64}}",  # DigitalOcean
    rf"dapi(?<![{_W}_-]dapi)[a-f0-9]{{32}}",  # Databricks
    rf"hv(?<![{_W}_-]hv)[sb]\.[{_W}_-]{{24,}}",  # HashiCorp Vault
    rf"dp\.(?<![{_W}_-]dp\.)(?:pt|st|sa|ct|scim|audit)\.[{_W}]{{40,}}",  # Doppler
    rf"tskey-(?<![{_W}_-]tskey-)[{_W}-]{{20,}}",  # Tailscale
    rf"sntry(?<![{_W}_-]sntry)[su]_[{_W}_=+/-]{{30,}}",  # Sentry
    rf"ATATT3(?<![{_W}_-]ATATT3)[{_W}_=-]{{30,}}",  # Atlassian API tokens
    rf"PMAK-(?<![{_W}_-]PMAK-)[{_W}-]{{40,}}",  # Postman
    rf"gsk_(?<![{_W}_-]gsk_)[{_W}]{{40,}}",  # Groq
    rf"r8_(?<![{_W}_-]r8_)[{_W}]{{30,}}",  # Replicate
    rf"pplx-(?<![{_W}_-]pplx-)[{_W}]{{40,}}",  # Perplexity
    rf"xai-(?<![{_W}_-]xai-)[{_W}]{{40,}}",  # xAI
    rf"lin_(?<![{_W}_-]lin_)(?:api|oauth)_[{_W}]{{30,}}",  # Linear
    rf"ntn_(?<![{_W}_-]ntn_)[{_W}]{{40,}}",  # Notion
    rf"sq0(?<![{_W}_-]sq0)(?:atp|csp)-[{_W}_-]{{22,}}",  # Square
    rf"AGE-SECRET-KEY-1(?<![{_W}_-]AGE-SECRET-KEY-1)[0-9A-Z]{{50,}}",  # age
    # Telegram bot tokens: the bot's numeric id, ":", 35 characters
    rf"[0-9](?<![{_W}].)[0-9]{{7,10}}:[{_W}_-]{{35}}(?![{_W}_-])",
    # Discord bot tokens: base64 of the bot id, a timestamp, an HMAC
    rf"[MNO](?<![{_W}_-].)[{_W}_-]{{23,27}}\.[{_W}_-]{{6}}\.[{_W}_-]{{27,}}",
)

# 32 or more hex digits standing alone: hex-encoded keys, session secrets,
# HMAC keys. This also takes git commit hashes (40), sha256 digests (64) and
# `xxd -p` dumps, which are rarely secret -- but a hex secret has no other
# shape to tell it by, and failing closed is the point. Short hex (0x48,
# deadbeef, register values, MAC addresses, UUIDs with their dashes) stays.
# A "0x" prefix counts as a boundary and is kept.
_LONG_HEX = r"[0-9A-Fa-f](?:(?<![A-Za-z0-9].)|(?<=(?<![A-Za-z0-9])0[xX].))[0-9A-Fa-f]{31,}(?![A-Za-z0-9])"


class _Pattern:
    """A regex compiled the first time text gets past its gate. Most text passes no gate, and
    compiling the families and the base64 patterns took about 4 ms of every start."""

    __slots__ = ("_compiled", "_flags", "_source")

    def __init__(self, source: str, flags: int = 0) -> None:
        self._source = source
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def re(self) -> re.Pattern[str]:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._source, self._flags)
        return compiled


# The patterns run in families, each behind a gate of cheap substring tests
# that every match of the family contains: most text passes no gate, and the
# engine's cost grows with the number of branches it tries at each position.
# ASCII mode keeps (?i) to ASCII letters: with Unicode case folding
# "pa\u017f\u017fword" (U+017F is the long s) would match "password", but
# `str.lower` leaves the long s alone, so the keyword gate would miss it.
_PEM_FAMILY: Final = _Pattern(f"{_PEM_PRIVATE_KEY}|{_PEM_TAIL}", re.ASCII)
_URL_FAMILY: Final = _Pattern(f"{_URI_PASSWORD}|{_WEBHOOK}", re.ASCII)
_KEYWORD_FAMILY: Final = _Pattern(f"{_KEY_VALUE}|{_QUERY_SIGNATURE}|{_NETRC}|{_BEARER}", re.ASCII)
_TOKEN_FAMILY: Final = _Pattern("|".join((*_TOKENS, _LONG_HEX)), re.ASCII)
# Groups that end the part of a match that stays; the rest is redacted.
_KEPT_GROUPS: Final = ("kv", "bearer", "hook", "hook2", "qs", "netrc", "netrc2")

# A run of 40 or more base64 (or base64url) characters, standing alone, with
# upper case, lower case and digits in it: what random keys look like when
# they have no prefix (an AWS secret access key, a PEM body line, a Cloudflare
# token). Judged by `_looks_random` after matching, in a pass of its own, so a
# run that is rejected hides nothing from the other families.
_BASE64_RUN: Final = _Pattern(
    r"[A-Za-z0-9+/_-](?<![A-Za-z0-9+/_-].)"
    r"(?=[A-Za-z0-9+/_-]*?[A-Z])(?=[A-Za-z0-9+/_-]*?[a-z])(?=[A-Za-z0-9+/_-]*?[0-9])"
    r"[A-Za-z0-9+/_-]{39,}={0,2}(?![A-Za-z0-9+/=_-])",
    re.ASCII,
)


# Public key material looks just as random and stays: certificates, public keys and
# signatures in PEM (with their END line; a block cut short is not known to be public)
# and OpenSSH public keys (authorized_keys, known_hosts).
_PUBLIC_KEY_MATERIAL: Final = _Pattern(
    r"-----BEGIN (?P<kind>(?:NEW |TRUSTED )?CERTIFICATE(?: REQUEST)?|X509 CRL|(?:RSA |SSH2 )?PUBLIC KEY"
    r"|PGP PUBLIC KEY BLOCK|PGP SIGNATURE|DH PARAMETERS|EC PARAMETERS)-----(?s:.*?)-----END (?P=kind)-----"
    r"|(?:ssh-(?:rsa|dss|ed25519|ed448)|ecdsa-sha2-nistp(?:256|384|521)"
    r"|sk-(?:ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com)[ \t]+AAAA[A-Za-z0-9+/]+=*",
    re.ASCII,
)


_PATH_LEAD: Final = re.compile(r"(?:/|[a-z]+/|[0-9]+/)*")


def _looks_random(run: str) -> bool:
    """False for runs that are words and paths rather than key material.

    Random base64 has a separator (+ / - _) about once in 16-32 characters; a
    path or a snake_case name has one every few. 40 random characters with
    more than 3 slashes happen about once in 200 keys: acceptable against
    redacting every long path in a listing.
    """
    length = len(run)
    slashes = run.count("/")
    separators = slashes + run.count("+") + run.count("-") + run.count("_")
    return slashes <= 2 + length // 32 and separators <= length // 8


# Where each family can match, found by cheap scans; the family's own regex
# then runs there only. Keep these in step with the families (a test compares
# the result with whole-text scans):
# * a keyword-family match lies on a line holding one of these (lower-cased);
_KEYWORD_TRIGGERS: Final = (
    "key",
    "token",
    "secret",
    "pass",
    "pwd",
    "psk",
    "bearer",
    "authorization",
    "credential",
    "sig=",
    "ignature=",
)
_KEYWORD_HITS: Final = re.compile("|".join(map(re.escape, _KEYWORD_TRIGGERS)))
# * a URL-family match on a line holding one of these;
_URL_TRIGGERS: Final = ("://", "hooks.slack.com/", "/api/webhooks/")
_URL_HITS: Final = re.compile("|".join(map(re.escape, _URL_TRIGGERS)))
# * a token-family match inside a word of these characters, 15 or more of them
#   (the shortest is a JWT), and a `_BASE64_RUN` match inside one of 40 or more;
_WORD: Final = re.compile(r"[A-Za-z0-9_.:+/=-]{15,}")
# Of those words, the token family looks only in ones with a run of 20 token
# characters or one of the prefixes whose tokens may be broken up by "+", "/",
# "=" or "." (base64 bodies, a short JWT).
_TOKEN_RUN: Final = re.compile(r"[A-Za-z0-9_-]{20}")
_TOKEN_TRIGGERS: Final = ("eyJ", "glc_", "sntry", "ATATT3")
_BASE64_MIN: Final = 40
# * a PEM-family match anywhere in a text holding "PRIVATE KEY".


# Characters a terminal does not show: C0 controls other than the whitespace
# ones, a CR not ending a line (what follows overwrites the line, but the bytes
# are all there for a log or a program), DEL, C1 controls, ANSI escape
# sequences (CSI, OSC, character-set switches and the two-byte kind), soft
# hyphen, zero-width and bidi formatting characters, the BOM. A secret with
# these inside reads on a screen exactly as the secret.
_INVISIBLE: Final = re.compile(
    "\x1b(?:\\[[0-?]*[ -/]*[@-~]|\\][^\x07\x1b]*(?:\x07|\x1b\\\\)?|[ -/]+[0-~]|[@-Z\\\\-_])"
    "|\r(?!\n)"
    "|[\x00-\x08\x0e-\x1f\x7f-\x9f\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)
# The same, and line breaks too: a registered secret wrapped by `fold` or a
# terminal is still that secret (a pattern is not looked for across lines: a
# key=value value ends at the end of its line).
_INVISIBLE_OR_BREAK: Final = re.compile(_INVISIBLE.pattern + "|[\r\n\x0b\x0c]")
# The characters either can start with, for a quick test: one character class scans fastest.
_HIDDEN_CHAR: Final = re.compile(
    "[\r\x00-\x08\x0e-\x1f\x7f-\x9f\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)
_HIDDEN_OR_BREAK_CHAR: Final = re.compile(_HIDDEN_CHAR.pattern[:-1] + "\n\x0b\x0c]")

_HEX_ESCAPE: Final = re.compile(r"\\u([0-9a-f]{4})")
_PERCENT_ESCAPE: Final = re.compile(r"%[0-9A-F]{2}")


def _base64_cores(data: bytes) -> set[str]:
    """The base64 text `data` turns into wherever it sits in a longer input.

    Base64 works on 3-byte groups, so the same bytes encode differently at
    each of the three offsets from the start of the input. For each offset
    this is the part of the encoding that depends on `data` alone, without the
    characters it shares with its unknown neighbours.
    """
    cores = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + data).decode("ascii")
        start = -(-offset * 8 // 6)  # the first character holding only bits of `data`
        end = (offset + len(data)) * 8 // 6  # past the last such character
        core = encoded[start:end]
        if len(core) >= _MIN_ENCODED_LEN:
            cores.add(core)
            cores.add(core.translate(str.maketrans("+/", "-_")))  # base64url
    return cores


def _encoded_forms(value: str) -> set[str]:
    """`value` and the forms it takes when a program escapes or encodes it."""
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
    data = value.encode("utf-8", "surrogatepass")
    hexed = binascii.hexlify(data).decode("ascii")
    if len(hexed) >= _MIN_ENCODED_LEN:
        forms.update((hexed, hexed.upper()))
    forms.update(_base64_cores(data))
    return forms


def _lines_around(text: str, hits: Iterable[re.Match[str]]) -> list[tuple[int, int]]:
    """The (start, end) of each line holding a hit, in order, each line once."""
    lines: list[tuple[int, int]] = []
    end = -1
    for hit in hits:
        if hit.start() < end:
            continue  # on the line already taken
        start = text.rfind("\n", 0, hit.start()) + 1
        end = text.find("\n", hit.end())
        if end == -1:
            end = len(text)
        lines.append((start, end))
    return lines


def _keyword_lines(text: str) -> list[tuple[int, int]]:
    lowered = text.lower()
    for keyword in _KEYWORD_TRIGGERS:  # plain substring tests settle most text faster than the regex
        if keyword in lowered:
            break
    else:
        return []
    if len(lowered) != len(text):  # a character whose lower case is longer: no position map
        return [(0, len(text))]
    return _lines_around(text, _KEYWORD_HITS.finditer(lowered))


def _url_lines(text: str) -> list[tuple[int, int]]:
    for trigger in _URL_TRIGGERS:
        if trigger in text:
            return _lines_around(text, _URL_HITS.finditer(text))
    return []


def _pattern_spans(text: str, offset: int = 0) -> list[tuple[int, int]]:
    """Where in `text` the credential patterns say to redact, as (start, end) pairs plus `offset`."""
    spans: list[tuple[int, int]] = []
    if "PRIVATE KEY" in text:
        spans += _family_spans(_PEM_FAMILY, text, [(0, len(text))], offset)
    lines = _url_lines(text)
    if lines:
        spans += _family_spans(_URL_FAMILY, text, lines, offset)
    lines = _keyword_lines(text)
    if lines:
        spans += _family_spans(_KEYWORD_FAMILY, text, lines, offset)
    first = _WORD.search(text)
    if first is not None:
        words = [m.span() for m in _WORD.finditer(text, first.start())]
        token_words = [(start, end) for start, end in words if _may_be_token(text, start, end)]
        if token_words:
            spans += _family_spans(_TOKEN_FAMILY, text, token_words, offset)
        long_words = [(start, end) for start, end in words if end - start >= _BASE64_MIN]
        if long_words:
            spans += _random_run_spans(text, long_words, offset)
    return spans


def _may_be_token(text: str, start: int, end: int) -> bool:
    if _TOKEN_RUN.search(text, start, end) is not None:
        return True
    word = text[start:end]
    return any(trigger in word for trigger in _TOKEN_TRIGGERS)


def _family_spans(
    family: _Pattern, text: str, windows: list[tuple[int, int]], offset: int
) -> list[tuple[int, int]]:
    """The redactions `family` asks for in `text`, searched within `windows` only."""
    spans: list[tuple[int, int]] = []
    pattern = family.re
    for window_start, window_end in windows:
        # Searching with pos/endpos, not on a slice: lookbehinds still see the text before.
        for match in pattern.finditer(text, window_start, window_end):
            user = match["uri_user"] if family is _URL_FAMILY else None
            if user is not None:
                # A token passed as the user goes too; the password always does.
                spans += _pattern_spans(user, offset + match.start("uri_user"))
                spans.append((offset + match.end("uri_user") + 1, offset + match.end()))
                continue
            start = match.start()
            for kept in _KEPT_GROUPS:
                if kept in pattern.groupindex:
                    end = match.end(kept)
                    if end != -1:
                        start = end
                        break
            spans.append((offset + start, offset + match.end()))
    return spans


def _random_run_spans(text: str, windows: list[tuple[int, int]], offset: int) -> list[tuple[int, int]]:
    """The `_BASE64_RUN` matches in `windows` that look random and are not public key material."""
    spans: list[tuple[int, int]] = []
    public: list[tuple[int, int]] | None = None
    matches = (m for start, end in windows for m in _BASE64_RUN.re.finditer(text, start, end))
    for match in matches:
        run = match[0]
        # Leading slashes, lower-case words and numbers are the URL or path the key sits in
        # ("//" + a token, "com/api/webhooks/123/" + a token), not key material.
        lead = _PATH_LEAD.match(run).end()  # type: ignore[union-attr]  # it matches "" at least
        if not _looks_random(run[lead:]):
            continue
        start, end = match.start() + lead, match.end()
        if public is None:
            public = [m.span() for m in _PUBLIC_KEY_MATERIAL.re.finditer(text)]
        if not any(p_start <= start and end <= p_end for p_start, p_end in public):
            spans.append((offset + start, offset + end))
    return spans


def _secret_spans(text: str, finder: re.Pattern[str]) -> list[tuple[int, int]]:
    """Every occurrence the registered-secret `finder` reports (the longest at each position)."""
    return [(m.start(), m.end(1)) for m in finder.finditer(text)]


def _has_hidden(text: str, quick: re.Pattern[str], hidden: re.Pattern[str]) -> bool:
    """Whether `hidden` occurs in `text`; `quick` is a character class of what it can start with."""
    # All of it is control or format characters, for which `isprintable` is False: a C-speed
    # answer for the common single line, then a one-class scan, then the real pattern.
    return not text.isprintable() and quick.search(text) is not None and hidden.search(text) is not None


def _index_map(text: str, hidden: re.Pattern[str]) -> list[int]:
    """For each character of `hidden.sub("", text)`, its index in `text`."""
    where: list[int] = []
    kept = 0
    for match in hidden.finditer(text):
        where.extend(range(kept, match.start()))
        kept = match.end()
    where.extend(range(kept, len(text)))
    return where


def _in_text(spans: list[tuple[int, int]], where: list[int]) -> list[tuple[int, int]]:
    """Spans found in a view, as spans of the text it came from (hidden characters inside included)."""
    return [(where[start], where[end - 1] + 1) for start, end in spans if end > start]


def _redact(text: str, spans: list[tuple[int, int]]) -> str:
    """Replace the union of `spans` with one redaction per merged span.

    Taking the union (rather than `re.sub`'s leftmost, non-overlapping matches)
    matters when two secrets overlap: "abcd1234" and "1234wxyz" in
    "abcd1234wxyz" would otherwise leave "wxyz" behind.
    """
    if not spans:
        return text
    spans.sort()
    pieces: list[str] = []
    copied = 0
    current_start, current_end = spans[0]
    for start, end in spans[1:]:
        if start < current_end:
            current_end = max(current_end, end)
            continue
        pieces += (text[copied:current_start], REDACTED)
        copied = current_end
        current_start, current_end = start, end
    pieces += (text[copied:current_start], REDACTED, text[current_end:])
    return "".join(pieces)


class Scrubber:
    """Replaces credentials in text with ``[REDACTED]``.

    One instance serves the whole daemon: register the secrets from the config
    with `add_secret` at start-up, then call `scrub` on everything that leaves.
    `scrub` is idempotent: scrubbing its result again changes nothing.
    """

    __slots__ = ("__weakref__", "_secret_res", "_secrets")

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
                text = _redact(text, _secret_spans(text, finder))
            if _has_hidden(text, _HIDDEN_OR_BREAK_CHAR, _INVISIBLE_OR_BREAK):
                # As a terminal shows it, lines joined; the index map is built only when a secret is there.
                view = _INVISIBLE_OR_BREAK.sub("", text)
                if detector.search(view) is not None:
                    spans = _secret_spans(view, finder)
                    text = _redact(text, _in_text(spans, _index_map(text, _INVISIBLE_OR_BREAK)))
        if _has_hidden(text, _HIDDEN_CHAR, _INVISIBLE):
            view = _INVISIBLE.sub("", text)
            spans = _pattern_spans(view)
            if spans:
                text = _redact(text, _in_text(spans, _index_map(text, _INVISIBLE)))
        else:
            spans = _pattern_spans(text)
            if spans:
                text = _redact(text, spans)
        return text
