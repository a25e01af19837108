"""The `serial` tool end to end through the registry, against peers on the far side of real pty pairs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import termios
import tty
from collections.abc import Callable
from pathlib import Path

import pytest

from edgeclaw.tools.base import ToolContext
from tests.hw_support import call, make_runtime, ok, write_profile


class PtyPeer:
    """The device at the other end of a serial line: the master side of a pty pair, answering
    whatever the port writes with `answer(bytes) -> list of (delay s, bytes)`."""

    def __init__(self, answer: Callable[[bytes], list[tuple[float, bytes]]] | None = None) -> None:
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)  # no echo or line editing before the port is opened
        self.path = os.ttyname(self.slave)
        self.answer = answer
        self.heard = bytearray()
        self._tasks: set[asyncio.Task[None]] = set()
        self._buffer = b""

    def start(self) -> None:
        os.set_blocking(self.master, False)
        asyncio.get_running_loop().add_reader(self.master, self._on_readable)

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self.master, 4096)
        except OSError:
            return
        self.heard += chunk
        if self.answer is None:
            return
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            task = asyncio.ensure_future(self._send(self.answer(line + b"\n")))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, parts: list[tuple[float, bytes]]) -> None:
        for delay, data in parts:
            await asyncio.sleep(delay)
            os.write(self.master, data)

    def say(self, data: bytes) -> None:
        os.write(self.master, data)

    def close(self) -> None:
        with contextlib.suppress(ValueError, RuntimeError):
            asyncio.get_running_loop().remove_reader(self.master)
        for task in self._tasks:
            task.cancel()
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)


def echo(line: bytes) -> list[tuple[float, bytes]]:
    return [(0, line)]


def board(tmp_path: Path, *ports: tuple[str, str], extra: str = "") -> str:
    body = "".join(f'[[serial]]\npath = "{path}"\nname = "{name}"\n' for path, name in ports)
    return write_profile(tmp_path, "serial-board", extra + body)


@pytest.fixture
async def peer():
    p = PtyPeer(echo)
    p.start()
    yield p
    p.close()


@pytest.fixture
async def runtime(tmp_path, peer):
    rt = make_runtime(tmp_path, board=board(tmp_path, (peer.path, "modem")))
    yield rt
    await rt.aclose()


async def test_exchange_with_an_echoing_peer_returns_its_line(runtime, peer):
    data = await ok(runtime, "serial", action="exchange", port="modem", data="AT\r\n", until="\n")
    assert data["received_text"] == "AT\r\n"
    assert data["stopped"] == "delimiter"
    assert data["settings"] == "115200 8N1"
    assert bytes(peer.heard) == b"AT\r\n"


async def test_a_peer_that_never_answers_is_a_result_saying_so(tmp_path):
    silent = PtyPeer(answer=None)
    silent.start()
    rt = make_runtime(tmp_path, board=board(tmp_path, (silent.path, "logger")))
    try:
        outcome = await call(rt, "serial", action="exchange", port="logger", data="ping\n", timeout_ms=200)
    finally:
        await rt.aclose()
        silent.close()
    assert outcome.ok, outcome.error
    assert outcome.data["received"] == 0 and outcome.data["stopped"] == "timeout"
    assert "no answer from serial port" in outcome.for_llm and "within 0.2 s" in outcome.for_llm
    assert bytes(silent.heard) == b"ping\n"  # the write did reach the peer


async def test_a_peer_that_never_reads_fails_the_write_in_words(tmp_path):
    deaf = PtyPeer(answer=None)  # never started: nothing drains the line
    rt = make_runtime(tmp_path, board=board(tmp_path, (deaf.path, "printer")))
    try:
        failures = []
        for _ in range(100):  # until the kernel's buffer for the line is full
            outcome = await call(
                rt, "serial", action="write", port="printer", hex="00" * 4096, timeout_ms=200
            )
            if not outcome.ok:
                failures.append(outcome.error)
                break
        still = await call(rt, "serial", action="list")
    finally:
        await rt.aclose()
        deaf.close()
    assert failures, "the line never filled up"
    assert "bytes written within 0.2 s (flow control holding the line?)" in failures[0]
    assert still.ok


async def test_write_in_hex_and_read_by_count_keeps_the_rest_for_the_next_read(runtime, peer):
    await ok(runtime, "serial", action="write", port=peer.path, hex="de ad be ef 0a")
    first = await ok(runtime, "serial", action="read", port=peer.path, count=2)
    rest = await ok(runtime, "serial", action="read", port=peer.path, until_hex="0a")
    assert (first["received_hex"], first["stopped"]) == ("de ad", "count")
    assert (rest["received_hex"], rest["stopped"]) == ("be ef 0a", "delimiter")
    # Bytes that are not text are shown as hex in the readable answer too.
    outcome = await call(runtime, "serial", action="exchange", port=peer.path, hex="ff 00 0a", until_hex="0a")
    assert "hex: ff 00 0a" in outcome.for_llm


async def test_bytes_past_the_delimiter_stay_for_the_next_read(runtime, peer):
    await ok(runtime, "serial", action="open", port="modem")  # opening drops what came before it
    peer.say(b"$GPGGA,1\r\n$GPRMC,2\r\n")
    one = await ok(runtime, "serial", action="read", port="modem", until="\r\n")
    two = await ok(runtime, "serial", action="read", port="modem", until="\r\n")
    assert (one["received_text"], two["received_text"]) == ("$GPGGA,1\r\n", "$GPRMC,2\r\n")


async def test_idle_ms_ends_a_read_when_the_line_goes_quiet(tmp_path):
    # A 0.05 s pause inside the answer, well under the 1 s idle time; then quiet until long after
    # the call's own 20 s timeout would have ended it.
    chatty = PtyPeer(lambda line: [(0, b"part one "), (0.05, b"part two"), (60, b"much later")])
    chatty.start()
    rt = make_runtime(tmp_path, board=board(tmp_path, (chatty.path, "sensor")))
    try:
        data = await ok(
            rt, "serial", action="exchange", port="sensor", data="go\n", timeout_ms=20000, idle_ms=1000
        )
    finally:
        await rt.aclose()
        chatty.close()
    assert data["received_text"] == "part one part two"
    assert data["stopped"] == "idle"
    assert data["elapsed_ms"] < 10000


async def test_flush_drops_what_the_peer_said_before_the_write(runtime, peer):
    await ok(runtime, "serial", action="open", port="modem")
    peer.say(b"boot noise\r\n")
    await _until(lambda: _pending(peer) > 0)
    data = await ok(runtime, "serial", action="exchange", port="modem", data="V\n", until="\n", flush=True)
    assert data["received_text"] == "V\n"
    assert data["discarded"] == len(b"boot noise\r\n")


async def test_open_applies_baud_parity_and_stop_bits_to_the_line(runtime, peer):
    data = await ok(runtime, "serial", action="open", port="modem", baud=9600, parity="E", stop_bits=2)
    assert data["settings"] == "9600 8E2"
    attrs = termios.tcgetattr(peer.slave)  # the same tty the tool configured
    assert attrs[4] == termios.B9600 and attrs[5] == termios.B9600
    # A pty keeps the speed but drops parity and stop bits from its termios (there are no wires),
    # so those are checked where pyserial turns them into termios flags.
    opened = runtime.hardware.serial().link(peer.path, "")._serial
    assert (opened.parity, opened.stopbits, opened.bytesize) == ("E", 2, 8)
    # Later calls keep the port's settings unless they give others.
    again = await ok(runtime, "serial", action="exchange", port="modem", data="x\n", until="\n")
    assert again["settings"] == "9600 8E2"
    assert (await ok(runtime, "serial", action="close", port="modem"))["closed"] is True
    reopened = await ok(runtime, "serial", action="exchange", port="modem", data="y\n", until="\n")
    assert reopened["settings"] == "115200 8N1"


async def test_two_sessions_never_interleave_on_one_port(tmp_path):
    # Each command's answer comes in pieces; another session reading meanwhile would take them.
    def slow(line: bytes) -> list[tuple[float, bytes]]:
        word = line.strip()
        return [(0.02, b"re:"), (0.05, word), (0.05, b" END\n")]

    device = PtyPeer(slow)
    device.start()
    rt = make_runtime(tmp_path, board=board(tmp_path, (device.path, "plc")))

    async def exchange(session: str, word: str) -> str:
        ctx = ToolContext(channel="cli", session_key=session)
        args = {
            "action": "exchange",
            "port": "plc",
            "data": word + "\n",
            "until": "END\n",
            "timeout_ms": 3000,
        }
        outcome = await rt.registry.execute("serial", args, ctx)
        assert outcome.ok, outcome.error
        return outcome.data["received_text"]

    try:
        answers = await asyncio.gather(*(exchange(f"s{i}", f"cmd{i}") for i in range(4)))
    finally:
        await rt.aclose()
        device.close()
    assert answers == [f"re:cmd{i} END\n" for i in range(4)]


async def test_list_offers_the_granted_ports_but_never_the_consoles_or_the_bridges(tmp_path):
    console, bridge, free = PtyPeer(), PtyPeer(), PtyPeer()
    # The console is configured by one name, the grant uses another for the same device.
    alias = tmp_path / "serial0"
    alias.symlink_to(console.path)
    profile = board(
        tmp_path,
        (str(alias), "header UART"),
        (bridge.path, "ESP32"),
        (free.path, "GPS"),
        extra=f'[esp32]\nport = "{bridge.path}"\n',
    )
    rt = make_runtime(tmp_path, board=profile, console={"ports": [console.path]})
    try:
        listed = await ok(rt, "serial", action="list")
        refusals = [
            await call(rt, "serial", action="write", port="header UART", data="rm -rf /\n"),
            await call(rt, "serial", action="read", port=str(alias)),
            await call(rt, "serial", action="exchange", port="ESP32", data='{"op":"hello"}\n'),
            await call(rt, "serial", action="open", port=bridge.path, dry_run=True),
        ]
        allowed = await call(rt, "serial", action="open", port="GPS")
    finally:
        await rt.aclose()
        for p in (console, bridge, free):
            p.close()
    assert [p["port"] for p in listed["ports"]] == [free.path]
    assert {w["reason"] for w in listed["withheld"]} == {"the console's port", "the ESP32 bridge's port"}
    assert all(o.refused for o in refusals), [o.error for o in refusals]
    assert "the console's port" in refusals[0].error and "ESP32 bridge" in refusals[2].error
    assert allowed.ok, allowed.error


async def test_the_sim_bridges_own_pty_is_never_offered(tmp_path):
    # The sim ESP32 talks over a pty made when it starts; a grant that resolves to it is refused.
    link = tmp_path / "bridge-link"
    profile = board(tmp_path, (str(link), "bridge"), extra='simulated = true\n[esp32]\nport = "sim"\n')
    rt = make_runtime(tmp_path, board=profile)
    try:
        await ok(rt, "esp32", action="version")
        pty = rt.hardware.bridge_port()
        assert pty is not None and pty.startswith("/dev/pts/")
        link.symlink_to(pty)
        outcome = await call(rt, "serial", action="write", port="bridge", data="{}\n")
        listed = await ok(rt, "serial", action="list")
    finally:
        await rt.aclose()
    assert outcome.refused and "the ESP32 bridge's port" in outcome.error, outcome.error
    assert listed["ports"] == []


async def test_ports_the_profile_does_not_grant_are_refused_by_name(runtime, peer):
    outcome = await call(runtime, "serial", action="open", port="/dev/ttyS0")
    assert outcome.refused
    assert "/dev/ttyS0" in outcome.error and f"granted: {peer.path} (modem)" in outcome.error


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"action": "write", "port": "modem"}, "exactly one of 'data'"),
        ({"action": "write", "port": "modem", "data": "a", "hex": "61"}, "exactly one of 'data'"),
        ({"action": "read", "port": "modem", "data": "a"}, "sends nothing"),
        ({"action": "write", "port": "modem", "data": "a", "until": "\n"}, "reads nothing"),
        ({"action": "read", "port": "modem", "count": 5000}, "over the 4096-byte limit"),
        ({"action": "read", "port": "modem", "until": "a", "until_hex": "61"}, "at most one of 'until'"),
        ({"action": "read"}, "'port' is required"),
    ],
)
async def test_bad_arguments_are_refused_in_words_before_the_port_is_touched(runtime, peer, args, words):
    outcome = await call(runtime, "serial", **args)
    assert outcome.refused, outcome.error
    assert words in outcome.error
    assert runtime.hardware.live() == []


async def test_a_port_another_program_holds_is_refused_in_words(runtime, peer):
    import serial

    holder = serial.Serial(peer.path, exclusive=True)
    try:
        outcome = await call(runtime, "serial", action="open", port="modem")
    finally:
        holder.close()
    assert not outcome.ok
    assert "another program holds it open" in outcome.error


async def test_a_peer_hanging_up_fails_the_call_and_the_next_call_opens_again(tmp_path):
    device = PtyPeer(echo)
    device.start()
    rt = make_runtime(tmp_path, board=board(tmp_path, (device.path, "usb")))
    try:
        assert (await ok(rt, "serial", action="exchange", port="usb", data="a\n", until="\n"))[
            "received"
        ] == 2
        asyncio.get_running_loop().remove_reader(device.master)
        os.close(device.master)  # the adapter is pulled: the port side reads EIO
        outcome = await call(rt, "serial", action="read", port="usb", timeout_ms=2000)
        assert not outcome.ok and "went away" in outcome.error
        assert rt.hardware.live() == []  # the dead port was closed, not kept
    finally:
        await rt.aclose()
        with contextlib.suppress(OSError):
            os.close(device.slave)


def _pending(peer: PtyPeer) -> int:
    import fcntl
    import struct

    # FIONREAD on the port side: what the peer wrote that nobody read yet.
    return struct.unpack("i", fcntl.ioctl(peer.slave, termios.FIONREAD, b"\0\0\0\0"))[0]


async def _until(condition: Callable[[], bool], deadline_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not condition():
        assert loop.time() < end, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_a_question_about_what_hangs_off_a_port_finds_the_serial_tool(tmp_path, peer):
    from edgeclaw.agent import tool_selection

    rt = make_runtime(tmp_path, board=board(tmp_path, (peer.path, "GPS receiver")))
    try:
        defs = rt.registry.definitions(ToolContext(channel="cli", peer_kind="local"), "openai")
        vocab = tool_selection.board_vocabulary(rt.board)
        best = tool_selection.rank(defs, "where does the GPS receiver say we are?", vocabulary=vocab)[0]
    finally:
        await rt.aclose()
    assert tool_selection.definition_parts(defs[best])[0] == "serial"


# -- the sim board's modem ------------------------------------------------------------------------


async def test_the_sim_boards_modem_answers_at_commands(tmp_path):
    sim = make_runtime(tmp_path)
    try:
        listed = await ok(sim, "serial", action="list")
        hello = await ok(sim, "serial", action="exchange", port="modem", data="ATI\r", until="OK\r\n")
        quiet = await ok(sim, "serial", action="exchange", port="modem", data="ATE0\r", until="OK\r\n")
        signal = await ok(sim, "serial", action="exchange", port="modem", data="AT+CSQ\r", until="OK\r\n")
        wrong = await ok(sim, "serial", action="exchange", port="modem", data="AT+NOPE\r", until="ERROR\r\n")
    finally:
        await sim.aclose()
    assert listed["ports"] == [{"port": "sim:modem", "name": "modem"}]
    assert hello["received_text"] == "ATI\r\r\nedgeclaw sim modem\r\n\r\nOK\r\n"  # echo on at power-up
    assert quiet["received_text"].endswith("OK\r\n")
    assert signal["received_text"] == "\r\n+CSQ: 20,99\r\n\r\nOK\r\n"  # no echo after ATE0
    assert wrong["received_text"] == "\r\nERROR\r\n"


def test_a_sim_port_on_a_real_board_is_refused_when_the_profile_loads(tmp_path):
    from edgeclaw import board as boards
    from edgeclaw.errors import ConfigErrors

    path = board(tmp_path, ("sim:modem", "modem"), ("/dev/ttyUSB0", "a"), ("/dev/ttyUSB0", "b"))
    with pytest.raises(ConfigErrors) as caught:
        boards.read_profile(Path(path))
    text = str(caught.value)
    assert "serial[0].path: 'sim:modem' is a sim part: only a simulated board" in text
    assert "serial[2].path: /dev/ttyUSB0 is granted twice" in text


def test_tool_call_serial_on_the_sim_board_from_the_command_line(tmp_path):
    import json
    import subprocess
    import sys

    args = json.dumps({"action": "exchange", "port": "modem", "data": "AT+GMR\r", "until": "OK\r\n"})
    env = {**os.environ, "EDGECLAW_STATE_DIR": str(tmp_path / "state")}
    command = [sys.executable, "-m", "edgeclaw", "tool", "call", "serial", args, "--board", "sim"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "1.0" in done.stdout and "OK" in done.stdout
