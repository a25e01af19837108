# ruff: noqa: E501  (one sample a line reads better than wrapped expressions)
"""Realistic credentials of many formats, for the scrubbing tests.

Every value is made up: random characters (from a fixed seed) in the shape,
prefix and length of the real thing. Each sample is the secret in the setting
a person would find it in -- a config line, a CSV row, curl output -- chosen
so that the setting itself gives nothing away (no "api_key=" in front of a
token whose own shape must be recognised).
"""

from __future__ import annotations

import base64
import random
import string
from dataclasses import dataclass
from urllib.parse import quote

_rng = random.Random(20240610)

ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
HEX = "0123456789abcdef"
UPPER_DIGITS = string.ascii_uppercase + string.digits


def rand(n: int, alphabet: str = ALNUM) -> str:
    # Real keys have upper case, lower case and digits; so do these (fail the draw otherwise).
    while True:
        value = "".join(_rng.choice(alphabet) for _ in range(n))
        if (
            alphabet is not ALNUM
            or n < 12
            or (
                any(c.isupper() for c in value)
                and any(c.islower() for c in value)
                and any(c.isdigit() for c in value)
            )
        ):
            return value


def pem_body(lines: int) -> list[str]:
    body = [rand(64, B64) for _ in range(lines - 1)]
    return [*body, rand(20, B64) + "=="]


@dataclass(frozen=True)
class Sample:
    name: str
    text: str  # the file content as it would be found
    secrets: tuple[str, ...]  # what must not come out


def _s(name: str, text: str, *secrets: str) -> Sample:
    return Sample(name, text, secrets)


AWS_ID = "AKIA" + rand(16, UPPER_DIGITS)
AWS_SECRET = rand(40, B64)
RSA_BODY = pem_body(12)
PG_PASSWORD = rand(18)
SAS_SIG = quote(base64.b64encode(_rng.randbytes(32)).decode(), safe="")

