"""A model's answer reaching people as it is written: scrubbed, once, on every channel that shows it.

The wire side (providers asking for and reading streams) is tested with the providers; here: what
the loop gives a channel (`agent.streaming`), `edgeclaw chat`, the console's rows, MQTT partials.
"""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

import pytest

from edgeclaw.agent.streaming import RESTARTED, StreamedText, TurnStream
from edgeclaw.channels.console.render import RowStream
from edgeclaw.channels.terminal import TerminalChannel
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.agent import build_agent
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.tools.scrub import Scrubber
from tests.llm_server import ScriptedLLM, openai_stream, openai_text
from tests.mqtt_support import Caller, Mosquitto, needs_mosquitto
from tests.test_console import PIN, PROMPT, console, unwrapped  # noqa: F401 (console: a fixture)
from tests.test_mqtt import BASE, daemon_config, running_daemon

SECRET = "hunter2-Zq8vN3pLx7"

# -- the loop's side: scrubbed releases, steps apart ------------------------------------------


def feed(stream: TurnStream, pieces: list[str]) -> None:
    for p in pieces:
        stream(p)
    stream.end_step()


def test_a_secret_split_across_deltas_never_reaches_the_channel():
    got: list[str] = []
    stream = TurnStream(got.append, Scrubber([SECRET]).scrub)
    feed(stream, ["The key is hun", "ter2-Zq8", "vN3pLx7 and", " that is all."])
    shown = "".join(got)
    assert shown == "The key is [REDACTED] and that is all.\n"
    assert not any(piece and piece in SECRET for piece in got if len(piece) > 2)


def test_text_is_released_word_by_word_and_steps_end_their_line():
    got: list[str] = []
    stream = TurnStream(got.append, Scrubber().scrub)
    stream("Let me ch")
    assert got == ["Let me "]  # the word being written is held back
    stream("eck. ")
    assert got == ["Let me ", "check. "]
    stream.end_step()  # the model called a tool: its next step starts on a new line
    feed(stream, ["It is 21 °C."])
    assert "".join(got) == "Let me check. \nIt is 21 °C.\n"


def test_a_redaction_reaching_back_stops_the_step_and_the_answer_is_shown_whole():
    got: list[str] = []
    # A random-looking run is only a secret once it is long enough: the first words go out clean.
    stream = TurnStream(got.append, lambda t: t.replace("a b", "[REDACTED]"))
    feed(stream, ["x a ", "b c"])
    assert "".join(got) == "x a \n"  # never "b": the scrubbed text no longer starts with what went out
    shown = StreamedText(lambda _: None)
    for piece in got:
        shown(piece)
    assert shown.remainder("x [REDACTED] c") is None  # so the channel shows the answer whole


def test_an_answer_started_over_is_closed_with_a_note_and_the_new_one_shown_once():
    got: list[str] = []
    stream = TurnStream(got.append, Scrubber().scrub)
    stream("It is 2")
    stream("1 and ")
    stream.restart()  # the connection broke: the chain asks again
    feed(stream, ["It is 21 °C."])
    assert "".join(got) == f"It is 21 and \n{RESTARTED}\nIt is 21 °C.\n"
    shown = StreamedText(lambda _: None)
    for piece in got:
        shown(piece)
    assert shown.remainder("It is 21 °C.") == ""  # the new answer is not shown twice
    quiet: list[str] = []
    untouched = TurnStream(quiet.append, Scrubber().scrub)
    untouched("Nothin")  # a word still being written: held back, never shown
    untouched.restart()  # nothing was shown of the broken answer: nothing to close
    feed(untouched, ["Fine."])
    assert "".join(quiet) == "Fine.\n"


def test_the_remainder_is_what_the_stream_did_not_show():
    shown = StreamedText(lambda _: None)
    shown("Let me check. \n")
    shown("It is 21 °C.\n")
    assert shown.remainder("It is 21 °C.") == ""
    assert shown.remainder("It is 21 °C.\n(cut off)") == "\n(cut off)"
    assert shown.remainder("Stopped.") is None
    assert StreamedText(lambda _: None).remainder("anything") is None


# -- the console's rows ------------------------------------------------------------------------


def test_streamed_rows_are_wrapped_safe_and_bounded():
    rows = RowStream(width=20, max_rows=3)
    out = rows.feed("one two three four five six\x1b[31m") + rows.feed(" seven\nx\ny\nz\n") + rows.finish()
    text = out.decode()
    assert "\x1b" not in text and "^[" in text  # an escape sequence is shown, never sent
    lines = text.split("\r\n")
    assert all(len(line) <= 20 for line in lines)
    assert lines[0] == "one two three four"
    assert rows.cut >= 1 and "z" not in text


# -- edgeclaw chat -----------------------------------------------------------------------------


class Writes(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[float, str]] = []

    def write(self, s: str) -> int:
        self.writes.append((time.monotonic(), s))
        return super().write(s)


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


