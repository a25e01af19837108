"""Requests fitted to a small context: the model's size known (configured or asked from its server),
the request budgeted, and a relevant subset of the tools sent when they do not all fit.

The peer is a loopback server that refuses a prompt longer than its context, as llama-server does
(`ScriptedLLM.context_tokens`); it also answers llama.cpp's `/props` and Ollama's `/api/show`.
"""

from __future__ import annotations

import json
import logging

import pytest

from edgeclaw.agent import context_budget, tool_selection
from edgeclaw.agent.channel import InboundMessage
from edgeclaw.agent.messages import Message, ToolCall
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.agent import build_agent
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.errors import ConfigErrors
from tests.agent_support import Agents, provider_config
from tests.llm_server import Scripted, ScriptedLLM, openai_text, openai_tools, prompt_tokens

MAX_TOKENS = 512


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
async def agent_for(tmp_path):
    agents = Agents()

    def make(llm: ScriptedLLM, **provider):
        local = {"kind": "openai", "model": "smol", "base_url": llm.url + "/v1", "max_tokens": MAX_TOKENS}
        config = provider_config(tmp_path, {"local": {**local, **provider}}, provider_attempts=1)
        return agents.loop(config, fast_retry=False)

    yield make
    await agents.aclose()


def msg(text: str) -> InboundMessage:
    return InboundMessage(channel="cli", text=text, chat_id="t1", peer_kind="local")


def tool_names(body: dict) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", ())]


def all_tools(loop) -> list[dict]:
    return loop.registry.definitions(loop.context(msg("x")), "openai")


async def test_hello_fits_a_2048_token_context_with_room_for_the_answer(llm, agent_for):
    llm.context_tokens = 2048
    loop = agent_for(llm, context_tokens=2048)
    everything = all_tools(loop)
    # Sent whole, the tools alone overflow this server: the reason small models failed "hello".
    assert prompt_tokens({"tools": everything}) > 2048
    llm.reply(openai_text("Hello! How can I help?"))
    reply = await loop.handle(msg("hello"))
    assert reply.ok and reply.text == "Hello! How can I help?"
    (body,) = llm.requests
    assert prompt_tokens(body) + MAX_TOKENS <= 2048, "the answer has its room too"
    sent = tool_names(body)
    assert 0 < len(sent) < len(everything)
    assert body["messages"][0]["role"] == "system" and "edgeclaw" in body["messages"][0]["content"]
    # Compacted: one sentence a description.
    for tool in body["tools"]:
        assert tool["function"]["description"] == tool_selection.first_sentence(
            tool["function"]["description"]
        )


async def test_read_the_temperature_keeps_the_hardware_tools(llm, agent_for):
    llm.context_tokens = 2048
    loop = agent_for(llm, context_tokens=2048)
    llm.reply(openai_text("41.5 C"))
    assert (await loop.handle(msg("read the temperature"))).text == "41.5 C"
    sent = tool_names(llm.requests[0])
    assert "hardware_info" in sent  # the CPU temperature
    # With a little more room, the sensor behind I2C (the board profile names a TMP102) comes too.
    llm.context_tokens = None
    wide = agent_for(llm, context_tokens=4096)
    llm.reply(openai_text("22.0 C"))
    await wide.handle(msg("read the temperature"))
    assert {"hardware_info", "i2c"} <= set(tool_names(llm.requests[-1]))
    assert len(tool_names(llm.requests[-1])) < len(all_tools(wide))


async def test_tools_in_use_stay_in_the_subset(llm, agent_for):
    llm.context_tokens = 2048
    loop = agent_for(llm, context_tokens=2048)
    spi_read = {"bus": 0, "chip_select": 0, "data": [1, 128, 0]}
    llm.reply(
        openai_tools(("spi", spi_read)),  # a tool the words did not pick: the model calls it anyway
        openai_text("channel 0 reads 512"),
        openai_text("you're welcome"),
    )
    await loop.handle(msg("hello"))
    await loop.handle(msg("thanks"))
    first, after_call, next_turn = (tool_names(b) for b in llm.requests)
    assert "spi" not in first
    assert "spi" in after_call  # the call's own turn
    assert "spi" in next_turn  # the next turn: still in the recent history
    for body in llm.requests:
        assert prompt_tokens(body) + MAX_TOKENS <= 2048
    # "thanks" alone, in a fresh session, does not bring spi: it is there because it is in use.
    llm.reply(openai_text("any time"))
    await loop.handle(InboundMessage(channel="cli", text="thanks", chat_id="t2", peer_kind="local"))
    assert "spi" not in tool_names(llm.requests[-1])


