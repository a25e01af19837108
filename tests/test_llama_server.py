"""edgeclaw against a real llama.cpp server: the requests it builds are ones the server accepts.

The server is the llama-server that `scripts/llama-server build` builds (scripts/test runs it), with
SmolLM2-135M-Instruct and a 2048-token context. Nothing here depends on what so small a model
decides: where a test needs a particular model reply (a tool call, a call cut off by the token
limit), the recording proxy in front of the server gives that one answer itself, and the requests
that follow -- which carry it in their history -- go to the real server, which must answer HTTP 200.
The five-turn conversation at the end asserts on what edgeclaw sent (the tools and history of each
request) and on the server's own count of the prompt, never on what the model said.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.agent.channel import InboundMessage
from edgeclaw.agent.loop import AgentLoop
from edgeclaw.agent.messages import Message, ToolCall
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.agent import build_agent
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.tools.base import ToolContext
from tests.llama_support import (
    CONTEXT,
    Canned,
    Exchange,
    LlamaServer,
    NotBuilt,
    RecordingProxy,
    check_built,
    llama_paths,
    tool_call,
)

MAX_TOKENS = 48  # answers stay short: the tests are about what the server accepts, not what it says


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    paths = llama_paths()
    try:
        check_built(paths)
    except NotBuilt as e:
        if e.impossible:
            pytest.skip(str(e))
        pytest.fail(str(e))
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    # Greedy decoding with a fixed seed: the tiny model's answers are the same on every run, so a
    # test whose point needs an answer of a few words (streaming) cannot meet a one-word one by chance.
    with LlamaServer(paths, log_path=log, extra=["--temp", "0", "--seed", "1"]) as server:
        yield server


@pytest.fixture
def proxy(llama: LlamaServer) -> Iterator[RecordingProxy]:
    with RecordingProxy(llama.url) as p:
        yield p


def provider_table(proxy: RecordingProxy) -> dict[str, Any]:
    return {
        "kind": "openai",
        "model": "smollm2-135m",
        "base_url": proxy.url + "/v1",
        "timeout_s": 600,
        "max_tokens": MAX_TOKENS,
    }


@pytest.fixture
async def agent(tmp_path: Path, proxy: RecordingProxy) -> AsyncIterator[AgentLoop]:
    """The daemon's agent loop with its real prompt and providers, a sim board, a few tools."""
    workspace = tmp_path / "state" / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "greenhouse.txt").write_text("temperature: 21.5 C\n")
    config = config_from_dict(
        {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            "agent": {"providers": ["local"], "provider_attempts": 1},
            "providers": {"local": provider_table(proxy)},
            # Whatever the context budget does with all tools, these tests are about the wire.
            "tools": {"providers": {"local": {"allow": ["read_file", "list_files", "session_status"]}}},
        },
        "test.toml",
    )
    runtime = build_runtime(config)
    try:
        yield build_agent(runtime)
    finally:
        await runtime.aclose()


def cli_message(text: str) -> InboundMessage:
    return InboundMessage("cli", text, chat_id="tester", sender="tester", caller="cli:tester")


def served(proxy: RecordingProxy) -> list[Exchange]:
    """The chat requests the real server answered (not the proxy's own answers)."""
    return [e for e in proxy.chats() if not e.canned]


def assert_accepted(proxy: RecordingProxy) -> None:
    chats = served(proxy)
    assert chats, "no request reached the server"
    refused = [(e.status, e.answer[:300]) for e in chats if e.status != 200]
    assert refused == []


def assert_valid_history(exchange: Exchange) -> None:
    """What makes servers refuse a history: a tool-call message without string content, arguments
    that are not a JSON object."""
    for m in exchange.body["messages"]:
        if m["role"] == "assistant" and m.get("tool_calls"):
            assert isinstance(m.get("content"), str), m
            for call in m["tool_calls"]:
                assert isinstance(json.loads(call["function"]["arguments"]), dict), call


# -- the wire: a made-up history through edgeclaw's own provider ---------------------------------


