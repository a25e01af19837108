"""Ollama's own API (`kind = "ollama"`) against the scripted server speaking it: /api/chat with tools,
whole and streamed (JSON lines), /api/show for tool support, keep_alive, arguments as object or text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeclaw.agent.channel import InboundMessage
from edgeclaw.channels.console.channel import Endpoint, LlmProbe
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.errors import ConfigErrors
from tests.agent_support import Agents, provider_config
from tests.llm_server import Scripted, ScriptedLLM, ollama_stream, ollama_text, ollama_tools

WITH_TOOLS = {"capabilities": ["completion", "tools"], "model_info": {"general.architecture": "qwen2"}}
WITHOUT_TOOLS = {"capabilities": ["completion"], "model_info": {"general.architecture": "gemma"}}


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        server.show = WITH_TOOLS
        yield server


def config(tmp_path: Path, llm: ScriptedLLM, **provider):
    local = {"kind": "ollama", "model": "qwen2.5:1.5b", "base_url": llm.url, **provider}
    return provider_config(tmp_path, {"local": local}, provider_attempts=2)


@pytest.fixture
async def agent_for(tmp_path, llm):
    agents = Agents()

    def make(**provider):
        return agents.loop(config(tmp_path, llm, **provider))

    yield make
    await agents.aclose()


def msg(text: str) -> InboundMessage:
    return InboundMessage(channel="cli", text=text, chat_id="t1", peer_kind="local")


def workspace(agent) -> Path:
    return Path(agent.registry.get("write_file").ws.root)  # type: ignore[union-attr]


async def test_a_tool_round_trip_over_api_chat(llm, agent_for):
    llm.reply(
        ollama_tools(("write_file", {"path": "t.txt", "content": "21.5 C"})),  # an object, as Ollama sends
        ollama_tools(("read_file", json.dumps({"path": "t.txt"}))),  # a JSON string, as some models write
        ollama_text("It is 21.5 C."),
    )
    agent = agent_for(keep_alive="10m", max_tokens=300, stream=False, context_tokens=8192)
    reply = await agent.handle(msg("temperature?"))
    assert reply.ok and reply.text == "It is 21.5 C."
    assert llm.paths == ["/api/chat"] * 3
    first, _, last = llm.requests
    assert first["model"] == "qwen2.5:1.5b" and first["stream"] is False
    assert first["keep_alive"] == "10m" and first["options"]["num_predict"] == 300
    # The configured context is the one Ollama runs with (else its default, and a longer prompt is cut).
    assert first["options"]["num_ctx"] == 8192
    assert first["tools"][0]["type"] == "function" and "parameters" in first["tools"][0]["function"]
    calls = [m for m in last["messages"] if m.get("tool_calls")]
    # Arguments go back as objects (what /api/chat takes), results named by their tool.
    assert [c["tool_calls"][0]["function"]["arguments"] for c in calls] == [
        {"path": "t.txt", "content": "21.5 C"},
        {"path": "t.txt"},
    ]
    assert all(c["content"] == "" for c in calls)
    results = [m for m in last["messages"] if m["role"] == "tool"]
    assert [r["tool_name"] for r in results] == ["write_file", "read_file"] and "21.5 C" in results[1][
        "content"
    ]
    # /api/show is asked on the first request (capabilities, and the context size), not on every one.
    asked = len(llm.info_paths)
    assert asked and set(llm.info_paths) == {"/api/show"}
    llm.reply(ollama_text("again"))
    assert (await agent.handle(msg("and now?"))).text == "again" and len(llm.info_paths) == asked


async def test_a_streamed_answer_arrives_line_by_line(llm, agent_for):
    llm.reply(
        ollama_stream("", (("write_file", {"path": "s.txt", "content": "ok"}),)), ollama_stream("Stored it.")
    )
    agent = agent_for()
    pieces: list[str] = []
    provider = agent.chain.providers[0]
    completion = await provider.complete("", [], [], pieces.append)
    assert completion.tool_calls[0].name == "write_file" and not pieces
    completion = await provider.complete("", [], [], pieces.append)
    assert completion.text == "Stored it." and len(pieces) > 1 and "".join(pieces) == "Stored it."
    assert llm.requests[0]["stream"] is True and completion.usage.output_tokens == 5


async def test_an_answer_cut_at_the_token_limit_runs_no_tool(llm, agent_for):
    llm.reply(
        ollama_tools(("write_file", {"path": "cut.txt", "content": "x"}), done_reason="length"),
        ollama_text("Shorter then."),
    )
    agent = agent_for()
    assert (await agent.handle(msg("write"))).text == "Shorter then."
    assert not (workspace(agent) / "cut.txt").exists()
    assert "cut off at the token limit" in json.dumps(llm.requests[1]["messages"])


async def test_arguments_that_are_no_object_are_not_run_and_go_back_as_an_error_object(llm, agent_for):
    llm.reply(ollama_tools(("write_file", '{"path": "a.txt", "content": "cut')), ollama_text("Sorry."))
    agent = agent_for()
    assert (await agent.handle(msg("write"))).text == "Sorry."
    assert not (workspace(agent) / "a.txt").exists()
    (call,) = [m for m in llm.requests[1]["messages"] if m.get("tool_calls")]
    assert "invalid arguments" in call["tool_calls"][0]["function"]["arguments"]["error"]


async def test_a_model_without_tools_chats_plainly_and_says_so_once(llm, agent_for):
    llm.show = WITHOUT_TOOLS
    llm.reply(ollama_text("Hello!"))
    agent = agent_for()
    probe = LlmProbe(agent, [Endpoint("local", "qwen2.5:1.5b", llm.url)])
    banner = await probe()
    assert "reachable, takes no tools (plain chat and slash commands only)" in banner
    reply = await agent.handle(msg("hello"))
    assert reply.ok and reply.text == "Hello!"
    assert "tools" not in llm.requests[0]  # Ollama refuses tools sent to such a model (HTTP 400)
    status = (await agent.handle(msg("/status"))).text
    assert status.count("takes no tools") == 1
    assert (await agent.handle(msg("/call session_status {}"))).ok  # slash commands still work


async def test_a_server_that_refuses_tools_is_asked_again_without_them(llm, agent_for):
    llm.show = None  # and /api/show unanswered: nothing known until the chat says it
    llm.reply(Scripted(400, {"error": "registry.ollama.ai/library/gemma:2b does not support tools"}))
    llm.reply(ollama_text("Plain answer."))
    agent = agent_for()
    assert (await agent.handle(msg("hi"))).text == "Plain answer."
    assert "tools" in llm.requests[0] and "tools" not in llm.requests[1]
    llm.reply(ollama_text("Again plain."))
    assert (await agent.handle(msg("hi again"))).text == "Again plain."
    assert "tools" not in llm.requests[2] and len(llm.requests) == 3


async def test_an_older_server_without_capabilities_is_read_from_the_template(llm, agent_for):
    llm.show = {"template": "{{- if .Tools }}tools here{{ end }}{{ .Prompt }}"}
    llm.reply(ollama_text("ok"))
    agent = agent_for()
    assert (await agent.handle(msg("hi"))).text == "ok"
    assert llm.requests[0]["tools"]


async def test_an_error_line_in_the_stream_is_the_servers_words(llm, agent_for):
    broken = Scripted(
        chunks=[
            b'{"message":{"role":"assistant","content":"Hi"},"done":false}\n',
            b'{"error":"out of memory"}\n',
        ],
        content_type="application/x-ndjson",
    )
    llm.reply(broken, broken)
    agent = agent_for()
    reply = await agent.handle(msg("hi"))
    assert not reply.ok and "out of memory" in reply.text


def test_keep_alive_is_checked_and_only_for_ollama(tmp_path, llm):
    with pytest.raises(ConfigErrors, match="keep_alive"):
        config(tmp_path, llm, keep_alive="ten minutes")
    with pytest.raises(ConfigErrors, match='only a kind "ollama"'):
        config_from_dict({"providers": {"x": {"kind": "openai", "model": "m", "keep_alive": "5m"}}}, "t.toml")
    assert config(tmp_path, llm, keep_alive="-1").providers["local"].keep_alive == "-1"


async def test_keep_alive_minus_one_is_sent_as_a_number(llm, agent_for):
    llm.reply(ollama_text("ok"))
    agent = agent_for(keep_alive="-1")
    await agent.handle(msg("hi"))
    assert llm.requests[0]["keep_alive"] == -1  # Ollama reads "never unload" only as a number


async def test_an_ollama_provider_embeds_memory_through_api_embed(tmp_path, llm):
    from edgeclaw.daemon.memory_build import build_embedder
    from tests.llm_server import embed_text

    def with_memory(api: str):
        raw = {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            "providers": {"local": {"kind": "ollama", "model": "qwen2.5:1.5b", "base_url": llm.url}},
            "memory": {"embedder": "local", "embedding_model": "nomic-embed-text", "embedding_api": api},
        }
        return config_from_dict(raw, "test.toml")

    with pytest.raises(ConfigErrors, match='embedding_api = "ollama"'):
        with_memory("openai")  # Ollama's root has no /embeddings: the native endpoint is named
    runtime = build_runtime(with_memory("ollama"), environ={})
    try:
        embedder = build_embedder(
            runtime.config, runtime.secrets, runtime.registry.scrubber.scrub, runtime.on_close
        )
        assert embedder is not None and await embedder.embed(["fan speed"]) == [embed_text("fan speed")]
    finally:
        await runtime.aclose()
    assert llm.embed_paths == ["/api/embed"] and llm.embed_requests[0]["model"] == "nomic-embed-text"


async def test_num_predict_is_what_a_small_context_leaves_for_the_answer(llm, agent_for):
    """On a 2048-token context with max_tokens 1024 the answer's room is what the fitted prompt leaves:
    at least a quarter of the context, never past max_tokens, and with the prompt inside num_ctx."""
    from edgeclaw.agent.context_budget import Limits

    llm.reply(ollama_text("hi"))
    agent = agent_for(max_tokens=1024, stream=False, context_tokens=2048)
    assert (await agent.handle(msg("read the temperature"))).ok
    (body,) = llm.requests
    options = body["options"]
    assert options["num_ctx"] == 2048
    assert 2048 // 4 <= options["num_predict"] < 1024
    assert options["num_predict"] == 2048 - Limits(2048, 1024).margin - estimated(body)


def estimated(body: dict) -> int:
    """edgeclaw's own estimate of the request's prompt, from what went over the wire."""
    from edgeclaw.agent import context_budget

    messages = body["messages"]
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    rest = [m for m in messages if m is not messages[0]] if system else messages
    text = sum(context_budget.estimate_tokens(m["content"]) + context_budget.MESSAGE_OVERHEAD for m in rest)
    tools = context_budget.definitions_tokens(body.get("tools", []))
    return context_budget.estimate_tokens(system) + context_budget.MESSAGE_OVERHEAD + text + tools
