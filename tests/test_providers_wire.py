"""What goes over the wire to a model server, and what is made of its answers: the requests local
servers accept (no null content, never invalid arguments), answers cut off at the token limit,
errors retried or not, streamed answers, and tool schemas every grammar builder takes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from edgeclaw.agent.channel import InboundMessage
from edgeclaw.agent.messages import Message, ToolCall
from edgeclaw.agent.providers.anthropic import AnthropicProvider
from edgeclaw.agent.providers.base import ProviderError
from edgeclaw.agent.providers.http import SharedClient
from edgeclaw.agent.providers.openai import OpenAIProvider
from edgeclaw.agent.tool_args import normalize
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.model_schema import MAX_BOUND
from tests.agent_support import Agents, provider_config
from tests.llm_server import (
    Scripted,
    ScriptedLLM,
    anthropic_stream,
    anthropic_text,
    anthropic_tools,
    openai_stream,
    openai_text,
    openai_tools,
)


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
async def agent_for(tmp_path):
    agents = Agents()

    def make(providers: dict, attempts: int = 2):
        return agents.loop(provider_config(tmp_path, providers, provider_attempts=attempts))

    yield make
    await agents.aclose()


@pytest.fixture
async def client():
    shared = SharedClient()
    yield shared
    await shared.aclose()


def openai_cfg(server: ScriptedLLM, **extra):
    return {"kind": "openai", "model": "m", "base_url": server.url + "/v1", **extra}


def anthropic_cfg(server: ScriptedLLM, **extra):
    return {"kind": "anthropic", "model": "c", "base_url": server.url, **extra}


def msg(text: str, chat: str = "t1") -> InboundMessage:
    return InboundMessage(channel="cli", text=text, chat_id=chat, peer_kind="local")


def workspace(agent) -> Path:
    return Path(agent.registry.get("write_file").ws.root)  # type: ignore[union-attr]


def assistant_calls(body: dict) -> list[dict]:
    return [m for m in body["messages"] if m["role"] == "assistant" and m.get("tool_calls")]


# -- tool-call messages: content "" -------------------------------------------------------------


async def test_a_tool_call_message_goes_back_with_empty_string_content(llm, agent_for):
    llm.reply(openai_tools(("session_status", {})), openai_text("done"))
    agent = agent_for({"local": openai_cfg(llm)})
    assert (await agent.handle(msg("status?"))).text == "done"
    (call_message,) = assistant_calls(llm.requests[1])
    assert call_message["content"] == ""  # null makes llama-cpp-python's server answer 500


# -- invalid arguments --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
async def test_invalid_arguments_are_not_run_and_never_go_back_invalid(llm, agent_for, fmt):
    cut = '{"path": "notes.txt", "content": "half a'
    if fmt == "openai":
        llm.reply(openai_tools(("write_file", cut)), openai_text("sorry"), openai_text("later"))
        agent = agent_for({"local": openai_cfg(llm)})
    else:  # a streamed Anthropic tool_use whose input JSON breaks off
        llm.reply(anthropic_stream(calls=(("write_file", cut),), stop_reason="tool_use"))
        llm.reply(anthropic_text("sorry"), anthropic_text("later"))
        agent = agent_for({"cloud": anthropic_cfg(llm)})
    assert (await agent.handle(msg("write it"))).text == "sorry"
    assert not (workspace(agent) / "notes.txt").exists()
    # Every later request of the session (not only the next) carries a JSON object as the arguments.
    assert (await agent.handle(msg("again"))).text == "later"
    for body in llm.requests[1:]:
        if fmt == "openai":
            (call,) = assistant_calls(body)
            arguments = json.loads(call["tool_calls"][0]["function"]["arguments"])
            result = next(m for m in body["messages"] if m["role"] == "tool")["content"]
        else:
            blocks = [b for m in body["messages"] for b in m["content"]]
            arguments = next(b for b in blocks if b["type"] == "tool_use")["input"]
            result = next(b for b in blocks if b["type"] == "tool_result")["content"]
        assert isinstance(arguments, dict) and "invalid arguments" in arguments["error"]
        assert "not run" in result and "not a JSON object" in result and "write_file" in result


async def test_arguments_a_model_wrapped_or_encoded_twice_are_repaired_and_run(llm, agent_for):
    fenced = '```json\n{"path": "a.txt", "content": "one"}\n```'
    twice = json.dumps(json.dumps({"path": "b.txt", "content": "two"}))
    llm.reply(openai_tools(("write_file", fenced), ("write_file", twice)), openai_text("written"))
    agent = agent_for({"local": openai_cfg(llm)})
    assert (await agent.handle(msg("write both"))).text == "written"
    assert (workspace(agent) / "a.txt").read_text() == "one"
    assert (workspace(agent) / "b.txt").read_text() == "two"
    sent = [c["function"]["arguments"] for c in assistant_calls(llm.requests[1])[0]["tool_calls"]]
    assert [json.loads(a)["path"] for a in sent] == ["a.txt", "b.txt"]


async def test_a_stored_history_with_invalid_arguments_is_sent_valid(llm, client):
    # A history written before arguments were checked (or edited by hand).
    history = [
        Message("user", "hi"),
        Message("assistant", "", [ToolCall("c1", "read_file", '{"path": "x')]),
        Message("tool", "error", tool_call_id="c1", name="read_file", is_error=True),
    ]
    llm.reply(openai_text("a"), anthropic_text("b"))
    await OpenAIProvider("o", client, model="m", base_url=llm.url).complete("", history, [])
    await AnthropicProvider("a", client, model="m", base_url=llm.url).complete("", history, [])
    arguments = llm.requests[0]["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert "invalid arguments" in json.loads(arguments)["error"]
    tool_use = llm.requests[1]["messages"][1]["content"][0]
    assert tool_use["type"] == "tool_use" and "invalid arguments" in tool_use["input"]["error"]


def test_normalize_keeps_valid_text_byte_exact_and_refuses_what_is_no_object():
    assert normalize('{"a":1}').text == '{"a":1}'  # unchanged: a server's prompt cache stays warm
    for raw in ('{"a": 1', "[1, 2]", '{"a": NaN}', '{"a": 1}{"b": 2}', '"just text"'):
        args = normalize(raw)
        assert args.problem and "invalid arguments" in json.loads(args.text)["error"]
    assert normalize('{"a": 1} and then I read it').text == '{"a": 1}'
    assert normalize("").text == "{}"


# -- cut off at the token limit -----------------------------------------------------------------


def _openai_cut_off(name: str, args: dict) -> Scripted:
    reply = openai_tools((name, args))
    reply.body["choices"][0]["finish_reason"] = "length"
    return reply


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
async def test_tool_calls_of_an_answer_cut_off_at_the_token_limit_are_not_run(llm, agent_for, fmt):
    args = {"path": "cut.txt", "content": "complete-looking"}
    if fmt == "openai":
        llm.reply(_openai_cut_off("write_file", args), openai_text("I will be brief"))
        agent = agent_for({"local": openai_cfg(llm)})
    else:
        cut = anthropic_tools(("write_file", args))
        cut.body["stop_reason"] = "max_tokens"
        llm.reply(cut, anthropic_text("I will be brief"))
        agent = agent_for({"cloud": anthropic_cfg(llm)})
    assert (await agent.handle(msg("write"))).text == "I will be brief"
    assert not (workspace(agent) / "cut.txt").exists()
    sent = json.dumps(llm.requests[1]["messages"])
    assert "cut off at the token limit" in sent


async def test_a_text_answer_cut_off_at_the_token_limit_says_so(llm, agent_for):
    cut = openai_text("The sensor reads 21")
    cut.body["choices"][0]["finish_reason"] = "length"
    llm.reply(cut)
    agent = agent_for({"local": openai_cfg(llm)})
    reply = await agent.handle(msg("read it"))
    assert reply.text.startswith("The sensor reads 21") and "cut off at the model's token limit" in reply.text


# -- errors: what is retried, what is kept ------------------------------------------------------


async def test_the_same_server_error_twice_is_not_retried_again_and_its_words_are_kept(llm, agent_for):
    refusal = {
        "error": {"code": 500, "message": "Value is not callable: null at row 1", "type": "server_error"}
    }
    llm.reply(*[Scripted(500, refusal)] * 4)
    agent = agent_for({"local": openai_cfg(llm)}, attempts=4)
    reply = await agent.handle(msg("hi"))
    assert not reply.ok and "Value is not callable: null at row 1" in reply.text
    assert len(llm.requests) == 2  # asked once more, then given up: the server refuses this request


async def test_a_server_error_that_changes_is_retried_up_to_the_attempts(llm, agent_for):
    llm.reply(Scripted(503, {"error": "loading model"}), Scripted(500, {"error": "oops"}), openai_text("up"))
    agent = agent_for({"local": openai_cfg(llm)}, attempts=3)
    assert (await agent.handle(msg("hi"))).text == "up"


async def test_a_4xx_is_not_retried_and_its_message_is_kept(llm, agent_for):
    too_big = {"error": {"code": 400, "message": "the request exceeds the available context size"}}
    llm.reply(Scripted(400, too_big), openai_text("never"))
    agent = agent_for({"local": openai_cfg(llm)}, attempts=3)
    reply = await agent.handle(msg("hi"))
    assert "exceeds the available context size" in reply.text and len(llm.requests) == 1


async def test_a_server_that_refuses_tools_for_the_model_is_asked_again_without_them(llm, agent_for):
    vllm = {"object": "error", "message": '"auto" tool choice requires --enable-auto-tool-choice and '
            "--tool-call-parser to be set", "type": "BadRequestError", "code": 400}  # fmt: skip
    llm.reply(Scripted(400, vllm), openai_text("plain"), openai_text("plain again"))
    agent = agent_for({"local": openai_cfg(llm)})
    assert (await agent.handle(msg("hi"))).text == "plain"
    assert "tools" in llm.requests[0] and "tools" not in llm.requests[1]
    assert (await agent.handle(msg("hi again"))).text == "plain again" and "tools" not in llm.requests[2]
    assert "takes no tools" in (await agent.handle(msg("/status"))).text


# -- streaming ----------------------------------------------------------------------------------


async def test_a_streamed_openai_answer_reaches_on_text_piece_by_piece(llm, client):
    llm.reply(openai_stream("The temperature is 21.5 C.", finish_reason="stop"))
    pieces: list[str] = []
    provider = OpenAIProvider("o", client, model="m", base_url=llm.url)
    completion = await provider.complete("", [Message("user", "t?")], [], pieces.append)
    assert len(pieces) > 3 and "".join(pieces) == completion.text == "The temperature is 21.5 C."
    assert llm.requests[0]["stream"] is True and completion.usage.input_tokens == 10


async def test_streamed_tool_calls_are_assembled_from_their_pieces(llm, client):
    args = {"bus": 1, "address": "0x48", "data": [1, 2, 3]}
    llm.reply(openai_stream("Reading.", (("i2c", args), ("gpio", {"pin": 4})), "tool_calls"))
    llm.reply(anthropic_stream("Reading.", (("i2c", args),), "tool_use"))
    completion = await OpenAIProvider("o", client, model="m", base_url=llm.url).complete("", [], [])
    assert [(c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [
        ("i2c", args),
        ("gpio", {"pin": 4}),
    ]
    assert completion.text == "Reading." and not completion.truncated
    completion = await AnthropicProvider("a", client, model="m", base_url=llm.url).complete("", [], [])
    assert [(c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [("i2c", args)]
    assert completion.tool_calls[0].id == "toolu_1" and completion.text == "Reading."


async def test_a_streamed_answer_cut_at_the_token_limit_is_marked_truncated(llm, client):
    llm.reply(openai_stream("", (("write_file", '{"path": "a", "content": "x'),), "length"))
    llm.reply(anthropic_stream("", (("write_file", '{"path": "a"'),), "max_tokens"))
    for cls in (OpenAIProvider, AnthropicProvider):
        completion = await cls("p", client, model="m", base_url=llm.url).complete("", [], [])
        assert completion.truncated and completion.tool_calls[0].problem


async def test_the_timeout_is_no_byte_for_n_seconds_not_the_whole_answer(llm, client):
    # Twenty-odd pieces 0.1 s apart: over 2 s in all, longer than the idle timeout, never idle for
    # more than a tenth of it (a busy machine can stretch a gap many times over and stay inside).
    text = "a steady trickle of tokens, each piece well inside the idle timeout."
    slow = openai_stream(text, finish_reason="stop")
    slow.chunk_gap_s = 0.1
    stalled = openai_stream("starts, then stalls", finish_reason="stop")
    stalled.stall_after = 3
    llm.reply(slow, stalled)
    provider = OpenAIProvider("o", client, model="m", base_url=llm.url, idle_timeout_s=1.2, timeout_s=120)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert (await provider.complete("", [], [])).text == text
    assert loop.time() - started > 1.2
    pieces: list[str] = []
    started = loop.time()
    with pytest.raises(ProviderError) as stall:
        await provider.complete("", [], [], pieces.append)
    # Given up 1.2 s after the last piece, not at the whole answer's 120 s.
    assert loop.time() - started < 60
    assert "nothing received for 1.2 s" in str(stall.value) and stall.value.retryable and pieces


async def test_the_whole_answer_still_has_a_ceiling(llm, client):
    slow = openai_stream("trickling for ever and ever", finish_reason="stop")
    slow.chunk_gap_s = 0.2
    llm.reply(slow)
    provider = OpenAIProvider("o", client, model="m", base_url=llm.url, idle_timeout_s=5, timeout_s=0.5)
    with pytest.raises(ProviderError, match=r"no complete answer within 0\.5 s"):
        await provider.complete("", [], [])


async def test_a_stream_that_breaks_off_or_reports_an_error_is_a_provider_error(llm, client):
    error_event = Scripted(
        chunks=[b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n',
                b'data: {"error":{"code":500,"message":"slot unavailable"}}\n\n'],
        content_type="text/event-stream",
    )  # fmt: skip
    llm.reply(openai_stream("no end", finish_reason=None), error_event)
    provider = OpenAIProvider("o", client, model="m", base_url=llm.url)
    with pytest.raises(ProviderError, match="stream ended before the answer did") as ended:
        await provider.complete("", [], [])
    assert ended.value.retryable
    with pytest.raises(ProviderError, match="slot unavailable"):
        await provider.complete("", [], [])


async def test_an_answer_that_breaks_off_mid_stream_starts_over_and_the_sink_is_told(llm, agent_for):
    class Sink:
        def __init__(self) -> None:
            self.shown: list[str] = []
            self.restarts = 0

        def __call__(self, text: str) -> None:
            self.shown.append(text)

        def restart(self) -> None:
            self.restarts += 1
            self.shown.clear()

    llm.reply(
        openai_stream("The fan is", finish_reason=None),
        openai_stream("The fan runs at 1200 rpm.", finish_reason="stop"),
    )
    agent = agent_for({"local": openai_cfg(llm)})
    sink = Sink()
    completion = await agent.chain.complete("", [Message("user", "fan?")], lambda *_: [], on_text=sink)
    assert completion.text == "The fan runs at 1200 rpm." and len(llm.requests) == 2
    assert sink.restarts == 1 and "".join(sink.shown) == completion.text


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
async def test_a_tool_round_trip_streamed_through_the_agent(llm, agent_for, fmt):
    llm.stream_replies = True  # every reply streamed in its wire's events
    if fmt == "openai":
        llm.reply(
            openai_tools(("write_file", {"path": "s.txt", "content": "21.5 C"})), openai_text("Stored.")
        )
        agent = agent_for({"local": openai_cfg(llm)})
    else:
        llm.reply(
            anthropic_tools(("write_file", {"path": "s.txt", "content": "21.5 C"})), anthropic_text("Stored.")
        )
        agent = agent_for({"cloud": anthropic_cfg(llm)})
    assert (await agent.handle(msg("store it"))).text == "Stored."
    assert (workspace(agent) / "s.txt").read_text() == "21.5 C"
    assert all(body["stream"] is True for body in llm.requests)


async def test_stream_false_asks_for_one_body_and_still_feeds_on_text(llm, client):
    llm.reply(openai_text("whole"))
    pieces: list[str] = []
    provider = OpenAIProvider("o", client, model="m", base_url=llm.url, stream=False)
    assert (await provider.complete("", [], [], pieces.append)).text == "whole"
    assert pieces == ["whole"] and "stream" not in llm.requests[0]


# -- tool schemas every grammar builder accepts -------------------------------------------------


def _walk(schema):
    yield schema
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, ()):
            yield from _walk(sub)
    for sub in (schema.get("properties") or {}).values():
        yield from _walk(sub)
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"])


async def test_definitions_sent_to_models_bound_nothing_beyond_256_and_calls_keep_the_real_limits(
    llm, agent_for
):
    agent = agent_for({"local": openai_cfg(llm)})
    ctx = ToolContext(channel="cli", peer_kind="local", session_key="cli:t")
    definitions = agent.registry.definitions(ctx, "openai")
    nodes = [n for d in definitions for n in _walk(d["function"]["parameters"])]
    for node in nodes:
        for key in ("maxItems", "maxLength", "minItems", "minLength"):
            assert node.get(key, 0) <= MAX_BOUND, (key, node)
        pattern = node.get("pattern")
        assert pattern is None or (pattern.startswith("^") and pattern.endswith("$") and "\\" not in pattern)
    # The bound left out is said in words, and the registry still enforces it.
    i2c = next(d["function"] for d in definitions if d["function"]["name"] == "i2c")
    assert "at most" in json.dumps(i2c["parameters"])
    real = agent.registry.get("memory_search").parameters["properties"]["query"]  # type: ignore[union-attr]
    assert real["maxLength"] > MAX_BOUND
    shown = next(d["function"] for d in definitions if d["function"]["name"] == "memory_search")
    assert "maxLength" not in shown["parameters"]["properties"]["query"]
    longer = "fan " * (MAX_BOUND // 2)  # over what a grammar would have counted, within the real limit
    outcome = await agent.registry.execute("memory_search", {"query": longer}, ctx, dry_run=True)
    assert outcome.ok, outcome.error
    too_long = "x" * (real["maxLength"] + 1)
    outcome = await agent.registry.execute("memory_search", {"query": too_long}, ctx, dry_run=True)
    assert not outcome.ok and "query" in (outcome.error or "")


async def test_a_kept_alive_connection_the_server_closed_is_not_a_failure(client):
    # llama-server closes the connection after a streamed answer without saying so: the next request
    # on it meets "Server disconnected without sending a response". It is sent again, on a new one.
    answer = json.dumps(openai_text("fine").body).encode()
    served: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = len(served)
        served.append(0)
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
            served[connection] += 1
            if connection == 0 and served[0] == 2:  # the second request on the first connection
                writer.close()
                return
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
            writer.write(b"content-length: %d\r\n\r\n%s" % (len(answer), answer))
            await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    provider = OpenAIProvider("o", client, model="m", base_url=f"http://127.0.0.1:{port}", stream=False)
    try:
        for _ in range(3):
            assert (await provider.complete("", [Message("user", "hi")], [])).text == "fine"
    finally:
        server.close()
    assert served[0] == 2 and len(served) == 2