async def test_the_context_size_is_read_from_llama_cpp_props(llm, agent_for, caplog):
    caplog.set_level(logging.INFO, "edgeclaw")
    llm.context_tokens = 2048
    llm.props = {"default_generation_settings": {"n_ctx": 2048}, "total_slots": 1}
    loop = agent_for(llm)  # no context_tokens: asked from the server
    llm.reply(openai_text("hi"), openai_text("hi again"))
    assert (await loop.handle(msg("hello"))).text == "hi"
    assert (await loop.handle(msg("hello"))).text == "hi again"
    assert llm.info_paths == ["/props"]  # asked once, then cached
    assert "local: context size 2048 tokens (from the server)" in caplog.text
    assert 0 < len(tool_names(llm.requests[0])) < len(all_tools(loop))


async def test_the_context_size_is_read_from_ollama_api_show(llm, agent_for, caplog):
    caplog.set_level(logging.INFO, "edgeclaw")
    llm.context_tokens = 3072
    llm.show = {
        "parameters": "stop <|im_end|>\nnum_ctx 3072",
        "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768},
    }
    loop = agent_for(llm)
    llm.reply(openai_text("hi"))
    assert (await loop.handle(msg("hello"))).text == "hi"
    assert llm.info_paths == ["/props", "/api/show"]
    assert "local: context size 3072 tokens (from the server)" in caplog.text
    assert 0 < len(tool_names(llm.requests[0])) < len(all_tools(loop))


async def test_a_server_that_does_not_say_gets_the_request_unfitted_and_is_asked_again_later(llm, agent_for):
    loop = agent_for(llm)
    llm.reply(openai_text("hi"), openai_text("hi"))
    assert (await loop.handle(msg("hello"))).text == "hi"
    assert len(tool_names(llm.requests[0])) == len(all_tools(loop))
    await loop.handle(msg("hello"))
    assert llm.info_paths == ["/props", "/api/show"]  # not asked on every turn


def test_ollama_context_is_what_it_runs_with_not_the_models_longest():
    from edgeclaw.agent.providers.model_info import OLLAMA_DEFAULT_CONTEXT, ollama_context

    assert (
        ollama_context({"parameters": "num_ctx 8192", "model_info": {"llama.context_length": 131072}}) == 8192
    )
    assert ollama_context({"model_info": {"llama.context_length": 131072}}) == OLLAMA_DEFAULT_CONTEXT
    assert ollama_context({"model_info": {"llama.context_length": 2048}}) == 2048
    assert ollama_context({"model_info": {}}) is None


def test_context_tokens_is_checked_by_the_loader():
    with pytest.raises(ConfigErrors, match="context_tokens"):
        config_from_dict(
            {"providers": {"p": {"kind": "openai", "model": "m", "context_tokens": -1}}}, "t.toml"
        )


def test_history_goes_oldest_first_and_the_newest_turn_always_stays():
    limits = context_budget.Limits(2048, 512)
    old = [Message("user", f"question {i} " + "x" * 900) for i in range(6)]
    messages = []
    for i, m in enumerate(old):
        messages += [m, Message("assistant", f"answer {i}")]
    messages.append(Message("user", "and the last one?"))
    fitted = context_budget.fit(limits, "system", messages, [])
    assert fitted.messages[-1].content == "and the last one?"
    kept = [m.content.split()[1] for m in fitted.messages if m.role == "user"][:-1]
    assert kept and kept == [str(i) for i in range(6)][-len(kept) :]  # the newest older turns
    assert fitted.turns_dropped == 6 - len(kept) > 0
    assert fitted.estimated_tokens <= limits.prompt_tokens


