"""The agent loop against a scripted LLM server on loopback, through the real provider clients."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

from edgeclaw.agent.channel import InboundMessage
from edgeclaw.agent.history import trim
from edgeclaw.agent.messages import Message, ToolCall
from edgeclaw.daemon.agent import build_agent
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.errors import BackendError
from edgeclaw.tools.base import Tool
from tests.agent_support import TEST_KEY, Agents, provider_config
from tests.llm_server import (
    Scripted,
    ScriptedLLM,
    anthropic_text,
    anthropic_tools,
    openai_text,
    openai_tools,
    user_texts,
    without_note,
)


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
def second_llm():
    with ScriptedLLM() as server:
        yield server


def agent_config(tmp_path: Path, providers: dict, order: list[str], **agent):
    return provider_config(tmp_path, providers, providers=order, provider_attempts=2, **agent)


def make_runtime(tmp_path: Path, providers: dict, order: list[str], **agent):
    return build_runtime(agent_config(tmp_path, providers, order, **agent), environ={"LLM_KEY": TEST_KEY})


@pytest.fixture
async def agent_for(tmp_path):
    agents = Agents(environ={"LLM_KEY": TEST_KEY})

    def make(providers: dict, order: list[str], **agent):
        return agents.loop(agent_config(tmp_path, providers, order, **agent))

    yield make
    await agents.aclose()


def openai_cfg(server: ScriptedLLM, **extra):
    return {"kind": "openai", "model": "m", "base_url": server.url + "/v1", "api_key_env": "LLM_KEY", **extra}


def msg(text: str, chat: str = "t1") -> InboundMessage:
    return InboundMessage(channel="cli", text=text, chat_id=chat, peer_kind="local")


async def test_tool_call_then_final_answer(llm, agent_for, tmp_path):
    llm.reply(
        openai_tools(("write_file", {"path": "t.txt", "content": "21.5 C"})),
        openai_tools(("read_file", {"path": "t.txt"})),
        openai_text("It is 21.5 C."),
    )
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    reply = await agent.handle(msg("what is the temperature?"))
    assert reply.ok and reply.text == "It is 21.5 C."
    # The second request carried the first tool's result; the third the file's content.
    tool_msgs = [m for m in llm.requests[2]["messages"] if m["role"] == "tool"]
    assert "21.5 C" in tool_msgs[-1]["content"]
    assert llm.requests[0]["tools"] and llm.requests[0]["tool_choice"] == "auto"
    assert llm.headers[0]["authorization"] == "Bearer sk-test-key-0123456789abcdefghij"
    assert llm.paths[0] == "/v1/chat/completions"
    assert "embedded Linux board" in llm.requests[0]["messages"][0]["content"]


async def test_several_tool_calls_in_one_reply_run_in_order(llm, agent_for, tmp_path):
    llm.reply(
        openai_tools(
            ("file_append", {"path": "log", "content": "a"}), ("file_append", {"path": "log", "content": "b"})
        ),
        openai_text("done"),
    )
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    assert (await agent.handle(msg("go"))).text == "done"
    assert (tmp_path / "state" / "workspace" / "log").read_text() == "ab"
    results = [m for m in llm.requests[1]["messages"] if m["role"] == "tool"]
    assert [r["tool_call_id"] for r in results] == ["call_0", "call_1"]


async def test_unknown_tool_and_bad_arguments_become_error_results(llm, agent_for):
    llm.reply(
        openai_tools(("launch_rocket", {}), ("read_file", '{"path": '), ("read_file", {"path": 7})),
        openai_text("recovered"),
    )
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    reply = await agent.handle(msg("try"))
    assert reply.ok and reply.text == "recovered"
    results = [m["content"] for m in llm.requests[1]["messages"] if m["role"] == "tool"]
    assert "unknown tool 'launch_rocket'" in results[0]
    assert "not valid JSON" in results[1]
    assert "'path'" in results[2]


async def test_anthropic_wire_protocol(llm, agent_for):
    llm.reply(anthropic_tools(("session_status", {}), text="checking"), anthropic_text("all good"))
    agent = agent_for(
        {"cloud": {"kind": "anthropic", "model": "c", "base_url": llm.url, "api_key_env": "LLM_KEY"}},
        ["cloud"],
    )
    reply = await agent.handle(msg("status?"))
    assert reply.ok and reply.text == "all good"
    assert llm.paths[0] == "/v1/messages"
    assert llm.headers[0]["x-api-key"] == "sk-test-key-0123456789abcdefghij"
    assert llm.headers[0]["anthropic-version"]
    first = llm.requests[0]
    assert "system" in first and first["tools"][0].keys() == {"name", "description", "input_schema"}
    second = llm.requests[1]["messages"]
    assert second[1]["role"] == "assistant" and second[1]["content"][1]["type"] == "tool_use"
    assert second[2]["role"] == "user" and second[2]["content"][0]["type"] == "tool_result"
    assert second[2]["content"][0]["tool_use_id"] == "toolu_0"


async def test_429_with_retry_after_is_honoured_then_succeeds(llm, agent_for):
    llm.reply(Scripted(429, {"error": "slow down"}, headers={"Retry-After": "1"}), openai_text("ok now"))
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    loop = asyncio.get_running_loop()
    started = loop.time()
    reply = await agent.handle(msg("hi"))
    assert reply.text == "ok now" and len(llm.requests) == 2
    assert loop.time() - started >= 0.9


@pytest.mark.parametrize(
    "failure",
    [
        Scripted(500, {"error": "boom"}),
        Scripted(200, raw=b'{"choices": [{"message": {"content": "trunc'),
        Scripted(503, {"error": "down"}),
    ],
    ids=["500", "truncated-json", "503"],
)
async def test_transient_failures_are_retried(llm, agent_for, failure):
    llm.reply(failure, openai_text("fine"))
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    assert (await agent.handle(msg("hi"))).text == "fine"


async def test_falls_back_to_the_next_provider(llm, second_llm, agent_for):
    llm.reply(Scripted(401, {"error": "bad key"}))
    second_llm.reply(openai_text("from the cloud"))
    agent = agent_for({"local": openai_cfg(llm), "cloud": openai_cfg(second_llm)}, ["local", "cloud"])
    reply = await agent.handle(msg("hi"))
    assert reply.ok and reply.text == "from the cloud"
    assert len(llm.requests) == 1  # 401 is not retried
    assert "failing" in (await agent.handle(msg("/status"))).text


async def test_a_provider_that_never_answers_times_out_and_falls_back(llm, second_llm, agent_for):
    llm.reply(Scripted(hang_s=3), Scripted(hang_s=3))
    second_llm.reply(openai_text("backup"))
    agent = agent_for(
        {"local": openai_cfg(llm, timeout_s=0.3), "cloud": openai_cfg(second_llm)}, ["local", "cloud"]
    )
    assert (await agent.handle(msg("hi"))).text == "backup"


async def test_all_providers_down_gives_one_clear_message(llm, agent_for):
    llm.reply(Scripted(500, {}), Scripted(500, {}))
    agent = agent_for(
        {
            "local": openai_cfg(llm),
            "cloud": {"kind": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1"},
        },
        ["local", "cloud"],
    )
    reply = await agent.handle(msg("hi"))
    assert not reply.ok
    assert "no language model could answer" in reply.text and "/call" in reply.text
    assert "local: server error (HTTP 500)" in reply.text and "cloud: cannot reach" in reply.text
    # The daemon carries on: slash commands still work.
    assert (await agent.handle(msg("/call session_status {}"))).ok


async def test_sessions_persist_across_a_restart(llm, tmp_path, agent_for):
    llm.reply(openai_text("first answer"), openai_text("second answer"))
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    await agent.handle(msg("remember the code 4711"))
    # A second runtime on the same state directory is what a restarted daemon sees.
    again = agent_for({"local": openai_cfg(llm)}, ["local"])
    await again.handle(msg("what was the code?"))
    said = [m for m in llm.requests[1]["messages"] if m["role"] in ("user", "assistant")]
    sent = [without_note(m["content"]) for m in said]
    assert sent == ["remember the code 4711", "first answer", "what was the code?"]
    status = await again.handle(msg("/call session_status {}"))
    assert "messages: 4" in status.text


async def test_history_is_trimmed_by_whole_turns(llm, agent_for):
    llm.reply(*[openai_text(f"answer {i}") for i in range(6)])
    agent = agent_for({"local": openai_cfg(llm)}, ["local"], history_budget_tokens=60)
    for i in range(6):
        await agent.handle(msg(f"question {i} " + "x" * 80))
    last = llm.requests[-1]["messages"]
    assert last[1]["role"] == "user" and len(last) < 12
    assert last[-1]["content"].startswith("question 5")


def test_trim_never_orphans_a_tool_result():
    call = ToolCall("c1", "read_file", "{}")
    history = [
        Message("user", "a" * 400),
        Message("assistant", "", [call]),
        Message("tool", "r" * 400, tool_call_id="c1", name="read_file"),
        Message("assistant", "done"),
        Message("user", "next"),
    ]
    window = trim(history, 50)
    assert [m.role for m in window] == ["user"]
    window = trim(history, 10_000)
    assert window == history
    for budget in range(0, 400, 7):
        w = trim(history, budget)
        ids = {c.id for m in w for c in m.tool_calls}
        assert all(m.tool_call_id in ids for m in w if m.role == "tool")
        assert w[0].role == "user"


async def test_max_iterations_ends_the_turn_clearly(llm, agent_for):
    llm.reply(*[openai_tools(("session_status", {})) for _ in range(3)])
    agent = agent_for({"local": openai_cfg(llm)}, ["local"], max_iterations=3)
    reply = await agent.handle(msg("loop forever"))
    assert not reply.ok and "3 model steps" in reply.text
    assert len(llm.requests) == 3


async def test_stop_cancels_the_turn_in_flight(llm, agent_for):
    llm.reply(Scripted(hang_s=30, body={}))  # the model answers after 30 s: only /stop ends it sooner
    agent = agent_for({"local": openai_cfg(llm, timeout_s=60)}, ["local"])
    turn = asyncio.create_task(agent.handle(msg("slow question")))
    await _until(_async(lambda: llm.requests), "the turn to be waiting for the model")
    stop = await agent.handle(msg("/stop"))
    assert "Stopping" in stop.text
    reply = await asyncio.wait_for(turn, 20)
    assert not reply.ok and reply.text == "Stopped."


def _async(condition):
    async def check() -> bool:
        return bool(condition())

    return check


async def _until(predicate, what: str, within_s: float = 20) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not await predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_stop_ends_a_slow_call_and_says_what_it_stopped(agent_for):
    agent = agent_for({}, [])
    pulse = '/call gpio {"action": "pulse", "pin": "led", "duration_ms": 10000}'  # the longest allowed
    loop = asyncio.get_running_loop()
    started = loop.time()
    call = asyncio.create_task(agent.handle(msg(pulse)))

    async def running() -> bool:
        return "now: running /call gpio" in (await agent.handle(msg("/status"))).text

    await _until(running, "the pulse to be the session's turn")
    stop = await agent.handle(msg("/stop"))
    assert stop.text == "Stopping /call gpio."
    reply = await asyncio.wait_for(call, 9)
    assert not reply.ok and reply.text == "Stopped."
    assert loop.time() - started < 8  # before the 10 s pulse, started after `started`, would have ended
    # The pulse was cut short the way the backend promises: the output is not left on.
    read = await agent.handle(msg('/call gpio {"action": "read", "pin": "led"}'))
    assert read.ok and "inactive" in read.text
    assert "now: idle" in (await agent.handle(msg("/status"))).text
    assert (await agent.handle(msg("/stop"))).text == "Nothing is running."


async def test_a_call_waits_for_the_sessions_turn_like_any_message(llm, agent_for):
    llm.reply(Scripted(hang_s=2.0, body=openai_text("done").body))
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    loop = asyncio.get_running_loop()
    turn = asyncio.create_task(agent.handle(msg("slow")))
    await _until(_async(lambda: llm.requests), "the turn to be waiting for the model")
    asked = loop.time()  # the model answers 2 s after it was asked, which was before now
    call = await agent.handle(msg("/call session_status {}"))
    assert call.ok and loop.time() - asked >= 1.0  # serial within the session: after the turn
    assert (await turn).text == "done"


async def test_status_keeps_the_session_apart_from_the_device(agent_for):
    agent = agent_for({}, [])
    for _ in range(3):
        assert (await agent.handle(msg("/call session_status {}", chat="other"))).ok
    assert not (await agent.handle(msg('/call read_file {"path": "../x"}'))).ok
    text = (await agent.handle(msg("/status"))).text
    session, device = text.split("device (all sessions, since start):")
    assert "session cli:t1 (this conversation):" in session and "conversation: empty" in session
    assert "tool calls: 1 (1 failed or refused)" in session and "now: idle" in session
    assert "tool calls: 4 (0 failed, 1 refused)" in device and "models: none configured" in device
    assert "board: sim" in device and "cli:t1" not in device


async def test_help_for_a_tool_lists_its_arguments_from_the_schema(agent_for):
    agent = agent_for({}, [])
    text = (await agent.handle(msg("/help i2c"))).text
    assert text.startswith("i2c (hardware): I2C bus access")
    lines = {line.split()[0]: line for line in text.splitlines()[2:] if line.startswith("  ")}
    assert "one of scan, read_byte" in lines["action"] and "required" in lines["action"]
    assert "integer 0..255, required: bus number" in lines["bus"]
    assert "integer 0..127 or string (matching ^0[xX]" in lines["address"] and "optional" in lines["address"]
    assert "array of integer 0..255 (at most 4096 items)" in lines["data"]
    assert list(lines)[:2] == ["action", "bus"]  # required first
    assert 'example: /call i2c {"action": "scan", "bus": 0}' in text
    assert "arguments: none" in (await agent.handle(msg("/help hardware_info"))).text
    unknown = await agent.handle(msg("/help warp_drive"))
    assert not unknown.ok and "no tool named 'warp_drive'" in unknown.text
    assert "/help TOOL" in (await agent.handle(msg("/help"))).text


async def test_sessions_are_serial_inside_and_concurrent_across(llm, agent_for):
    # Two sessions at once: each one's request is answered only when the other's is in too (a
    # daemon that ran them one after the other would never get there: the barrier breaks).
    both_in = threading.Barrier(2, timeout=15)

    def meet(text: str):
        def reply(body: dict) -> Scripted:
            both_in.wait()
            return openai_text(text)

        return reply

    # One session: its second turn's request must not come while the first is being answered.
    answering = threading.Event()
    overlapped: list[bool] = []

    def alone(text: str):
        def reply(body: dict) -> Scripted:
            overlapped.append(answering.is_set())
            answering.set()
            time.sleep(1.0)  # long enough for a turn sent at once to arrive meanwhile
            answering.clear()
            return openai_text(text)

        return reply

    llm.reply(meet("r0"), meet("r1"), alone("r2"), alone("r3"))
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    across = await asyncio.gather(agent.handle(msg("a", "s1")), agent.handle(msg("b", "s2")))
    assert all(r.ok for r in across), [r.text for r in across]
    replies = await asyncio.gather(agent.handle(msg("c", "s3")), agent.handle(msg("d", "s3")))
    assert all(r.ok for r in replies) and overlapped == [False, False]  # one after the other
    # The second turn saw the first one's exchange in its history.
    assert user_texts(llm.requests[-1]) == ["c", "d"]
    # Callers choose session keys: nothing per session may stay behind once its turns are over.
    assert agent.turns._locks == {}


async def test_slash_commands_without_any_provider(agent_for):
    agent = agent_for({}, [])
    reply = await agent.handle(msg("hello"))
    assert not reply.ok and "/call TOOL" in reply.text
    tools = await agent.handle(msg("/tools"))
    assert "read_file" in tools.text
    call = await agent.handle(msg('/call write_file {"path": "n.txt", "content": "x"}'))
    assert call.ok and "n.txt" in call.text
    refused = await agent.handle(msg('/call read_file {"path": "../x"}'))
    assert not refused.ok and "refused" in refused.text
    assert "models: none configured" in (await agent.handle(msg("/status"))).text
    assert "unknown command" in (await agent.handle(msg("/frobnicate"))).text


async def test_new_archives_the_session(llm, agent_for):
    llm.reply(openai_text("one"), openai_text("two"))
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    await agent.handle(msg("first"))
    new = await agent.handle(msg("/new"))
    assert "fresh conversation" in new.text and "cli:t1@" in new.text
    await agent.handle(msg("second"))
    assert user_texts(llm.requests[1]) == ["second"]
    listing = await agent.handle(msg("/call sessions_list {}"))
    assert "cli:t1@" in listing.text and "cli:t1 " in listing.text


async def test_history_tool_respects_channel_boundaries(agent_for):
    agent = agent_for({}, [])
    from edgeclaw.errors import ToolRefused
    from edgeclaw.tools.base import ToolContext

    # The tool's own bound (MQTT callers do not even get the tool by default: the remote profile).
    history = agent.registry.get("sessions_history")
    with pytest.raises(ToolRefused, match="another channel"):
        await history.check({"session": "console:ttyGS0"}, ToolContext(channel="mqtt", session_key="mqtt:x"))
    refused = await agent.registry.execute(
        "sessions_history", {"session": "console:ttyGS0"}, ToolContext(channel="mqtt", session_key="mqtt:x")
    )
    assert refused.refused and refused.stage == "policy"
    assert json.loads((await agent.registry.execute("sessions_history", {}, ToolContext())).for_llm) == []


async def test_new_ends_the_sessions_background_processes(agent_for):
    agent = agent_for({}, [])
    ended: list[tuple[str, str]] = []

    async def hook(key: str, identity: str) -> None:
        ended.append((key, identity))

    agent.session_end_hooks.append(hook)
    await agent.handle(msg("/call session_status {}"))
    await agent.handle(msg("/new"))
    assert ended == [("cli:t1", "cli")]  # the session, and who ended it (its processes only)
    # The daemon wires the process tool's cleanup to the same hook.
    assert any(getattr(h, "__self__", None) is not None for h in agent.session_end_hooks[:-1])


async def test_an_answer_that_starts_like_the_iteration_limit_is_still_ok(llm, agent_for):
    # Whether the turn finished is carried beside the text, never guessed from its wording.
    llm.reply(openai_text("Stopped after 3 tries: the pump is fine."))
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    reply = await agent.handle(msg("pump?"))
    assert reply.ok and reply.text.startswith("Stopped after 3 tries")


async def test_an_empty_anthropic_answer_does_not_poison_the_session(llm, agent_for):
    # The Messages API refuses empty text blocks (HTTP 400): an empty answer stored in the history
    # must not be sent back, or every later turn of the session would fail.
    llm.reply(anthropic_text(""), anthropic_text("fine"))
    agent = agent_for({"cloud": {"kind": "anthropic", "model": "c", "base_url": llm.url}}, ["cloud"])
    assert (await agent.handle(msg("first"))).text == "(the model gave an empty answer)"
    assert (await agent.handle(msg("second"))).text == "fine"
    blocks = [b for m in llm.requests[1]["messages"] for b in m["content"]]
    assert all(b["text"].strip() for b in blocks if b["type"] == "text")
    assert [m["role"] for m in llm.requests[1]["messages"]] == ["user"]


async def test_a_provider_error_never_quotes_the_api_key(llm, agent_for):
    key = "sk-test-key-0123456789abcdefghij"
    llm.reply(Scripted(400, {"error": f"invalid proxy token {key}"}))
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    reply = await agent.handle(msg("hi"))
    assert not reply.ok and "invalid proxy token [REDACTED]" in reply.text and key not in reply.text
    assert key not in (await agent.handle(msg("/status"))).text


async def test_a_malformed_openai_message_is_a_provider_error(llm, agent_for):
    llm.reply(*[Scripted(200, {"choices": [{"message": "not an object"}]})] * 2)
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    reply = await agent.handle(msg("hi"))
    assert not reply.ok and "malformed answer" in reply.text and "turn failed" not in reply.text


class SlowToStop(Tool):
    """Runs until cancelled, then takes a moment to clean up (like a tool stopping its processes)."""

    name = "slow_to_stop"
    group = "runtime"
    description = "Cleans up slowly."
    parameters = {"type": "object", "properties": {}}

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cleaned_up = False

    async def execute(self, args, ctx):
        self.started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.2)
            self.cleaned_up = True
            raise
        return "finished"


async def test_a_cancelled_message_holds_the_session_until_its_turn_has_unwound(llm, agent_for):
    llm.reply(openai_tools(("slow_to_stop", {})))
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    tool = SlowToStop()
    agent.registry.register(tool)
    handling = asyncio.create_task(agent.handle(msg("go")))
    await asyncio.wait_for(tool.started.wait(), 5)
    handling.cancel()  # the channel gave up on the message (its connection closed, shutdown)
    with pytest.raises(asyncio.CancelledError):
        await handling
    assert tool.cleaned_up  # the next message of the session cannot overlap the old turn


async def test_messages_queued_behind_a_turn_do_not_start_after_shutdown(llm, agent_for):
    llm.reply(Scripted(hang_s=30, body={}), openai_text("too late"))  # only the shutdown ends it soon
    agent = agent_for({"local": openai_cfg(llm, timeout_s=60)}, ["local"])
    first = asyncio.create_task(agent.handle(msg("slow")))
    await _until(_async(lambda: llm.requests), "the turn to be waiting for the model")
    queued = asyncio.create_task(agent.handle(msg("waiting for the lock")))
    await asyncio.sleep(0.05)
    await agent.shutdown()
    assert (await first).text == "Stopped."
    assert "shutting down" in (await queued).text
    assert len(llm.requests) == 1


async def test_a_failing_slash_command_answers_with_an_error(agent_for):
    agent = agent_for({}, [])

    def broken(key):
        raise BackendError("cannot open the state database /x/edgeclaw.db: disk I/O error")

    agent.sessions.summary = broken
    reply = await agent.handle(msg("/status"))
    assert not reply.ok and reply.text.startswith("error: /status failed: BackendError: cannot open")


async def test_closing_the_runtime_mid_turn_stops_the_turn_cleanly(llm, tmp_path):
    # The database is opened lazily, after the agent: it must still be closed after the agent's
    # shutdown, which lets the cancelled turn write its history on the way out.
    llm.reply(Scripted(hang_s=30, body={}))  # only the close ends it soon
    runtime = make_runtime(tmp_path, {"local": openai_cfg(llm, timeout_s=60)}, ["local"])
    agent = build_agent(runtime)
    turn = asyncio.create_task(agent.handle(msg("slow")))
    await _until(_async(lambda: llm.requests), "the turn to be waiting for the model")
    await runtime.aclose()
    assert (await turn).text == "Stopped."


def test_the_runtime_repr_holds_no_secret(tmp_path):
    local = {"kind": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "LLM_KEY"}
    runtime = make_runtime(tmp_path, {"local": local}, ["local"])
    assert runtime.secrets and "sk-test-key" not in repr(runtime)


async def test_an_answer_mangled_in_transit_is_retried(llm, agent_for):
    # A body that cannot be decoded (a proxy's broken gzip) is no TransportError, but just as transient.
    llm.reply(
        Scripted(200, raw=b"not gzip at all", headers={"Content-Encoding": "gzip"}), openai_text("fine")
    )
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    reply = await agent.handle(msg("hi"))
    assert reply.ok and reply.text == "fine"


def test_context_files_are_read_only_as_far_as_the_prompt_uses_them(tmp_path, monkeypatch):
    from edgeclaw.agent.prompt import MAX_FILE_CHARS, PromptBuilder

    (tmp_path / "SOUL.md").write_text("s" * (MAX_FILE_CHARS * 50))

    def whole_file(*args, **kwargs):
        raise AssertionError("the whole context file was read")

    monkeypatch.setattr(Path, "read_text", whole_file)
    prompt = PromptBuilder(tmp_path, {}).build()
    assert "[SOUL.md truncated]" in prompt and len(prompt) < 2 * MAX_FILE_CHARS


async def test_tool_calls_of_a_turn_carry_the_messages_caller_and_request_id(llm, agent_for):
    from edgeclaw.tools.base import Tool

    seen = []

    class Witness(Tool):
        name = "witness"
        group = "custom"
        description = "Records who asked."

        async def execute(self, args, ctx):
            seen.append((ctx.caller, ctx.request_id))
            return "noted"

    llm.reply(openai_tools(("witness", {})), openai_text("done"))
    agent = agent_for({"local": openai_cfg(llm)}, ["local"])
    agent.registry.register(Witness())
    message = InboundMessage(
        channel="console", text="go", chat_id="c", caller="console:ttyGS0", request_id="r7"
    )
    reply = await agent.handle(message)
    assert reply.ok and seen == [("console:ttyGS0", "r7")]
