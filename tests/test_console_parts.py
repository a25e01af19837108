"""The console's parts on their own: line editor, rendering, PIN hashes and the gate, the port, config."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeclaw.channels.console.editor import EventKind, LineEditor, text_width
from edgeclaw.channels.console.login import LoginGate, LoginResult
from edgeclaw.channels.console.port import (
    LineSettings,
    PacedWriter,
    PortError,
    PortGone,
    SerialPort,
    serve_port,
)
from edgeclaw.channels.console.render import bound, layout, sanitize, to_rows, wrap_line
from edgeclaw.config.loader import config_from_dict
from edgeclaw.config.pin_hash import PinHashError, hash_pin, parse_pin_hash
from edgeclaw.daemon.agent import shared_agent
from edgeclaw.daemon.console import console_service
from edgeclaw.daemon.lifecycle import configured_services
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.errors import ConfigErrors
from edgeclaw.tools.base import ToolContext

FAST_HASH = hash_pin("2468", "pbkdf2-sha256")


# -- line editor --------------------------------------------------------------
def feed_all(editor: LineEditor, data: bytes):
    """Feed bytes, collecting echo and every event."""
    echo, events = b"", []
    while True:
        out, event, data = editor.feed(data)
        echo += out
        if event is None:
            return echo, events
        events.append(event)


def test_line_endings_cr_lf_and_crlf_each_end_one_line():
    for ending in (b"\r", b"\n", b"\r\n"):
        editor = LineEditor()
        editor.start("> ")
        _, events = feed_all(editor, b"one" + ending + b"two" + ending)
        assert [(e.kind, e.text) for e in events] == [(EventKind.LINE, "one"), (EventKind.LINE, "two")]


def test_crlf_split_across_reads_and_across_lines():
    editor = LineEditor()
    editor.start("> ")
    _, event, rest = editor.feed(b"abc\r")
    assert event.text == "abc" and rest == b""
    editor.start("> ")  # the LF comes in the next read, after a new prompt
    _, event, _ = editor.feed(b"\n")
    assert event is None and editor.text == ""


def test_editing_keys():
    editor = LineEditor()
    editor.start("> ")
    echo, event, _ = editor.feed(b"helo\x08lo world\x7f\x7f\x7f\x7f\x7fthere")
    assert editor.text == "hello there" and event is None
    assert echo.count(b"\b \b") == 6
    editor.feed(b"  again \x17")  # Ctrl-W: the word and the spaces after it
    assert editor.text == "hello there  "
    editor.feed(b"\x17")
    assert editor.text == "hello "
    echo, _, _ = editor.feed(b"\x15")  # Ctrl-U: the whole line
    assert editor.text == "" and echo == b"\b \b" * 6


def test_wide_characters_erase_two_columns_and_combining_marks_none():
    editor = LineEditor()
    editor.start("> ")
    editor.feed("温".encode())
    echo, _, _ = editor.feed(b"\x7f")
    assert echo == b"\b \b" * 2
    assert text_width("e\u0301") == 1


def test_ctrl_c_ctrl_d_and_what_follows_them():
    editor = LineEditor()
    editor.start("> ")
    echo, event, rest = editor.feed(b"half a line\x03next")
    assert event.kind is EventKind.INTERRUPT and echo.endswith(b"^C\r\n") and rest == b"next"
    editor.start("> ")
    _, event, _ = editor.feed(b"x\x04")
    assert event is None  # Ctrl-D on a non-empty line does nothing
    editor.feed(b"\x15")
    _, event, _ = editor.feed(b"\x04")
    assert event.kind is EventKind.EOF


def test_escape_sequences_are_swallowed():
    editor = LineEditor()
    editor.start("> ")
    # Up arrow, Ctrl-Right (with parameters), F1 (SS3), Home, and an Alt-x.
    _, event, _ = editor.feed(b"a\x1b[Ab\x1b[1;5Cc\x1bOPd\x1b[He\x1bxf\r")
    assert event.text == "abcdef"


def test_history_steps_through_earlier_lines_and_back_to_the_draft():
    editor = LineEditor()
    for line in ("/status", "", "/tools", "/tools", "/help i2c"):
        editor.remember(line)
    assert editor.history == ["/status", "/tools", "/help i2c"]  # no blanks, no repeats
    editor.start("> ", history=True)
    editor.feed(b"/ne")
    echo, _, _ = editor.feed(b"\x1b[A")
    assert editor.text == "/help i2c" and echo == b"\r\x1b[K> /help i2c"
    editor.feed(b"\x1bOA\x1b[A")
    assert editor.text == "/status"
    echo, _, _ = editor.feed(b"\x1b[A")
    assert editor.text == "/status" and echo == b"\x07"  # the oldest: the bell
    editor.feed(b"\x1b[B\x1b[B\x1b[B")
    assert editor.text == "/ne"  # past the newest: what was being typed
    _, event, _ = editor.feed(b"\x1b[A\r")
    assert event.text == "/help i2c"
    # Ctrl-Up (ESC [ 1 ; 5 A) is not Up; and a masked line (a PIN) never shows the history.
    editor.start("> ", history=True)
    editor.feed(b"\x1b[1;5A")
    assert editor.text == ""
    editor.start("PIN: ", mask="*", history=True)
    echo, _, _ = editor.feed(b"\x1b[A")
    assert editor.text == "" and b"status" not in echo
    editor.forget()
    assert editor.history == []


def test_tab_completes_to_the_common_start_and_lists_the_choices():
    words = ["/status ", "/stop ", "/tools "]
    editor = LineEditor()
    editor.start("> ", complete=lambda typed: words)
    echo, _, _ = editor.feed(b"/t\t")
    assert editor.text == "/tools " and echo.endswith(b"\r\x1b[K> /tools ")
    editor.start("> ", complete=lambda typed: words)
    editor.feed(b"/s\t")
    assert editor.text == "/st"
    echo, _, _ = editor.feed(b"\t")
    assert echo == b"\r\n/status  /stop\r\n> /st" and editor.text == "/st"
    echo, _, _ = editor.feed(b"x\t")
    assert echo == b"x\x07"
    plain = LineEditor()
    plain.start("> ")
    plain.feed(b"a\tb")
    assert plain.text == "a b"  # without a completer, Tab is a space as before


def test_invalid_utf8_is_dropped_and_counted():
    editor = LineEditor()
    editor.start("> ")
    # A stray continuation byte, an invalid lead byte, and a character cut short by Enter.
    _, event, _ = editor.feed(b"ok\x80 \xff\xc3\r")
    assert event.text == "ok " and event.invalid_bytes == 3
    editor.start("> ")
    _, event, _ = editor.feed("é\r".encode())
    assert event.text == "é" and event.invalid_bytes == 0


def test_mask_and_echo_off():
    editor = LineEditor()
    editor.start("PIN: ", mask="*")
    echo, event, _ = editor.feed(b"1234\x7f5\r")
    assert echo == b"****\b \b*\r\n" and event.text == "1235"
    quiet = LineEditor(echo=False)
    quiet.start("> ")
    echo, event, _ = quiet.feed(b"abc\x7fd\r")
    assert echo == b"\r\n" and event.text == "abd"


def test_overlong_lines_ring_the_bell():
    editor = LineEditor(max_chars=5)
    editor.start("> ")
    echo, _, _ = editor.feed(b"abcdefg")
    assert editor.text == "abcde" and echo.endswith(b"\x07\x07")


def test_redraw_keeps_what_was_typed():
    editor = LineEditor()
    editor.start("(9 s)? ")
    editor.feed(b"al")
    assert editor.redraw("(8 s)? ") == b"\r\x1b[K(8 s)? al"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_are_safe(data):
    editor = LineEditor()
    editor.start("> ")
    _, events = feed_all(editor, data)
    for event in [*events, None]:
        text = event.text if event is not None else editor.text
        assert "\ufffd" not in text
        assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


# -- rendering ------------------------------------------------------------------
def test_control_characters_cannot_reach_the_terminal():
    text = "title\x1b]0;pwned\x07 red\x1b[31m nul\x00 c1\x9b del\x7f"
    assert sanitize(text) == "title^[]0;pwned^G red^[[31m nul^@ c1? del^?"
    rows = to_rows("a\tb\r\nc", 80)
    assert rows == ["a       b", "c"]


def test_wrapping_prefers_spaces_and_counts_columns():
    assert wrap_line("alpha beta gamma delta", 12) == ["alpha beta", "  gamma", "  delta"]
    assert wrap_line("x" * 25, 10) == ["x" * 10, "  " + "x" * 8, "  " + "x" * 7]
    assert wrap_line("温度" * 6, 10) == ["温度温度温", "  度温度温", "  度温度"]
    assert wrap_line("  key: a long value here", 16) == ["  key: a long", "    value here"]
    assert wrap_line("no wrap", 0) == ["no wrap"] and wrap_line("fits", 4) == ["fits"]
    for row in wrap_line("温度 x" * 40, 21):
        assert sum(2 if c in "温度" else 1 for c in row) <= 21


def test_bound_keeps_the_head_and_counts_the_rest():
    b = bound([str(i) for i in range(10)], 4)
    assert b.rows == ["0", "1", "2", "3"] and b.cut == 6
    assert bound(["a"], 4).cut == 0


def test_layout_keeps_a_marked_last_line_out_of_the_cut_and_drops_trailing_newlines():
    text = "\n".join(f"r{i}" for i in range(10)) + "\n[note]\n"
    b = layout(text, 80, 4, keep_last=lambda line: line == "[note]")
    assert b.rows == ["r0", "r1", "r2", "r3"] and b.cut == 6 and b.tail == ["[note]"]
    assert layout("hello\n", 80, 4).rows == ["hello"]
    assert layout("[note]", 80, 4, keep_last=lambda line: True).tail == []  # a one-line text is itself


# -- PIN hashes and the gate -------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["scrypt", "pbkdf2-sha256"])
def test_pin_hash_round_trip(algorithm):
    encoded = hash_pin("2468", algorithm)
    assert encoded.startswith(f"${algorithm}$") and "2468" not in encoded
    parsed = parse_pin_hash(encoded)
    assert parsed.matches("2468") and not parsed.matches("2469") and not parsed.matches("")
    assert hash_pin("2468", algorithm) != encoded  # a fresh salt every time


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("2468", "expected $ALGORITHM"),
        ("$md5$x$y$z", "unknown hash algorithm"),
        ("$scrypt$ln=14,r=8$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "lacks p"),
        ("$scrypt$ln=40,r=8,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "out of range"),
        ("$scrypt$ln=20,r=32,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "more than 64 MiB"),
        ("$pbkdf2-sha256$i=10$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "10000 to"),
        ("$pbkdf2-sha256$i=20000$!!$aGFzaGhhc2hoYXNoaGFzaA", "base64"),
        ("$pbkdf2-sha256$i=20000$c2FsdA$aGFzaA", "too short"),
        ("$pbkdf2-sha256$i=²0000$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "bad parameter"),  # a digit, not ASCII
    ],
)
def test_bad_hashes_are_refused_with_a_reason(text, needle):
    with pytest.raises(PinHashError, match=needle.replace("$", r"\$")):
        parse_pin_hash(text)


def test_an_entry_longer_than_any_pin_never_matches():
    longest = "7" * 256  # the longest PIN or password hash_pin accepts
    parsed = parse_pin_hash(hash_pin(longest, "pbkdf2-sha256"))
    assert parsed.matches(longest)
    assert not parsed.matches(longest + "junk")  # same first 256 characters: still a wrong entry


def test_short_pins_are_refused():
    with pytest.raises(ValueError, match="4 to 256"):
        hash_pin("12")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_gate_locks_out_after_max_failures_and_reopens(caplog):
    caplog.set_level(logging.INFO)
    clock = Clock()
    gate = LoginGate(parse_pin_hash(FAST_HASH), max_failures=3, lockout_s=60, failure_delay_s=0, clock=clock)
    assert (await gate.attempt("1111", "ttyA")).tries_left == 2
    assert (await gate.attempt("2468", "ttyA")).result is LoginResult.OK  # success resets the count
    for left in (2, 1):
        assert (await gate.attempt("1111", "ttyB")).tries_left == left
    third = await gate.attempt("1111", "ttyA")  # failures count for the device, whatever the port
    assert third.result is LoginResult.WRONG and third.locked_for_s == 60

    checked = []
    real = gate.pin_hash
    gate.pin_hash = type("Spy", (), {"matches": lambda self, pin: checked.append(pin) or real.matches(pin)})()
    locked = await gate.attempt("2468", "ttyA")
    assert locked.result is LoginResult.LOCKED and checked == []  # not even checked while locked
    clock.now += 61
    assert gate.locked_for() == 0
    assert (await gate.attempt("2468", "ttyA")).result is LoginResult.OK and checked == ["2468"]
    lines = [r.getMessage() for r in caplog.records if r.name == "edgeclaw.audit"]
    assert "login outcome=ok caller=console:ttyA channel=console" in lines
    assert any("outcome=locked_out" in line and "lockout_s=60" in line for line in lines)


async def test_gate_checks_one_entry_at_a_time():
    gate = LoginGate(parse_pin_hash(FAST_HASH), max_failures=2, lockout_s=60, failure_delay_s=0.05)
    results = await asyncio.gather(*(gate.attempt("0000", f"tty{i}") for i in range(4)))
    # Four guesses in parallel: two are checked, then the lockout refuses the rest unchecked.
    assert [r.result for r in results].count(LoginResult.WRONG) == 2
    assert [r.result for r in results].count(LoginResult.LOCKED) == 2


# -- the port -------------------------------------------------------------------
@pytest.fixture
def pty_pair():
    master, slave = os.openpty()
    yield master, os.ttyname(slave)
    for fd in (master, slave):
        with contextlib.suppress(OSError):
            os.close(fd)


async def test_port_reads_writes_and_reports_a_hang_up(pty_pair):
    master, path = pty_pair
    port = SerialPort.open(path, LineSettings())
    try:
        await port.write(b"hello\n")
        assert os.read(master, 100) == b"hello\n"  # raw mode: no LF to CRLF translation
        os.write(master, b"\x03typed")
        assert await asyncio.wait_for(port.read(), 5) == b"\x03typed"  # no ISIG: Ctrl-C is a byte
        os.close(master)
        with pytest.raises(PortGone):
            await asyncio.wait_for(port.read(), 5)
    finally:
        port.close()


def test_opening_something_that_is_not_a_port(tmp_path):
    with pytest.raises(PortError, match="No such file"):
        SerialPort.open(str(tmp_path / "ttyNONE"), LineSettings())
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(PortError):
        SerialPort.open(str(plain), LineSettings())


async def test_a_port_is_held_exclusively(pty_pair):
    _, path = pty_pair
    first = SerialPort.open(path, LineSettings())
    try:
        with pytest.raises(PortError, match="holds it open"):
            SerialPort.open(path, LineSettings())
    finally:
        first.close()


async def test_drain_returns_once_the_port_is_gone(pty_pair):
    master, path = pty_pair
    port = SerialPort.open(path, LineSettings())
    writer = PacedWriter(port, pace=False)
    task = asyncio.create_task(writer.run())
    try:
        os.close(master)  # the far end hangs up: the next write fails
        writer.write(b"first")
        with pytest.raises(PortGone):
            await asyncio.wait_for(task, 5)
        writer.write(b"a message delivered after the cable was pulled")
        await asyncio.wait_for(writer.drain(), 1)  # returns: nothing will ever be sent
    finally:
        task.cancel()
        port.close()


async def test_output_is_paced_to_the_line_rate(pty_pair):
    master, path = pty_pair
    settings = LineSettings(baud=38400)  # 3840 bytes/s at 8N1
    assert settings.bytes_per_s == 3840 and LineSettings(parity="E", stop_bits=2).bits_per_char == 12
    port = SerialPort.open(path, settings)
    writer = PacedWriter(port)
    task = asyncio.create_task(writer.run())
    received = bytearray()
    loop = asyncio.get_running_loop()
    loop.add_reader(master, lambda: received.extend(os.read(master, 4096)))
    try:
        started = time.monotonic()
        writer.write(b"x" * 4000)
        await asyncio.wait_for(writer.drain(), 10)
        elapsed = time.monotonic() - started
    finally:
        loop.remove_reader(master)
        task.cancel()
        port.close()
    assert elapsed >= 0.9  # 4000 bytes cannot leave faster than the wire carries them (~1.04 s)


async def test_serve_port_waits_for_a_missing_port_and_logs_once(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="edgeclaw.console")
    link = tmp_path / "ttyLATE"
    opened = asyncio.Event()
    retried = asyncio.Event()

    class CountTries(logging.Handler):
        tries = 0

        def emit(self, record: logging.LogRecord) -> None:
            if "cannot open" in record.getMessage():
                self.tries += 1
                if self.tries >= 4:
                    retried.set()

    counter = CountTries()
    logging.getLogger("edgeclaw.console").addHandler(counter)
    master = slave = -1

    async def session(port: SerialPort) -> None:
        opened.set()
        await asyncio.sleep(3600)

    task = asyncio.create_task(
        serve_port(str(link), LineSettings(), session, min_backoff_s=0.01, max_backoff_s=0.02)
    )
    try:
        await asyncio.wait_for(retried.wait(), 10)
        master, slave = os.openpty()
        link.symlink_to(os.ttyname(slave))
        await asyncio.wait_for(opened.wait(), 5)
    finally:
        logging.getLogger("edgeclaw.console").removeHandler(counter)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for fd in (master, slave):
            if fd >= 0:
                os.close(fd)
    tries = [r for r in caplog.records if "cannot open" in r.getMessage()]
    assert [r.levelno for r in tries].count(logging.WARNING) == 1  # the same failure is not repeated


# -- config, wiring and the CLI -------------------------------------------------
def _config(tmp_path: Path, **console):
    return config_from_dict(
        {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            "console": {"ports": ["/dev/ttyGS0"], **console},
        },
        "test.toml",
    )


@pytest.mark.parametrize(
    ("console", "key"),
    [
        ({"login_hash": "1234"}, "console.login_hash"),
        ({"login_hash": FAST_HASH, "login_hash_file": "/x"}, "console"),
        ({"login": "on"}, "console.login"),
        ({"width": 5}, "console.width"),
        ({"baud": 0}, "console.baud"),
        ({"ports": ["/dev/ttyS0", "/dev/ttyS0"]}, "console.ports[1]"),
        ({"max_login_failures": 0}, "console.max_login_failures"),
        ({"reconnect_min_s": 5, "reconnect_max_s": 1}, "console.reconnect_max_s"),
    ],
)
def test_console_config_errors_name_the_key(tmp_path, console, key):
    with pytest.raises(ConfigErrors) as err:
        _config(tmp_path, **console)
    assert f"test.toml: {key}:" in str(err.value)


def test_console_ports_start_the_console_service(tmp_path):
    from edgeclaw.daemon.scheduler import scheduler_service

    # The scheduler follows the channels (its jobs deliver through them); off, only the channels run.
    assert configured_services(_config(tmp_path)) == [console_service, scheduler_service]
    plain = config_from_dict({"board": "sim", "automation": {"enabled": False}}, "t.toml")
    assert configured_services(plain) == []


async def test_the_service_reads_the_hash_file_and_keeps_the_hash_out_of_tool_output(tmp_path):
    hash_file = tmp_path / "console-pin"
    hash_file.write_text(FAST_HASH + "\n")
    runtime = build_runtime(_config(tmp_path, login_hash_file=str(hash_file)))
    try:
        channel = console_service(runtime)
        assert channel.gate is not None and channel.gate.pin_hash.matches("2468")
        assert shared_agent(runtime) is channel.agent is shared_agent(runtime)  # one loop per daemon
        (runtime.workspace / "leak.txt").write_text(f"hash: {FAST_HASH}\n")
        outcome = await runtime.registry.execute("read_file", {"path": "leak.txt"}, ToolContext())
        assert FAST_HASH not in outcome.for_llm and "[REDACTED]" in outcome.for_llm
    finally:
        await runtime.aclose()


async def test_the_service_refuses_a_missing_hash_file_and_honours_login_off(tmp_path):
    runtime = build_runtime(_config(tmp_path, login_hash_file=str(tmp_path / "absent")))
    try:
        with pytest.raises(ConfigErrors, match=r"console\.login_hash_file: cannot read"):
            console_service(runtime)
    finally:
        await runtime.aclose()
    runtime = build_runtime(_config(tmp_path, login_hash=FAST_HASH, login="off"))
    try:
        assert console_service(runtime).gate is None
    finally:
        await runtime.aclose()


def test_hash_pin_command(state_env):
    def hash_pin_cli(pin: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "edgeclaw", "console", "hash-pin", "--stdin"],
            input=pin + "\n",
            capture_output=True,
            text=True,
            env=state_env,
            timeout=30,
        )

    out = hash_pin_cli("2468")
    assert out.returncode == 0, out.stderr
    assert parse_pin_hash(out.stdout.strip()).matches("2468")
    assert "login_hash" in out.stderr
    short = hash_pin_cli("12")
    assert short.returncode == 2 and "4 to 256" in short.stderr


def test_config_check_names_a_bad_console_hash(run_cli, state_env):
    Path(state_env["EDGECLAW_CONFIG"]).write_text('board = "sim"\n[console]\nlogin_hash = "2468"\n')
    out = run_cli("config", "check")
    assert out.returncode == 1 and "console.login_hash: expected $ALGORITHM" in out.stderr