def test_a_huge_newest_turn_and_system_prompt_are_cut_rather_than_refused():
    limits = context_budget.Limits(2048, 512)
    call = ToolCall("c1", "read_file", '{"path": "log.txt"}')
    messages = [
        Message("user", "read log.txt"),
        Message("assistant", "", [call]),
        Message("tool", "line\n" * 20000, tool_call_id="c1", name="read_file"),
    ]
    fitted = context_budget.fit(limits, "S" * 50000, messages, [])
    assert fitted.estimated_tokens <= limits.prompt_tokens
    # No marker the model could repeat: a text without a sentence's end is cut where it must be.
    assert fitted.system.startswith("SSS") and set(fitted.system) == {"S"}
    assert "cut to fit the model's context" in fitted.messages[-1].content
    assert [m.role for m in fitted.messages] == ["user", "assistant", "tool"]


def test_tool_definition_tokens_for_the_bench(tmp_path):
    config = config_from_dict({"board": "sim", "state_dir": str(tmp_path / "s")}, "t.toml")
    runtime = build_runtime(config, environ={})
    try:
        from edgeclaw.tools.base import ToolContext

        defs = runtime.registry.definitions(ToolContext(channel="cli", peer_kind="local"), "openai")
        vocab = tool_selection.board_vocabulary(runtime.board)
        full, n_full = context_budget.tool_definition_tokens("hello", defs)
        limits = context_budget.Limits(2048, 1024)
        small, n_small = context_budget.tool_definition_tokens(
            "read the temperature", defs, limits, vocabulary=vocab
        )
        assert n_full == len(defs) and full > 2048
        # The answer keeps a quarter of the context (it gets more when the prompt leaves more).
        assert 0 < n_small < n_full and small < limits.prompt_tokens == 2048 - 512 - 134
        assert json.dumps(defs)  # the registry's definitions are still whole
    finally:
        import asyncio

        asyncio.run(runtime.aclose())


async def test_status_says_the_context_size_and_where_it_came_from(llm, agent_for):
    llm.props = {"default_generation_settings": {"n_ctx": 2048}}
    loop = agent_for(llm)
    llm.reply(openai_text("hi"))
    await loop.handle(msg("hello"))
    status = (await loop.handle(msg("/status"))).text
    assert "model local (openai, smol): ok; context 2048 tokens (from the server)" in status
    configured = agent_for(llm, context_tokens=4096)
    assert "context 4096 tokens (configured)" in (await configured.handle(msg("/status"))).text


async def test_each_provider_of_a_fallback_chain_gets_a_request_fitted_to_its_own_context(tmp_path):
    with ScriptedLLM() as small, ScriptedLLM() as big:
        small.reply(Scripted(503, {"error": "loading model"}))
        big.reply(openai_text("answered by the big one"))
        config = config_from_dict(
            {
                "board": "sim",
                "state_dir": str(tmp_path / "state"),
                "agent": {"providers": ["pi", "lan"], "provider_attempts": 1},
                "providers": {
                    "pi": {
                        "kind": "openai",
                        "model": "s",
                        "base_url": small.url + "/v1",
                        "context_tokens": 2048,
                    },
                    "lan": {
                        "kind": "openai",
                        "model": "b",
                        "base_url": big.url + "/v1",
                        "context_tokens": 32768,
                    },
                },
            },
            "test.toml",
        )
        runtime = build_runtime(config, environ={})
        try:
            loop = build_agent(runtime)
            reply = await loop.handle(msg("hello"))
            assert reply.text == "answered by the big one"
            everything = all_tools(loop)
            assert 0 < len(tool_names(small.requests[0])) < len(everything)
            assert len(tool_names(big.requests[0])) == len(everything)
            # The big one's request is the unfitted one: descriptions whole.
            assert big.requests[0]["tools"] == everything
        finally:
            await runtime.aclose()


async def test_an_ollama_provider_without_base_url_is_asked_at_ollamas_address(llm, monkeypatch):
    from edgeclaw.agent.providers import model_info
    from edgeclaw.agent.providers.http import SharedClient

    # Ollama's default address, here the loopback server's.
    monkeypatch.setattr(model_info, "OLLAMA_DEFAULT_URL", llm.url)
    llm.show = {"parameters": "num_ctx 4096"}
    client = SharedClient()
    try:
        info = model_info.ModelInfo(client.get)
        info.add(model_info.ProviderModel("o", "ollama", "qwen2.5:1.5b", "", answer_tokens=512))
        assert await info.context_tokens("o") == 4096
        assert llm.info_paths == ["/api/show"]  # kind "ollama": no llama.cpp /props first
    finally:
        await client.aclose()


