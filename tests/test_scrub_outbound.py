"""Everything that leaves is scrubbed, not only tool output: the model's chat replies, what goes to a
model provider (system prompt, history, tool calls), and the daemon's own secrets in their common
encodings. Against a real HTTP server on loopback and the real provider clients."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from urllib.parse import quote

import pytest

from edgeclaw.agent.channel import InboundMessage
from edgeclaw.agent.messages import Message, ToolCall
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.agent import build_agent
from edgeclaw.daemon.runtime import Runtime, build_runtime
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.scrub import REDACTED
from tests.llm_server import ScriptedLLM, anthropic_text, anthropic_tools, openai_text, openai_tools

# The daemon's own secrets: ordinary-looking values no credential pattern would catch, so only
# their registration can keep them in.
API_KEY = "local-llm-key-5fj2k-greenhouse"
OTHER_KEY = "fallback-model-key-ppq81-ok"
MQTT_PASSWORD = "marmot-lantern-07"
HMAC_KEY = "quiet-harbor-hmac-2024"
DAEMON_SECRETS = (API_KEY, OTHER_KEY, MQTT_PASSWORD, HMAC_KEY)
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc" * 2


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


def make_runtime(tmp_path: Path, llm: ScriptedLLM, kind: str = "openai") -> Runtime:
    base = llm.url + ("/v1" if kind == "openai" else "")
    config = config_from_dict(
        {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            "agent": {"providers": ["local"], "provider_attempts": 1},
            "providers": {
                "local": {"kind": kind, "model": "m", "base_url": base, "api_key_env": "LLM_KEY"},
                "spare": {"kind": "openai", "model": "m", "base_url": base, "api_key_env": "SPARE_KEY"},
            },
            "mqtt": {"password_env": "MQTT_PASSWORD", "hmac_secret_env": "MQTT_HMAC"},
        },
        str(tmp_path / "edgeclaw.toml"),
    )
    environ = {
        "LLM_KEY": API_KEY,
        "SPARE_KEY": OTHER_KEY,
        "MQTT_PASSWORD": MQTT_PASSWORD,
        "MQTT_HMAC": HMAC_KEY,
    }
    return build_runtime(config, environ=environ)


def msg(text: str) -> InboundMessage:
    return InboundMessage(channel="cli", text=text, chat_id="t", peer_kind="local", caller="cli:tester")


def leaked(text: str) -> list[str]:
    encodings = [
        form
        for secret in DAEMON_SECRETS
        for form in (secret, base64.b64encode(secret.encode()).decode(), secret.encode().hex())
    ]
    return [form for form in [*encodings, STRIPE] if form in text]


async def test_a_chat_reply_repeating_a_key_goes_out_redacted(tmp_path: Path, llm: ScriptedLLM) -> None:
    runtime = make_runtime(tmp_path, llm)
    agent = build_agent(runtime)
    llm.reply(openai_text(f"Your key is {API_KEY}, and the shop uses {STRIPE}."))
    try:
        reply = await agent.handle(msg("what keys do you know?"))
    finally:
        await runtime.aclose()
    assert reply.ok and reply.text.startswith("Your key is ")
    assert not leaked(reply.text) and reply.text.count(REDACTED) == 2


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_no_secret_of_the_daemon_leaves_in_a_provider_request(
    tmp_path: Path, llm: ScriptedLLM, kind: str
) -> None:
    runtime = make_runtime(tmp_path, llm, kind)
    ws = runtime.local.root
    # Context files with secrets in them, some encoded.
    (ws / "SOUL.md").write_text(
        f"Be terse. The broker password is {MQTT_PASSWORD}; signing key {HMAC_KEY}.\n"
        f"Backup key, base64: {base64.b64encode(OTHER_KEY.encode()).decode()}\n"
    )
    (ws / "USER.md").write_text(f"The user pays with {STRIPE}; hex {API_KEY.encode().hex()}.\n")
    # History from earlier turns: a model that said a key, a tool call carrying one.
    key = "cli:t"
    history = [
        Message("user", f"remember {quote(HMAC_KEY + '&x')}"),
        Message(
            "assistant", "", [ToolCall("c1", "write_file", json.dumps({"path": "k", "content": API_KEY}))]
        ),
        Message("tool", "wrote 29 bytes to k", tool_call_id="c1", name="write_file"),
        Message("assistant", f"Noted: {MQTT_PASSWORD}."),
    ]
    for m in history:
        runtime.sessions.append(key, "cli", m.to_json(), m.estimated_tokens())
    agent = build_agent(runtime)
    if kind == "openai":
        llm.reply(openai_tools(("read_file", {"path": "SOUL.md"})), openai_text("done"))
        auth = ("authorization", f"Bearer {API_KEY}")
    else:
        llm.reply(anthropic_tools(("read_file", {"path": "SOUL.md"})), anthropic_text("done"))
        auth = ("x-api-key", API_KEY)
    try:
        reply = await agent.handle(msg(f"my card is {STRIPE}, and the key {API_KEY}"))
        stored = json.dumps([m for _, m in runtime.sessions.load(key)])
    finally:
        await runtime.aclose()
    assert reply.ok and reply.text == "done"
    assert len(llm.requests) == 2
    for body, headers in zip(llm.requests, llm.headers, strict=True):
        sent = json.dumps(body, ensure_ascii=False)
        assert "Be terse." in sent and "remember" in sent  # the context and the history did go
        assert not leaked(sent), leaked(sent)
        assert headers[auth[0]] == auth[1]  # the key still goes where it belongs: its header
    # The session keeps what was said as it was (the store is not a channel; what leaves it is scrubbed).
    assert API_KEY in stored


async def test_a_provider_error_quoting_a_secret_is_scrubbed_in_the_reply_and_the_log(
    tmp_path: Path, llm: ScriptedLLM, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.llm_server import Scripted

    caplog.set_level(logging.INFO)
    runtime = make_runtime(tmp_path, llm)
    agent = build_agent(runtime)
    llm.reply(Scripted(400, {"error": f"bad request: hmac {HMAC_KEY} password {MQTT_PASSWORD}"}))
    try:
        reply = await agent.handle(msg("hi"))
        status = await agent.handle(msg("/status"))
    finally:
        await runtime.aclose()
    assert not reply.ok and "bad request" in reply.text
    assert not leaked(reply.text) and not leaked(status.text)
    assert "bad request" in caplog.text and not leaked(caplog.text)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("encode", "around"),
    [
        pytest.param(_b64, (b"", b""), id="base64"),
        pytest.param(_b64url, (b"", b""), id="base64url"),
        pytest.param(_b64, (b"x", b""), id="base64-offset-1"),
        pytest.param(_b64, (b"ab", b"\n"), id="base64-offset-2"),
        pytest.param(_b64, (b"ops:", b""), id="basic-auth-user-and-password"),
        pytest.param(lambda d: d.hex(), (b"", b""), id="hex"),
        pytest.param(lambda d: d.hex().upper(), (b"", b""), id="hex-upper"),
        pytest.param(lambda d: quote(d.decode(), safe=""), (b"", b""), id="url"),
    ],
)
async def test_the_daemons_secrets_are_found_encoded_in_tool_output(
    tmp_path: Path, llm: ScriptedLLM, encode, around: tuple[bytes, bytes]
) -> None:
    runtime = make_runtime(tmp_path, llm)
    before, after = around
    shown = encode(before + HMAC_KEY.encode() + after)
    (runtime.workspace / "dump.txt").write_text(f"value: {shown} end\n")
    try:
        out = await runtime.registry.execute("read_file", {"path": "dump.txt"}, ToolContext(channel="cli"))
    finally:
        await runtime.aclose()
    assert out.ok and "value: " in out.for_llm and " end" in out.for_llm
    left = out.for_llm.split("value: ")[1].split(" end")[0]
    assert REDACTED in left
    # What stays is the encoding of what was around it, a character each side and the padding at most.
    assert len(left.replace(REDACTED, "").rstrip("=")) <= 2 * (len(before) + len(after)) + 2, left
