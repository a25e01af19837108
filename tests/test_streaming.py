"""A model's answer reaching people as it is written: scrubbed, once, on every channel that shows it.

The wire side (providers asking for and reading streams) is tested with the providers; here: what
the loop gives a channel (`agent.streaming`), `edgeclaw chat`, the console's rows, MQTT partials.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from edgeclaw.agent.streaming import StreamedText, TurnStream
from edgeclaw.channels.console.render import RowStream
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.agent import build_agent
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.tools.scrub import Scrubber
from tests.llm_server import ScriptedLLM
from tests.mqtt_support import Caller, Mosquitto, needs_mosquitto
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


# -- MQTT partials -----------------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path):
    b = Mosquitto(tmp_path / "broker").start()
    yield b
    b.kill()


@needs_mosquitto
async def test_mqtt_stream_must_be_a_boolean(tmp_path, broker, llm):
    config = daemon_config(tmp_path, broker.port)
    async with running_daemon(config), Caller(broker.port, ["test/s"]) as c:
        await c.publish(f"{BASE}/chat/in", {"text": "x", "id": "b", "stream": "yes"}, response_topic="test/s")
        [answer] = await c.answers("test/s", 1)
        assert answer.json["code"] == "bad_field" and "stream" in answer.json["error"]