CORPUS: list[Sample] = [
    _s("openai-project", f"model key for the lab: {(k := 'sk-proj-' + rand(48) + '_' + rand(56))}\n", k),
    _s("openai-legacy", f"old one {(k := 'sk-' + rand(48))} (revoked?)\n", k),
    _s("anthropic", f"claude: {(k := 'sk-ant-api03-' + rand(93, B64URL) + 'AA')}\n", k),
    _s("github-classic", f"deploy with {(k := 'ghp_' + rand(36))}\n", k),
    _s("github-oauth", f"gh auth status shows {(k := 'gho_' + rand(36))}\n", k),
    _s("github-fine-grained", f"{(k := 'github_pat_11' + rand(20, UPPER_DIGITS) + '_' + rand(59))}\n", k),
    _s("aws-access-key-id", f"id: {AWS_ID} region eu-west-1\n", AWS_ID),
    _s(
        "aws-credentials-csv",
        "User name,Password,Access key ID,Secret access key,Console login link\n"
        f"deploy,,{AWS_ID},{AWS_SECRET},https://123456789012.signin.aws.amazon.com/console\n",
        AWS_ID,
        AWS_SECRET,
    ),
    _s(
        "aws-credentials-file",
        f"[default]\naws_access_key_id = {AWS_ID}\naws_secret_access_key = {(k := rand(40, B64))}\n",
        k,
    ),
    _s("aws-session-token", f"aws_session_token = {(k := 'FwoGZXIvYXdzE' + rand(120, B64))}\n", k),
    _s("slack-bot", f"bot: {(k := 'xoxb-' + rand(12, HEX) + '-' + rand(13, HEX) + '-' + rand(24))}\n", k),
    _s(
        "slack-user",
        f"{(k := 'xoxp-' + '-'.join(rand(12, string.digits) for _ in range(3)) + '-' + rand(32, HEX))}\n",
        k,
    ),
    _s(
        "slack-app",
        f"socket mode {(k := 'xapp-1-A0' + rand(9, UPPER_DIGITS) + '-' + rand(13, string.digits) + '-' + rand(64, HEX))}\n",
        k,
    ),
    _s(
        "slack-webhook",
        f"alerts go to https://hooks.slack.com/services/{(k := 'T0' + rand(8, UPPER_DIGITS) + '/B0' + rand(8, UPPER_DIGITS) + '/' + rand(24))}\n",
        k,
    ),
    _s(
        "discord-webhook",
        f"notify: https://discord.com/api/webhooks/{rand(18, string.digits)}/{(k := rand(68, B64URL))}\n",
        k,
    ),
    _s(
        "discord-bot",
        f"bot {(k := 'MT' + rand(24, ALNUM) + '.' + rand(6, B64URL) + '.' + rand(38, B64URL))}\n",
        k,
    ),
    _s("google-api", f"maps: {(k := 'AIza' + rand(35, B64URL))}\n", k),
    _s("google-oauth-secret", f'"{(k := "GOCSPX-" + rand(28, B64URL))}"\n', k),
    _s("google-oauth-access", f"ya29 in cache: {(k := 'ya29.a0' + rand(150, B64URL))}\n", k),
    _s(
        "gcp-service-account",
        '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\n'
        + "\\n".join(body := pem_body(8))
        + '\\n-----END PRIVATE KEY-----\\n", "client_email": "x@p.iam.gserviceaccount.com"}\n',
        *body,
    ),
    _s("stripe-live", f"charge with {(k := 'sk_live_' + rand(99))}\n", k),
    _s("stripe-restricted", f"reporting: {(k := 'rk_live_' + rand(99))}\n", k),
    _s("stripe-test", f"{(k := 'sk_test_' + rand(24))}\n", k),
    _s("stripe-webhook", f"endpoint secret {(k := 'whsec_' + rand(32))}\n", k),
    _s("gitlab-pat", f"clone: {(k := 'glpat-' + rand(20, B64URL))}\n", k),
    _s("gitlab-runner", f"runner registered with {(k := 'glrt-' + rand(20, B64URL))}\n", k),
    _s("huggingface", f"hub: {(k := 'hf_' + rand(34))}\n", k),
    _s("sendgrid", f"mail via {(k := 'SG.' + rand(22, B64URL) + '.' + rand(43, B64URL))}\n", k),
    _s("npm", f"//registry.npmjs.org/:_authToken={(k := 'npm_' + rand(36))}\n", k),
    _s("npm-bare", f"publish as {(k := 'npm_' + rand(36))}\n", k),
    _s("pypi", f"upload: {(k := 'pypi-AgEIcHlwaS5vcmc' + rand(60, B64URL))}\n", k),
    _s("telegram-bot", f"bot {(k := rand(10, string.digits) + ':AA' + rand(33, B64URL))} polls\n", k),
    _s(
        "azure-storage",
        "DefaultEndpointsProtocol=https;AccountName=sensorlogs;"
        f"AccountKey={(k := base64.b64encode(_rng.randbytes(64)).decode())};EndpointSuffix=core.windows.net\n",
        k,
    ),
    _s(
        "azure-sas-url",
        "https://sensorlogs.blob.core.windows.net/raw/day.csv?sv=2022-11-02&ss=b&srt=o&sp=r"
        f"&se=2030-01-01T00:00:00Z&sig={SAS_SIG}\n",
        SAS_SIG,
    ),
    _s("db-pass", f"DB_HOST=10.0.0.5\nDB_USER=app\nDB_PASS={(k := rand(16))}\n", k),
    _s("db-pass-short-word", "DB_PASS=marigold\n", "marigold"),
    _s("mysql-pwd", f"export MYSQL_PWD={(k := rand(14))}\n", k),
    _s("postgres-uri", f"postgresql://app:{PG_PASSWORD}@db.local:5432/sensors\n", PG_PASSWORD),
    _s("netrc", f"machine api.example.com login bob password {(k := rand(16))}\n", k),
    _s("netrc-lines", f"machine api.example.com\n  login bob\n  password {(k := rand(16))}\n", k),
    _s(
        "pem-rsa",
        "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(RSA_BODY) + "\n-----END RSA PRIVATE KEY-----\n",
        *RSA_BODY,
    ),
    _s(
        "openssh",
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        + "\n".join(body := [rand(70, B64) for _ in range(6)])
        + "\n-----END OPENSSH PRIVATE KEY-----\n",
        *body,
    ),
    _s(
        "pgp",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n"
        + "\n".join(body := pem_body(5))
        + "\n-----END PGP PRIVATE KEY BLOCK-----\n",
        *body,
    ),
    _s(
        "jwt",
        f"session cookie {(k := 'eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.' + rand(60, B64URL) + '.' + rand(43, B64URL))}\n",
        k,
    ),
    _s(
        "basic-auth",
        f"> Authorization: Basic {(k := base64.b64encode(b'bob:' + rand(12).encode()).decode())}\n",
        k,
    ),
    _s("bearer-curl", f"> GET /v1/data HTTP/1.1\n> Authorization: Bearer {(k := rand(40, B64URL))}\n", k),
    _s("twilio", f"twilio {(k := 'SK' + rand(32, HEX))}\n", k),
    _s("mailgun", f"mailgun {(k := 'key-' + rand(32))}\n", k),
    _s("shopify", f"store: {(k := 'shpat_' + rand(32, HEX))}\n", k),
    _s("digitalocean", f"doctl {(k := 'dop_v1_' + rand(64, HEX))}\n", k),
    _s("databricks", f"workspace {(k := 'dapi' + rand(32, HEX))}\n", k),
    _s("vault", f"VAULT session {(k := 'hvs.' + rand(90, B64URL))}\n", k),
    _s("doppler", f"doppler {(k := 'dp.pt.' + rand(43))}\n", k),
    _s("tailscale", f"join with {(k := 'tskey-auth-k' + rand(10) + '-' + rand(32))}\n", k),
    _s("sentry", f"release {(k := 'sntrys_' + rand(120, B64))}\n", k),
    _s("atlassian", f"jira {(k := 'ATATT3xFfGF0' + rand(180, B64URL))}\n", k),
    _s("postman", f"collection {(k := 'PMAK-' + rand(24, HEX) + '-' + rand(34, HEX))}\n", k),
    _s("groq", f"llm2 {(k := 'gsk_' + rand(52))}\n", k),
    _s("replicate", f"model run {(k := 'r8_' + rand(37))}\n", k),
    _s("grafana", f"dashboards {(k := 'glsa_' + rand(32) + '_' + rand(8, HEX))}\n", k),
    _s("square", f"pos {(k := 'sq0csp-' + rand(43, B64URL))}\n", k),
    _s("linear", f"issues {(k := 'lin_api_' + rand(40))}\n", k),
    _s("notion", f"pages {(k := 'ntn_' + rand(46))}\n", k),
    _s("age", f"# backup key\n{(k := 'AGE-SECRET-KEY-1' + rand(58, UPPER_DIGITS))}\n", k),
    _s("wireguard", f"[Interface]\nPrivateKey = {(k := base64.b64encode(_rng.randbytes(32)).decode())}\n", k),
    _s("wpa-psk", f'network={{\n  ssid="greenhouse"\n  psk="{(k := rand(20))}"\n}}\n', k),
    _s("mqtt-uri", f"broker: mqtts://sensor:{(k := rand(16))}@broker.local:8883\n", k),
    _s("cloudflare-bare", f"zone token\n{(k := rand(40, B64URL))}\n", k),
]

# The same key read from the middle, as `read_file` with start_line shows it.
PEM_FILE = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(RSA_BODY) + "\n-----END PRIVATE KEY-----\n"
PEM_TAIL_FROM_LINE = 4  # read_file start_line: past the BEGIN line
