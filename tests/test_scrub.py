"""The scrubber: credentials out of tool output, ordinary board output left as it was.

Every credential below is fake, built from a repeating alphabet to the length
and prefix of the real thing.
"""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from edgeclaw.tools import scrub as scrub_module
from edgeclaw.tools.scrub import MIN_SECRET_LEN, REDACTED, Scrubber

R = REDACTED
_ALNUM = "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v2W3x4Y5z6"


def fake(length: int, alphabet: str = _ALNUM) -> str:
    """`length` characters of `alphabet`, repeated as needed."""
    return (alphabet * (length // len(alphabet) + 1))[:length]


OPENAI = "sk-" + fake(48)
OPENAI_PROJECT = "sk-proj-" + fake(40) + "_" + fake(20) + "-" + fake(60)
ANTHROPIC = "sk-ant-api03-" + fake(93) + "-" + fake(6) + "AA"
GITHUB_CLASSIC = {prefix: prefix + fake(36) for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")}
GITHUB_FINE_GRAINED = "github_pat_11" + fake(20, "ABCDEFGHIJ0123456789") + "_" + fake(59)
AWS_LONG_TERM = "AKIAIOSFODNN7EXAMPLE"
AWS_TEMPORARY = "ASIA" + fake(16, "Y3FMVB6FG2H7JK4P")
SLACK_BOT = "xoxb-123456789012-1234567890123-" + fake(24)
SLACK_USER = "xoxp-123456789012-123456789012-123456789012-" + fake(32, "0123456789abcdef")
GOOGLE = "AIza" + fake(35)
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
HEX = "0123456789abcdef"
GIT_SHA = fake(40, "3f9a1c07be")
SHA256 = fake(64, HEX)


def pem(kind: str, body_lines: int = 3) -> str:
    body = "\n".join(fake(64, _ALNUM + "+/") for _ in range(body_lines))
    return f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----"


@pytest.fixture
def scrubber() -> Scrubber:
    return Scrubber()


def case(text: str, expected: str, name: str) -> object:
    return pytest.param(text, expected, id=name)


# --- One test per pattern family ---------------------------------------------

PROVIDER_TOKENS = [
    case(f"using {OPENAI} now", f"using {R} now", "openai-legacy"),
    case(f"key {OPENAI_PROJECT}\n", f"key {R}\n", "openai-project"),
    case(f"ANTHROPIC={ANTHROPIC}", f"ANTHROPIC={R}", "anthropic"),
    *(
        case(f"remote uses {tok}.", f"remote uses {R}.", f"github-{tok[:3]}")
        for tok in GITHUB_CLASSIC.values()
    ),
    case(f"({GITHUB_FINE_GRAINED})", f"({R})", "github-fine-grained"),
    case(f"id {AWS_LONG_TERM} region eu-west-1", f"id {R} region eu-west-1", "aws-akia"),
    case(f"[{AWS_TEMPORARY}]", f"[{R}]", "aws-asia"),
    case(f"slack: {SLACK_BOT} ok", f"slack: {R} ok", "slack-bot"),
    case(f"{SLACK_USER}", R, "slack-user"),
    case(f"maps {GOOGLE} ok", f"maps {R} ok", "google"),
    case(f"cookie={JWT}; Path=/", f"cookie={R}; Path=/", "jwt"),
    case(f"curl -H 'X-Session: {JWT}'", f"curl -H 'X-Session: {R}'", "jwt-in-header"),
]


PEM_BLOCKS = [
    case(f"$ cat id_rsa\n{pem('RSA PRIVATE KEY')}\n$ ", f"$ cat id_rsa\n{R}\n$ ", "rsa"),
    case(pem("OPENSSH PRIVATE KEY"), R, "openssh"),
    case(f"{pem('PRIVATE KEY', 10)}\n", f"{R}\n", "pkcs8-long"),
    case(f"a\n{pem('ENCRYPTED PRIVATE KEY')}\nb", f"a\n{R}\nb", "encrypted"),
    case(f"{pem('EC PRIVATE KEY')}\nmid\n{pem('RSA PRIVATE KEY')}", f"{R}\nmid\n{R}", "two-blocks"),
    case(f"x {pem('PGP PRIVATE KEY BLOCK')} y", f"x {R} y", "pgp"),
    # Output cut off by `head`: half a key is still a key.
    case(
        "$ head -3 key.pem\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN\nBgkqhkiG9w0B",
        "$ head -3 key.pem\n" + R,
        "cut-short",
    ),
]


URIS = [
    case("mqtt://bob:hunter2@broker", f"mqtt://bob:{R}@broker", "mqtt"),
    case(
        "url=mqtts://bob:hunter2@broker.local:8883/x", f"url=mqtts://bob:{R}@broker.local:8883/x", "port-path"
    ),
    case("postgresql://admin:s3cr%40t@db:5432/app", f"postgresql://admin:{R}@db:5432/app", "percent-encoded"),
    case("redis://:pw1234@localhost:6379", f"redis://:{R}@localhost:6379", "no-user"),
    case("mqtt://bob:p@ss@broker", f"mqtt://bob:{R}@broker", "unescaped-at"),
    case('{"broker": "mqtt://bob:pw@host"}', f'{{"broker": "mqtt://bob:{R}@host"}}', "inside-json"),
    # A token passed as the user is a credential too.
    case(
        f"https://{GITHUB_CLASSIC['ghp_']}:x-oauth-basic@github.com/o/r.git",
        f"https://{R}:{R}@github.com/o/r.git",
        "token-as-user",
    ),
]


LONG_HEX = [
    case(f"session {fake(32, HEX)}", f"session {R}", "32"),
    case(f"commit {GIT_SHA}\nAuthor: bob", f"commit {R}\nAuthor: bob", "git-sha-fail-closed"),
    case(f"{SHA256}  firmware.bin", f"{R}  firmware.bin", "sha256-fail-closed"),
    case(f"KEY_{fake(48, HEX.upper())}", f"KEY_{R}", "upper-after-underscore"),
    case(f"hmac 0x{fake(64, HEX)}", f"hmac 0x{R}", "0x-prefix-kept"),
]


KEY_VALUES = [
    case("password=hunter2", f"password={R}", "password"),
    case('"api_key": "abc123"', f'"api_key": "{R}"', "json"),
    case('{"password":"p\\"w","user":"bob"}', f'{{"password":"{R}","user":"bob"}}', "json-escaped-quote"),
    case("Authorization: Bearer abc.def", f"Authorization: Bearer {R}", "authorization-bearer"),
    case("authorization: Basic dXNlcjpwYXNz\r\n", f"authorization: Basic {R}\r\n", "authorization-basic"),
    case('-H "Authorization: token abc123"', f'-H "Authorization: token {R}"', "authorization-in-curl"),
    case("APIKEY=abc", f"APIKEY={R}", "apikey"),
    case("x-api-key: abc", f"x-api-key: {R}", "api-key-header"),
    case("TOKEN: abc", f"TOKEN: {R}", "token"),
    case("?access_token=abc&expires=3600", f"?access_token={R}&expires=3600", "query-string"),
    case("secret = 'two words'", f"secret = '{R}'", "single-quoted"),
    case("client_secret: abc\nuser: bob", f"client_secret: {R}\nuser: bob", "yaml"),
    case("passwd: hunter2", f"passwd: {R}", "passwd"),
    case("pwd=hunter2", f"pwd={R}", "pwd"),
    case("bearer: abc", f"bearer: {R}", "bearer-key"),
    case("export MQTT_PASSWORD=hunter2", f"export MQTT_PASSWORD={R}", "env-compound"),
    case('mqtt.password = "hunter2"', f'mqtt.password = "{R}"', "toml-dotted"),
    case("mqttPassword: hunter2", f"mqttPassword: {R}", "camel-case"),
    case("aws_secret_access_key = wJalrXUtnFEMI", f"aws_secret_access_key = {R}", "aws-secret"),
    case('psk="wifi passphrase"', f'psk="{R}"', "wpa-supplicant"),
    case("if password == 'hunter2':", f"if password == '{R}':", "comparison"),
    case("f(token=abc, n=1)", f"f(token={R}, n=1)", "call-argument"),
    case("curl -H 'Bearer abcdefghijklmnop0123'", f"curl -H 'Bearer {R}'", "bare-bearer"),
    # A key=value in a path or file name: right after "/" too (only ":" after "/" is a path's own).
    case("/tmp/PASSWORD=hunter2abc/x", f"/tmp/PASSWORD={R}", "after-slash-in-path"),
    case("open failed: data/API_KEY=sk-abc123", f"open failed: data/API_KEY={R}", "after-slash-in-error"),
    case("rm: cannot remove 'w/token=abc': no", f"rm: cannot remove 'w/token={R}': no", "quoted-path"),
    case("cp /a/secret:=s3cr3t /b", f"cp /a/secret:={R} /b", "after-slash-colon-equals"),
]


ALL_FAMILIES = PROVIDER_TOKENS + PEM_BLOCKS + URIS + LONG_HEX + KEY_VALUES


@pytest.mark.parametrize(("text", "expected"), ALL_FAMILIES)
def test_each_family_is_scrubbed_and_scrubbing_twice_is_scrubbing_once(
    scrubber: Scrubber, text: str, expected: str
) -> None:
    once = scrubber.scrub(text)
    assert once == expected
    assert scrubber.scrub(once) == once


# --- Ordinary text -----------------------------------------------------------

I2CDETECT = """\
     0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f
00:                         -- -- -- -- -- -- -- --
10: -- -- -- -- -- -- -- -- -- -- -- -- -- -- -- --
40: -- -- -- -- -- -- -- -- 48 -- -- -- -- -- -- --
70: -- -- -- -- -- -- 76 --
"""
I2CDUMP = """\
     0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f    0123456789abcdef
00: 58 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00    X...............
d0: 60 00 0c 00 00 00 00 00 00 00 00 00 00 00 00 00    `.?.............
"""
REGISTERS = "GPFSEL0=0x24000000 GPLEV0=0x0040c1ff ctrl@0x3f200000: 0xdeadbeef 0x48 deadbeef cafe"
HEXDUMP = "00000000  7f 45 4c 46 02 01 01 00  00 00 00 00 00 00 00 00  |.ELF............|"

ORDINARY = [
    "The board has 4 cores and 512 MiB of RAM; the skill and the task ran fine.",
    "/home/user/sk-notes.txt",
    "task-scheduler-for-the-sensor-board and risk-assessment-notes-2024",
    "passwords are stored hashed",
    "Enter password:",
    'password = ""',
    "The token expired, ask for a new one.",
    "cat: /etc/passwd: Permission denied",
    "max_tokens: 1024, eos_token_id: 2, tokens_used=17",
    "Bearer of bad news",
    '{"temperature": 21.5, "humidity": 40.2, "status": "ok"}',
    I2CDETECT,
    I2CDUMP,
    REGISTERS,
    HEXDUMP,
    "uuid 123e4567-e89b-12d3-a456-426614174000, commit 3f9a1c0",
    "eth0: 00:1b:44:11:3a:b7 mtu 1500",
    "ssh://git@github.com:22/org/repo.git and https://example.com:8443/@user",
    "see https://docs.example.com/api?key_type=ed25519#anchor",
    pem("CERTIFICATE"),
    pem("PUBLIC KEY"),
    "already clean: password=[REDACTED] and mqtt://bob:[REDACTED]@broker",
    "",
    "Grüße aus Zürich, 温度 21 °C",
    # A secret's name in a path followed by ":" is the path, not a key: no value to take.
    "ls: cannot access 'data/password': No such file or directory",
    "/srv/token: is a directory",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_unchanged(scrubber: Scrubber, text: str) -> None:
    assert scrubber.scrub(text) == text


@pytest.mark.parametrize("text", [ORDINARY[0], ORDINARY[10], I2CDETECT, I2CDUMP, REGISTERS, HEXDUMP])
def test_common_output_skips_the_full_pattern(text: str) -> None:
    # The fast path is what keeps scrubbing inside the dispatch budget: no line worth a keyword or
    # URL scan, no word long enough to be a token.
    assert scrub_module._keyword_lines(text) == [] and scrub_module._url_lines(text) == []
    assert all(m.end() - m.start() < 20 for m in scrub_module._WORD.finditer(text))


# --- Registered secrets ------------------------------------------------------

ODD_SECRETS = [
    pytest.param(r"p@ss.w*rd+(x)?[y]{2}|z^$\1", id="regex-metacharacters"),
    pytest.param("pässwörd-秘密-🔑", id="unicode"),
    pytest.param("correct horse battery staple", id="spaces"),
    pytest.param("abc,def;ghi", id="pattern-delimiters"),
    pytest.param("line1\nline2", id="newline"),
    pytest.param("board", id="ordinary-word"),
    pytest.param("]starts-with-bracket", id="leading-bracket"),
    pytest.param("ends-with-bracket[", id="trailing-bracket"),
]


@pytest.mark.parametrize("secret", ODD_SECRETS)
@pytest.mark.parametrize(
    "template",
    ["{}", "before {} after", "x{}y", "token={} end", "mqtt://bob:{}@h", "{}{}", "[REDACTED]{}[REDACTED]"],
)
def test_registered_secret_is_always_removed(scrubber: Scrubber, secret: str, template: str) -> None:
    scrubber.add_secret(secret)
    out = scrubber.scrub(template.format(secret, secret))
    assert secret not in out
    assert R in out
    assert scrubber.scrub(out) == out


def test_registered_secret_replaced_in_place(scrubber: Scrubber) -> None:
    scrubber.add_secret("board")
    assert scrubber.scrub("the board's boards") == f"the {R}'s {R}s"


@pytest.mark.parametrize("order", ["short-first", "long-first"])
def test_secret_that_contains_another_goes_whole(scrubber: Scrubber, order: str) -> None:
    short, long = "hunter22", "hunter22-extended"
    for value in (short, long) if order == "short-first" else (long, short):
        scrubber.add_secret(value)
    assert scrubber.scrub(f"a {long} b {short} c") == f"a {R} b {R} c"


def test_overlapping_secrets_leave_no_tail(scrubber: Scrubber) -> None:
    scrubber.add_secret("abcd1234")
    scrubber.add_secret("1234wxyz")
    assert scrubber.scrub("<abcd1234wxyz>") == f"<{R}>"


def test_secret_cut_by_a_pattern_still_goes_whole(scrubber: Scrubber) -> None:
    # The key=value value stops at ",", which would leave ",def;ghi" visible.
    scrubber.add_secret("abc,def;ghi")
    assert scrubber.scrub("token=abc,def;ghi end") == f"token={R} end"


@pytest.mark.parametrize("value", ["", "a", "abc", "🔑🔑🔑"])
def test_short_values_are_ignored(scrubber: Scrubber, value: str) -> None:
    assert len(value) < MIN_SECRET_LEN
    scrubber.add_secret(value)
    text = f"x {value} y abc"
    assert scrubber.scrub(text) == text


def test_minimum_length_value_is_used(scrubber: Scrubber) -> None:
    scrubber.add_secret("abcd")
    assert scrubber.scrub("x abcd y") == f"x {R} y"


def test_adding_twice_is_harmless(scrubber: Scrubber) -> None:
    scrubber.add_secret("hunter2!")
    scrubber.add_secret("hunter2!")
    assert scrubber.scrub("pw hunter2! hunter2!") == f"pw {R} {R}"


def test_constructor_takes_secrets() -> None:
    scrubber = Scrubber(["first-secret", "ab", "second-secret"])
    assert scrubber.scrub("first-secret ab second-secret") == f"{R} ab {R}"


def test_secret_inside_the_marker_does_not_grow_it(scrubber: Scrubber) -> None:
    # A secret that happens to be part of "[REDACTED]" must not redact the
    # redaction again on every pass.
    scrubber.add_secret("DACT")
    once = scrubber.scrub("xDACTy and password=hunter2")
    assert once == f"x{R}y and password={R}"
    assert scrubber.scrub(once) == once


def test_redaction_exposing_a_hex_run(scrubber: Scrubber) -> None:
    # The hex run is not standalone until the secret before it is gone.
    scrubber.add_secret("mysecretvalue")
    assert scrubber.scrub(f"mysecretvalue{fake(32, HEX)}") == R * 2


ENCODED_SECRET = 'pa"ss\\wörd/&<1>+ =%'


@pytest.mark.parametrize(
    "shown",
    [
        pytest.param(json.dumps(ENCODED_SECRET), id="json-ascii"),
        pytest.param(json.dumps(ENCODED_SECRET, ensure_ascii=False), id="json-utf8"),
        pytest.param(json.dumps(ENCODED_SECRET).replace("/", "\\/"), id="json-escaped-slash"),
        pytest.param(
            json.dumps(ENCODED_SECRET)
            .replace("&", "\\u0026")
            .replace("<", "\\u003c")
            .replace(">", "\\u003e"),
            id="json-html-safe",
        ),
        pytest.param(json.dumps(ENCODED_SECRET).replace("\\u00f6", "\\u00F6"), id="json-capital-hex"),
        pytest.param(quote(ENCODED_SECRET, safe=""), id="url"),
        pytest.param(quote(ENCODED_SECRET), id="url-path"),
        pytest.param(quote_plus(ENCODED_SECRET), id="url-form"),
        pytest.param(quote(ENCODED_SECRET, safe="").lower(), id="url-lower-hex"),
    ],
)
def test_registered_secret_is_found_as_programs_escape_it(scrubber: Scrubber, shown: str) -> None:
    scrubber.add_secret(ENCODED_SECRET)
    out = scrubber.scrub(f'{{"password_hint": "none", "value": {shown}}}')
    assert shown.strip('"') not in out and R in out


@pytest.mark.parametrize("breaks", ["\n", "\r\n", "\n\n"])
def test_registered_secret_broken_across_lines_is_removed(scrubber: Scrubber, breaks: str) -> None:
    scrubber.add_secret("wrapped-secret-value")
    out = scrubber.scrub(f"$ fold -w 8 key\nwrapped-{breaks}secret-v{breaks}alue\ndone")
    assert out == f"$ fold -w 8 key\n{R}\ndone"
    assert scrubber.scrub(out) == out


# --- Properties --------------------------------------------------------------

FRAGMENTS = [
    "password",
    "Token",
    "api_key",
    "Authorization",
    "Bearer ",
    "=",
    ": ",
    '"',
    "'",
    " ",
    "\n",
    "[",
    "]",
    R,
    "://",
    "bob",
    ":",
    "@",
    "/",
    "_",
    "-",
    ".",
    "0x",
    "sk-",
    "ghp_",
    "AKIA",
    "xoxb-",
    "AIza",
    "eyJ",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    fake(20),
    fake(16, "ABCDEFGHIJKLMNOP0123"),
    fake(16, HEX),
    fake(40, HEX),
]
ALL_PATTERN_FAMILIES = (
    scrub_module._PEM_FAMILY,
    scrub_module._URL_FAMILY,
    scrub_module._KEYWORD_FAMILY,
    scrub_module._TOKEN_FAMILY,
)
fragmented_text = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)),
    max_size=16,
).map("".join)


@settings(max_examples=300)
@given(secret=st.text(min_size=MIN_SECRET_LEN, max_size=40), before=st.text(), after=st.text())
def test_registered_secret_never_survives(secret: str, before: str, after: str) -> None:
    # A secret that is itself part of "[REDACTED]" trivially appears in every redaction.
    assume(secret not in R)
    scrubber = Scrubber()
    scrubber.add_secret(secret)
    assert secret not in scrubber.scrub(before + secret + after)


@settings(max_examples=300)
@given(
    secrets=st.lists(st.text(min_size=MIN_SECRET_LEN, max_size=12), max_size=3),
    text=fragmented_text,
)
def test_idempotent(secrets: list[str], text: str) -> None:
    scrubber = Scrubber(secrets)
    once = scrubber.scrub(text)
    assert scrubber.scrub(once) == once
    for secret in secrets:
        assert secret in R or secret not in once


@settings(max_examples=500)
@given(text=st.one_of(fragmented_text, st.text()))
def test_prefilter_never_hides_a_match(text: str) -> None:
    # The patterns run only where the cheap scans say they can match: that must find exactly
    # what running every pattern over the whole text finds.
    whole = [(0, len(text))]
    expected = [
        span for family in ALL_PATTERN_FAMILIES for span in scrub_module._family_spans(family, text, whole, 0)
    ] + scrub_module._random_run_spans(text, whole, 0)
    assert sorted(scrub_module._pattern_spans(text)) == sorted(expected)