async def chat_agent(tmp_path: Path, llm: ScriptedLLM):
    config = config_from_dict(
        {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            "agent": {"providers": ["local"], "provider_attempts": 1},
            "providers": {"local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1"}},
        },
        "test.toml",
    )
    runtime = build_runtime(config)
    return runtime, build_agent(runtime)


async def test_edgeclaw_chat_prints_the_answer_as_it_comes_and_only_once(tmp_path, llm):
    answer = "The greenhouse is at twenty-one degrees and the vents are closed."
    item = openai_stream(answer, finish_reason="stop")
    item.chunk_gap_s = 0.05
    llm.reply(item)
    runtime, agent = await chat_agent(tmp_path, llm)
    try:
        out = Writes()
        reply = await TerminalChannel(agent, out=out, interactive=False).one_turn("how warm is it?")
    finally:
        await runtime.aclose()
    assert reply.ok and reply.text == answer
    assert out.getvalue() == answer + "\n"
    pieces = [(t, s) for t, s in out.writes if s.strip()]
    assert len(pieces) > 3 and pieces[-1][0] - pieces[0][0] > 0.1  # piece by piece, as it came


async def test_edgeclaw_chat_prints_a_whole_answer_from_a_server_that_does_not_stream(tmp_path, llm):
    llm.reply(openai_text("Plain, in one piece."))
    runtime, agent = await chat_agent(tmp_path, llm)
    try:
        out = Writes()
        await TerminalChannel(agent, out=out, interactive=False).one_turn("hi")
    finally:
        await runtime.aclose()
    assert out.getvalue() == "Plain, in one piece.\n"


# -- MQTT partials -----------------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path):
    b = Mosquitto(tmp_path / "broker").start()
    yield b
    b.kill()


@needs_mosquitto
async def test_mqtt_partials_in_order_then_exactly_one_final_answer(tmp_path, broker, llm):
    answer = "Partial answers arrive first, and then the one final answer with all of the text."
    item = openai_stream(answer, finish_reason="stop")
    item.chunk_gap_s = 0.05
    llm.reply(item, openai_text("Not streamed."))
    config = daemon_config(
        tmp_path,
        broker.port,
        top={
            "agent": {"providers": ["local"]},
            "providers": {"local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1"}},
        },
    )
    topic = "test/stream"
    async with running_daemon(config), Caller(broker.port, [topic]) as c:
        await c.publish(
            f"{BASE}/chat/in",
            {"text": "stream it", "id": "s1", "stream": True},
            response_topic=topic,
            correlation=b"s1",
        )
        await c.wait_for(lambda: any(not m.json.get("partial") for m in c.on(topic)), 30, "the final answer")
        await asyncio.sleep(0.5)  # nothing may follow it
        got = [m.json for m in c.on(topic)]
        assert all(m.correlation == b"s1" for m in c.on(topic))
        partials, finals = got[:-1], got[-1:]
        assert finals[0]["text"] == answer and finals[0]["ok"] and not finals[0].get("partial")
        assert len(partials) >= 2 and all(p["partial"] and p["in_reply_to"] == "s1" for p in partials)
        assert [p["seq"] for p in partials] == list(range(len(partials)))
        assert finals[0]["seq"] == len(partials)
        assert "".join(p["text"] for p in partials).strip() == answer

        # Not asked for: one answer, no partials.
        await c.publish(f"{BASE}/chat/in", {"text": "again", "id": "s2"}, response_topic=topic)
        await c.wait_for(lambda: len(c.on(topic)) > len(got), 30, "the second answer")
        await asyncio.sleep(0.3)
        [second] = [m.json for m in c.on(topic)][len(got) :]
        assert second["text"] == "Not streamed." and "seq" not in second and "partial" not in second


@needs_mosquitto
async def test_mqtt_stream_must_be_a_boolean(tmp_path, broker, llm):
    config = daemon_config(tmp_path, broker.port)
    async with running_daemon(config), Caller(broker.port, ["test/s"]) as c:
        await c.publish(f"{BASE}/chat/in", {"text": "x", "id": "b", "stream": "yes"}, response_topic="test/s")
        [answer] = await c.answers("test/s", 1)
        assert answer.json["code"] == "bad_field" and "stream" in answer.json["error"]


# -- the console -------------------------------------------------------------------------------


def test_the_console_shows_the_answer_as_it_streams_and_only_once(console, llm):  # noqa: F811
    answer = " ".join(f"word{i}" for i in range(40))
    item = openai_stream(answer, finish_reason="stop")
    item.chunk_gap_s = 0.03
    llm.reply(item)
    _, (port,) = console()
    term = port.terminal()
    term.expect("PIN: ")
    term.send(PIN + "\r")
    term.expect_exact(PROMPT)
    term.send("count for me\r")
    term.expect_exact("word3 ")
    first_words, head = time.monotonic(), term.before
    term.expect_exact(PROMPT)
    shown = unwrapped(head + "word3 " + term.before)
    assert time.monotonic() - first_words > 0.5  # the first words came long before the last
    assert shown.count("word39") == 1 and shown.count("word0 ") == 1  # shown once, not again at the end
    assert "working; Ctrl-C" not in shown