def test_a_newest_turn_of_many_results_is_cut_result_by_result_and_the_fit_ends():
    limits = context_budget.Limits(2048, 512)
    calls = [ToolCall(f"c{i}", "read_file", f'{{"path": "f{i}"}}') for i in range(12)]
    messages = [Message("user", "read them all"), Message("assistant", "", calls)]
    messages += [
        Message("tool", f"{i}:" + "y" * 3000, tool_call_id=f"c{i}", name="read_file") for i in range(12)
    ]
    fitted = context_budget.fit(limits, "system", messages, [])
    assert fitted.estimated_tokens <= limits.prompt_tokens
    assert [m.tool_call_id for m in fitted.messages[2:]] == [f"c{i}" for i in range(12)]  # none lost
    assert all(m.content.startswith(f"{i}:") for i, m in enumerate(fitted.messages[2:]))
    # More results than even their first 200 characters fit: cut as far as that goes, and done.
    more_calls = [ToolCall(f"c{i}", "read_file", f'{{"path": "f{i}"}}') for i in range(120)]
    many = [Message("user", "more"), Message("assistant", "", more_calls)]
    many += [Message("tool", "z" * 400, tool_call_id=f"c{i}", name="read_file") for i in range(120)]
    crowded = context_budget.fit(limits, "system", many, [])
    assert len(crowded.messages) == len(many)
    assert all(len(m.content) < 400 for m in crowded.messages[2:])


# -- a small context spent well ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """The sim board's tool definitions, board vocabulary and system prompt, as the daemon builds them."""
    from edgeclaw.tools.base import ToolContext

    state = tmp_path_factory.mktemp("sim") / "state"
    local = {"kind": "openai", "model": "smol", "base_url": "http://127.0.0.1:9/v1"}
    config = config_from_dict(
        {"board": "sim", "state_dir": str(state), "providers": {"local": local}, "agent": {"providers": []}},
        "t.toml",
    )
    runtime = build_runtime(config, environ={})
    try:
        loop = build_agent(runtime)
        defs = runtime.registry.definitions(ToolContext(channel="cli", peer_kind="local"), "openai")
        yield defs, tool_selection.board_vocabulary(runtime.board), loop.prompt.build("main", "cli:t")
    finally:
        import asyncio

        asyncio.run(runtime.aclose())


def names(tools: list[dict]) -> set[str]:
    return {tool_selection.definition_parts(t)[0] for t in tools}


def first_turn() -> list[Message]:
    """A finished turn: asked, the sensor read, answered in a few sentences."""
    call = ToolCall("c1", "sensor", '{"action": "read", "name": "greenhouse"}')
    return [
        Message("user", "read the temperature in the greenhouse"),
        Message("assistant", "", [call]),
        Message("tool", '{"temperature_c": 21.5, "humidity_pct": 48.0}', tool_call_id="c1", name="sensor"),
        Message("assistant", "The greenhouse is at 21.5 C. " * 6),
    ]


@pytest.mark.parametrize("context", [2048, 1024])
def test_turn_two_keeps_its_tools_and_the_newest_history(sim, context):
    defs, vocab, system = sim
    limits = context_budget.Limits(context, 1024)
    messages = [*first_turn(), Message("user", "and the humidity?")]
    fitted = context_budget.fit(limits, system, messages, defs, vocab)
    assert "sensor" in names(fitted.tools), "a follow-up question keeps the tools of its conversation"
    assert fitted.messages == messages, "the turn before it is kept whole"
    assert fitted.estimated_tokens <= limits.prompt_tokens
    # The answer gets what the prompt leaves, up to max_tokens, and never less than its reserve.
    assert fitted.answer_tokens == min(1024, context - limits.margin - fitted.estimated_tokens)
    assert fitted.answer_tokens >= limits.answer_reserve == context // 4