async def test_a_made_up_tool_history_sent_by_the_provider_is_accepted(agent, proxy):
    provider = agent.chain.providers[0]
    tools = agent.registry.definitions(ToolContext(channel="cli", provider="local"), provider.kind)
    history = [
        Message("user", "What is the temperature in the greenhouse?"),
        Message("assistant", "", [ToolCall("call_1", "read_file", '{"path": "greenhouse.txt"}')]),
        Message("tool", "temperature: 21.5 C\n", tool_call_id="call_1", name="read_file"),
        Message("assistant", "It is 21.5 °C."),
        Message("user", "And the files next to it?"),
        Message(
            "assistant",
            "Let me look.",
            [
                ToolCall("call_2", "list_files", '{"path": "."}'),
                ToolCall("call_3", "session_status", "{}"),
            ],
        ),
        Message("tool", "greenhouse.txt\n", tool_call_id="call_2", name="list_files"),
        Message(
            "tool", "error: not allowed here", tool_call_id="call_3", name="session_status", is_error=True
        ),
    ]
    completion = await provider.complete("You are a test assistant.", history, tools)
    assert_accepted(proxy)
    assert_valid_history(served(proxy)[-1])
    assert completion.text or completion.tool_calls


async def test_a_tool_round_trip_through_the_agent_is_accepted(agent, proxy):
    proxy.canned.append(
        Canned(
            {"content": None, "tool_calls": [tool_call("c1", "read_file", '{"path": "greenhouse.txt"}')]},
            "tool_calls",
        )
    )
    reply = await agent.handle(cli_message("What is the temperature in the greenhouse?"))
    assert reply.ok, reply.text
    assert_accepted(proxy)
    sent = served(proxy)[0].body["messages"]
    assert_valid_history(served(proxy)[0])
    assert any(m["role"] == "tool" and "21.5 C" in m["content"] for m in sent)


async def test_malformed_arguments_never_poison_the_session(agent, proxy):
    # A call cut off mid-object: llama-server refuses every later request whose history holds it.
    proxy.canned.append(
        Canned(
            {"content": "", "tool_calls": [tool_call("c1", "read_file", '{"path": "greenh')]}, "tool_calls"
        )
    )
    first = await agent.handle(cli_message("Read greenhouse.txt"))
    second = await agent.handle(cli_message("Thanks. Say hello."))
    assert first.ok and second.ok, (first.text, second.text)
    assert_accepted(proxy)
    for exchange in served(proxy):
        assert_valid_history(exchange)
    # The model is told its call was malformed; the tool did not run on a guess.
    results = [m for m in served(proxy)[0].body["messages"] if m["role"] == "tool"]
    assert results and "21.5" not in results[0]["content"]


async def test_an_answer_cut_off_by_the_token_limit_runs_no_tool_and_the_session_goes_on(agent, proxy):
    proxy.canned.append(
        Canned(
            {
                "content": "I will read the file and",
                "tool_calls": [tool_call("c1", "read_file", '{"path": "greenhouse.txt"}')],
            },
            "length",
        )
    )
    await agent.handle(cli_message("Read greenhouse.txt"))
    follow_up = await agent.handle(cli_message("Say hello."))
    assert follow_up.ok, follow_up.text
    assert_accepted(proxy)
    for exchange in served(proxy):
        assert_valid_history(exchange)
        assert not any(
            "21.5" in str(m.get("content")) for m in exchange.body["messages"] if m["role"] == "tool"
        )


# -- a person's view: edgeclaw chat with a 2048-token context ------------------------------------


