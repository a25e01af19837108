"""The prompt's layout for caches: what stays the same from turn to turn first, what changes last.

A server's prompt cache (llama.cpp's; Anthropic's prompt caching) reuses the longest prefix a request
shares with the one before it. These tests check the requests edgeclaw really sends to a server on
loopback: the system prompt and the tool definitions are the same bytes on every turn, the time
rides on the newest user message after them, and Anthropic requests mark that prefix for caching.
"""

from __future__ import annotations

import json
import time

import pytest

from edgeclaw.agent.channel import InboundMessage
from tests.agent_support import TEST_KEY, Agents, provider_config
from tests.llm_server import ScriptedLLM, anthropic_text, anthropic_tools, openai_text, openai_tools

T1 = time.mktime((2026, 3, 1, 9, 15, 7, 0, 0, -1))
T2 = T1 + 61


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
async def agent_for(tmp_path):
    agents = Agents(environ={"LLM_KEY": TEST_KEY})

    def make(provider: dict):
        loop = agents.loop(provider_config(tmp_path, {"m": provider}), fast_retry=False)
        clock = iter([T1, T2, T2 + 60, T2 + 120])
        loop.prompt.clock = lambda: next(clock)
        return loop

    yield make
    await agents.aclose()


def msg(text: str) -> InboundMessage:
    return InboundMessage(channel="cli", text=text, chat_id="t1", peer_kind="local")


def stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def canonical(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


async def test_stable_prefix_is_the_same_bytes_on_the_next_turn_and_the_time_comes_after_it(llm, agent_for):
    loop = agent_for({"kind": "openai", "model": "m", "base_url": llm.url + "/v1", "api_key_env": "LLM_KEY"})
    llm.reply(openai_text("hi"), openai_text("still here"))
    assert (await loop.handle(msg("hello"))).text == "hi"
    assert (await loop.handle(msg("are you there?"))).text == "still here"
    first, second = llm.requests
    # The system message and the tool block: byte for byte the same on both turns.
    assert canonical(first["messages"][0]) == canonical(second["messages"][0])
    assert canonical(first["tools"]) == canonical(second["tools"])
    assert first["tools"], "the tools are part of the stable prefix"
    system = first["messages"][0]["content"]
    for t in (T1, T2):
        assert stamp(t) not in system
        assert stamp(t)[:10] not in second["messages"][0]["content"]
    # The time rides at the end of the newest user message, after the stable parts and the history.
    assert first["messages"][-1] == {"role": "user", "content": f"hello\n\n[current time (UTC): {stamp(T1)}]"}
    assert second["messages"][-1]["content"].endswith(stamp(T2) + "]")
    assert second["messages"][-1]["content"].startswith("are you there?")
    # Earlier turns go back as the person wrote them: no old time stamps pile up in the history.
    assert second["messages"][1] == {"role": "user", "content": "hello"}
    # What /sessions_history and the store keep is the person's words only.
    rows = [json.loads(body) for _, body in loop.sessions.load("cli:t1")]
    assert [r["content"] for r in rows if r["role"] == "user"] == ["hello", "are you there?"]


async def test_within_a_turn_each_request_extends_the_one_before(llm, agent_for):
    """A tool round trip: the second request starts with every byte of the first (a full cache hit)."""
    loop = agent_for({"kind": "openai", "model": "m", "base_url": llm.url + "/v1", "api_key_env": "LLM_KEY"})
    llm.reply(openai_tools(("hardware_info", {})), openai_text("it is a sim board"))
    assert (await loop.handle(msg("what board is this?"))).text == "it is a sim board"
    first, second = llm.requests
    assert canonical(second["tools"]) == canonical(first["tools"])
    n = len(first["messages"])
    assert canonical(second["messages"][:n]) == canonical(first["messages"])
    assert [m["role"] for m in second["messages"][n:]] == ["assistant", "tool"]


async def test_anthropic_requests_mark_the_system_prompt_and_the_tools_as_cache_points(llm, agent_for):
    loop = agent_for({"kind": "anthropic", "model": "m", "base_url": llm.url, "api_key_env": "LLM_KEY"})
    llm.reply(anthropic_tools(("hardware_info", {})), anthropic_text("sim"), anthropic_text("again"))
    assert (await loop.handle(msg("what board?"))).text == "sim"
    assert (await loop.handle(msg("and now?"))).text == "again"
    first, second, third = llm.requests
    for body in (first, second, third):
        (block,) = body["system"]
        assert block["type"] == "text" and block["cache_control"] == {"type": "ephemeral"}
        assert "edgeclaw" in block["text"] and stamp(T1) not in block["text"]
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        # One mark at the end of the tool block: the others stay as the registry defines them.
        assert all("cache_control" not in t for t in body["tools"][:-1])
    # The cached prefix (tools, then system) is the same bytes on the next turn.
    assert canonical([first["tools"], first["system"]]) == canonical([third["tools"], third["system"]])
    # The registry's shared definitions were not changed by the marking.
    ctx = loop.context(msg("x"))
    assert all("cache_control" not in d for d in loop.registry.definitions(ctx, "anthropic"))
    # The time is at the end of the newest user turn's text.
    last = third["messages"][-1]
    assert last["role"] == "user"
    assert last["content"][-1]["text"].endswith(stamp(T2) + "]")