@pytest.mark.parametrize("context", [2048, 1024])
def test_the_oldest_history_goes_first_and_the_tools_in_use_stay(sim, context):
    defs, vocab, system = sim
    limits = context_budget.Limits(context, 1024)
    messages: list[Message] = []
    for i in range(8):
        turn = first_turn()
        messages += [Message("user", f"question {i}: read the temperature"), *turn[1:]]
    messages.append(Message("user", "once more?"))
    fitted = context_budget.fit(limits, system, messages, defs, vocab)
    asked = [m.content.split(":")[0] for m in fitted.messages if m.role == "user"]
    assert asked[-1] == "once more?"
    kept = asked[:-1]
    assert kept == [f"question {i}" for i in range(8)][8 - len(kept) :], "the newest older turns, in order"
    assert fitted.turns_dropped == 8 - len(kept) > 0
    assert "sensor" in names(fitted.tools)
    assert fitted.estimated_tokens <= limits.prompt_tokens


def sections_prompt() -> str:
    soul = "Be calm. Answer in one sentence when you can. Name the tool you used. " * 13
    skills = "- gpio-output-check: Check that a GPIO output really switches. (skills/x/SKILL.md)\n" * 15
    brief = "## Subagent\nYou are subagent 7. Work with your tools, then end with your answer."
    return "\n\n".join(
        [
            "You are edgeclaw. You act through tools. Keep answers short.",
            "Device facts:\n- device: vm\n- board: sim",
            f"## SOUL.md\n{soul.strip()}",
            f"## Skills\n{skills.strip()}",
            brief,
        ]
    )


@pytest.mark.parametrize(("context", "dropped"), [(2048, ["Skills"]), (1024, ["Skills", "SOUL.md"])])
def test_the_system_prompt_loses_whole_sections_not_half_a_sentence(context, dropped):
    system = sections_prompt()
    limits = context_budget.Limits(context, 1024)
    fitted = context_budget.fit(limits, system, [Message("user", "hello")], [])
    assert fitted.sections_dropped == dropped
    assert fitted.cut == []
    # What is left is whole parts of the prompt, in order; the subagent's brief is always among them.
    parts = [p for p in system.split("\n\n") if not any(p.startswith(f"## {t}") for t in dropped)]
    assert fitted.system == "\n\n".join(parts)
    assert fitted.system.endswith("then end with your answer.")
    assert "[" not in fitted.system and "cut" not in fitted.system


def test_a_system_prompt_too_long_even_alone_ends_at_a_whole_sentence():
    system = "You are edgeclaw. " + "Check the wiring before you blame the software. " * 200
    fitted = context_budget.fit(context_budget.Limits(1024, 256), system, [Message("user", "hi")], [])
    assert fitted.cut == ["system prompt"]
    assert len(fitted.system) < len(system) and system.startswith(fitted.system)
    assert fitted.system.endswith("software.")
    assert fitted.estimated_tokens <= context_budget.Limits(1024, 256).prompt_tokens


async def test_max_tokens_is_sized_to_what_the_prompt_leaves(llm, agent_for):
    """The provider's max_tokens (1024 here) on a 2048 context: the answer gets what the prompt leaves,
    not half the context whatever the prompt."""
    llm.context_tokens = 2048
    loop = agent_for(llm, context_tokens=2048, max_tokens=1024)
    llm.reply(openai_text("hi"), openai_text("hi again"))
    await loop.handle(msg("hello"))
    await loop.handle(msg("and the humidity in the greenhouse?"))
    for body in llm.requests:
        assert 2048 // 4 <= body["max_tokens"] <= 1024
        assert prompt_tokens(body) + body["max_tokens"] <= 2048
    assert len(tool_names(llm.requests[1])) > 1, "the second turn has its tools"
    assert llm.requests[1]["messages"][1] == {"role": "user", "content": "hello"}, "and its history"


# -- a chat template that cannot take tools -------------------------------------------------------------

NO_TOOLS_PROPS = {
    "default_generation_settings": {"n_ctx": 4096},
    "chat_template_caps": {"supports_tools": False},
}