def test_chat_hello_answers_with_a_2048_token_context(run_cli, state_env, proxy):
    """Every tool of the sim board is allowed: the request must still fit the server's context."""
    table = provider_table(proxy)
    lines = [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    Path(state_env["EDGECLAW_CONFIG"]).write_text(
        'board = "sim"\n[agent]\nproviders = ["local"]\nprovider_attempts = 1\n[providers.local]\n'
        + "\n".join(lines)
        + "\n"
    )
    out = run_cli("chat", "--message", "hello", timeout=600)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert out.stdout.strip()
    assert_accepted(proxy)
    for exchange in served(proxy):
        timings = exchange.timings
        prompt = int(timings.get("prompt_n", 0)) + int(timings.get("cache_n", 0))
        assert prompt > 0 and prompt + MAX_TOKENS <= CONTEXT, (timings, exchange.answer[-600:])


# -- streaming ---------------------------------------------------------------------------------


async def test_the_provider_streams_text_as_the_server_writes_it(agent, proxy):
    provider = agent.chain.providers[0]
    deltas: list[tuple[float, str]] = []
    completion = await provider.complete(
        "You are a test assistant.",
        [Message("user", "Count from one to twenty in words.")],
        [],
        on_text=lambda text: deltas.append((time.monotonic(), text)),
    )
    assert_accepted(proxy)
    assert served(proxy)[-1].streamed
    assert len(deltas) > 1
    assert "".join(text for _, text in deltas) == completion.text
    assert deltas[-1][0] > deltas[0][0]  # they came one by one, not all at the end


class Writes(io.StringIO):
    """A terminal that remembers each write and when it came."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[float, str]] = []

    def write(self, s: str) -> int:
        self.writes.append((time.monotonic(), s))
        return super().write(s)


async def test_edgeclaw_chat_prints_the_answer_as_it_streams_and_once(agent, proxy):
    from edgeclaw.channels.terminal import TerminalChannel

    out = Writes()
    terminal = TerminalChannel(agent, out=out, interactive=False)
    reply = await terminal.one_turn("Count from one to twenty in words.")
    assert reply.ok, reply.text
    assert_accepted(proxy)
    text_writes = [s for _, s in out.writes if s.strip()]
    assert len(text_writes) > 1  # deltas, not one print at the end
    printed = out.getvalue()
    assert printed.strip() == reply.text.strip()  # the final answer is not printed a second time


# -- the prompt cache --------------------------------------------------------------------------


async def test_the_second_turn_reuses_the_servers_prompt_cache(agent, proxy):
    await agent.handle(cli_message("hello"))
    await asyncio.sleep(1.1)  # the clock in the prompt moves on to the next second
    await agent.handle(cli_message("What can you do?"))
    assert_accepted(proxy)
    first, second = served(proxy)[0], served(proxy)[-1]
    first_prompt = int(first.timings["prompt_n"]) + int(first.timings.get("cache_n", 0))
    # The stable prefix (instructions, tool definitions) is most of the first prompt; the second
    # turn evaluates only what changed after it.
    assert second.cached_tokens >= first_prompt * 0.6, (first.timings, second.timings)


# -- a conversation on a 2048-token context --------------------------------------------------------

# Five turns of one conversation, each with the tools it needs (any one of them); the first turn's sensor
# call is the proxy's (so the history holds a tool round trip whatever the small model does), every
# other answer the server's.
CONVERSATION = [
    ("Read the temperature in the greenhouse.", {"sensor"}),
    ("And the humidity?", {"sensor"}),
    ("Is that too warm for tomatoes?", {"sensor"}),
    ("List the files in the workspace.", {"list_files"}),
    ("Read greenhouse.txt and tell me what it says.", {"read_file", "read_bytes"}),
]


async def test_a_five_turn_conversation_keeps_its_tools_and_history_in_2048_tokens(tmp_path, proxy):
    """Every tool of the sim board allowed and the default max_tokens (1024): each request of turns 2-5
    carries the tools its turn needs and the turn before it, and the prompt with the answer's room fits
    the server's context as the server counts it (its tokenizer, not edgeclaw's estimate)."""
    config = config_from_dict(
        {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            "agent": {"providers": ["local"], "provider_attempts": 1, "max_iterations": 3},
            "providers": {"local": {**provider_table(proxy), "max_tokens": 1024}},
        },
        "test.toml",
    )
    runtime = build_runtime(config)
    try:
        agent = build_agent(runtime)
        proxy.canned.append(
            Canned(
                {"content": "", "tool_calls": [tool_call("c1", "sensor", '{"action": "read"}')]}, "tool_calls"
            )
        )
        turns: list[list[Exchange]] = []
        for text, _ in CONVERSATION:
            before = len(proxy.chats())
            reply = await agent.handle(cli_message(text))
            assert reply.ok, reply.text
            turns.append(proxy.chats()[before:])
    finally:
        await runtime.aclose()
    assert_accepted(proxy)
    rows = []
    for number, exchanges in enumerate(turns, 1):
        for exchange in exchanges:
            timings = exchange.timings
            prompt = int(timings.get("prompt_n", 0)) + int(timings.get("cache_n", 0))
            sent = sorted(t["function"]["name"] for t in exchange.body.get("tools", ()))
            said = [m["content"] for m in exchange.body["messages"] if m["role"] == "user"]
            rows.append((number, exchange, prompt, sent, said))
    # With -s: the figures (before this budget, turn 2 went out with no tools and no history in ~500).
    print("\nturn\tprompt tokens (the server's count)\tmax_tokens\ttools\tmessages")
    for number, exchange, prompt, sent, _ in rows:
        print(
            number, prompt, exchange.body["max_tokens"], len(sent), len(exchange.body["messages"]), sep="\t"
        )
    for number, exchange, prompt, sent, said in rows:
        if number > 1:
            assert CONVERSATION[number - 1][1] & set(sent), (number, sent)
            assert said[-2:-1] == [CONVERSATION[number - 2][0]], (
                "the turn before it is in the history",
                said,
            )
        if not exchange.canned:
            assert prompt > 0 and prompt + exchange.body["max_tokens"] <= CONTEXT, (number, exchange.timings)