@pytest.mark.parametrize("configured", [0, 4096])
async def test_a_template_that_cannot_take_tools_is_sent_none_and_said_once(
    llm, agent_for, caplog, configured
):
    """llama-server drops the tools its template cannot render without a word: they are not sent, and
    the log (once, at first contact) and /status say why and what fixes it. With the context configured
    the server is still asked, once, for its template."""
    caplog.set_level(logging.INFO, "edgeclaw")
    llm.props = NO_TOOLS_PROPS
    loop = agent_for(llm, **({"context_tokens": configured} if configured else {}))
    llm.reply(openai_text("hi"), openai_text("hi again"))
    await loop.handle(msg("read the temperature"))
    await loop.handle(msg("and the humidity?"))
    assert [tool_names(body) for body in llm.requests] == [[], []]
    assert all("tool_choice" not in body for body in llm.requests)
    assert llm.info_paths == ["/props"]
    said = [r.getMessage() for r in caplog.records if "chat template cannot take" in r.getMessage()]
    assert len(said) == 1 and "--jinja" in said[0] and "--chat-template-file" in said[0]
    status = (await loop.handle(msg("/status"))).text
    line = next(x for x in status.splitlines() if x.startswith("  model local"))
    assert "tools unavailable: the server's chat template cannot take them" in line and "--jinja" in line
    # For the console's banner and doctor: the provider says it takes none, the note says why.
    assert await loop.chain.providers[0].probe_tools() is False
    assert "--jinja" in loop.model_info.tools_note("local")


async def test_a_template_that_takes_tools_gets_them(llm, agent_for):
    llm.props = {**NO_TOOLS_PROPS, "chat_template_caps": {"supports_tools": True}}
    loop = agent_for(llm)
    llm.reply(openai_text("hi"))
    await loop.handle(msg("read the temperature"))
    assert "sensor" in tool_names(llm.requests[0])
    assert loop.model_info.tools_note("local") == ""
    assert "tools unavailable" not in (await loop.handle(msg("/status"))).text


async def test_doctor_says_a_template_that_cannot_take_tools_and_the_context(llm, tmp_path):
    """doctor asks a reachable provider's server what the agent would ask: a template that cannot
    take tools is a warning with the fix; one that can is ok, with the context the server runs."""
    from edgeclaw.cli.doctor import provider_findings

    agents = Agents()
    local = {"kind": "openai", "model": "smol", "base_url": llm.url + "/v1", "max_tokens": MAX_TOKENS}
    runtime = agents.runtime(provider_config(tmp_path, {"local": local}))
    try:
        llm.props = NO_TOOLS_PROPS
        [finding] = await provider_findings(runtime)
        assert finding.level == "warn" and finding.check == "provider local", finding
        assert "tools unavailable" in finding.detail and "--jinja" in finding.detail
        assert "context 4096 tokens (from the server)" in finding.detail
        llm.props = {**NO_TOOLS_PROPS, "chat_template_caps": {"supports_tools": True}}
        [finding] = await provider_findings(runtime)
        assert finding.level == "ok" and "tools unavailable" not in finding.detail, finding
    finally:
        await agents.aclose()


def test_template_note_for_doctor():
    from edgeclaw.agent.providers.model_info import template_note

    assert "--jinja" in template_note(NO_TOOLS_PROPS)
    assert template_note({"chat_template_caps": {"supports_tools": True}}) == ""
    assert template_note({"default_generation_settings": {"n_ctx": 2048}}) == ""  # an older server: not said


def test_the_turn_a_follow_up_answers_is_shortened_rather_than_left_out(sim):
    """A sensor read-out of numbers (a token a character) and a long answer in the turn before: it is
    kept, shortened (the answer to a whole sentence, the result saying it was cut), not dropped."""
    defs, vocab, system = sim
    limits = context_budget.Limits(2048, 1024)
    call = ToolCall("c1", "sensor", '{"action": "read"}')
    readout = "\n".join(
        f"device {i}: temperature {20 + i / 10:.2f} C, humidity {40 + i:.2f} %" for i in range(40)
    )
    before = [
        Message("user", "read every sensor"),
        Message("assistant", "", [call]),
        Message("tool", readout, tool_call_id="c1", name="sensor"),
        Message("assistant", "All forty devices answered. " * 80),
    ]
    messages = [Message("user", "an old question"), Message("assistant", "An old answer. " * 40), *before]
    messages.append(Message("user", "and the humidity?"))
    fitted = context_budget.fit(limits, system, messages, defs, vocab)
    assert fitted.turns_dropped == 1 and fitted.messages[0].content == "read every sensor"
    assert [m.role for m in fitted.messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert "cut to fit the model's context" in fitted.messages[2].content
    assert fitted.messages[3].content.endswith("answered.") and len(fitted.messages[3].content) < 80 * 28
    assert "sensor" in names(fitted.tools)
    assert fitted.estimated_tokens <= limits.prompt_tokens
