"""The serial console over pty pairs, with a terminal on the other end.

The daemon runs in a thread with its own event loop (the real `Daemon`, with
the real console service); the test drives the technician's end of each pty
with pexpect. The console opens a symlink, so a test can make the port
vanish (close the pty) and come back (point the link at a new pty).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pexpect
import pexpect.fdpexpect
import pytest

from edgeclaw.agent.channel import InboundMessage, Reply
from edgeclaw.backends.sim.board import I2C_BUS1_PARTS
from edgeclaw.channels.console.channel import ConsoleChannel
from edgeclaw.config.loader import config_from_dict
from edgeclaw.config.pin_hash import hash_pin
from edgeclaw.daemon.console import console_service
from edgeclaw.daemon.lifecycle import Daemon
from edgeclaw.daemon.runtime import Runtime
from edgeclaw.tools.approval import ApprovalBroker
from edgeclaw.tools.base import Tool, ToolContext, ToolResult
from tests.llm_server import Scripted, ScriptedLLM, openai_text, openai_tools, without_note

PIN = "2468"
PIN_HASH = hash_pin(PIN)
DEVICE = "bench-01"
PROMPT = f"{DEVICE}> "


# -- test tools ---------------------------------------------------------------
class FlashFirmware(Tool):
    """Asks the approval broker before doing anything, like a risky hardware tool would."""

    name = "flash_firmware"
    group = "hardware"
    description = "Flash an image to the attached microcontroller (asks first)."
    parameters = {
        "type": "object",
        "properties": {"image": {"type": "string"}},
        "required": ["image"],
        "additionalProperties": False,
    }

    def __init__(self, broker: ApprovalBroker, timeout_s: float = 60.0) -> None:
        self.broker = broker
        self.approval_timeout_s = timeout_s

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        decision, reason = await self.broker.request(
            self.name, f"flash {args['image']} to the STM32", ctx, timeout_s=self.approval_timeout_s
        )
        if not decision.allows:
            return ToolResult.error(f"not flashed: {reason}")
        return ToolResult(f"flashed {args['image']} ({decision.value})")


class ManyLines(Tool):
    name = "many_lines"
    group = "fs"
    description = "Print numbered lines."
    parameters = {
        "type": "object",
        "properties": {"count": {"type": "integer"}},
        "required": ["count"],
        "additionalProperties": False,
    }

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return "\n".join(f"row {i:04d}" for i in range(1, args["count"] + 1))


# -- ptys and terminals -----------------------------------------------------------
class PtyPort:
    """A pty pair; the console opens `link`, the test is the terminal on the master side.

    The test keeps its own slave descriptor open, so the master never reads EIO
    while the console is between opens.
    """

    def __init__(self, link: Path) -> None:
        self.link = link
        self.master = self.slave = -1
        self.renew()

    def renew(self) -> None:
        self.master, self.slave = os.openpty()
        self._point_to(os.ttyname(self.slave))

    def _point_to(self, target: str) -> None:
        tmp = self.link.with_name(self.link.name + ".new")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(target)
        os.replace(tmp, self.link)  # atomic: the console never sees a half-made link

    def terminal(self) -> pexpect.fdpexpect.fdspawn:
        # What the console is expected to show comes within this; a loaded machine can take seconds.
        return pexpect.fdpexpect.fdspawn(self.master, encoding="utf-8", codec_errors="replace", timeout=30)

    def write(self, data: bytes) -> None:
        os.write(self.master, data)

    def vanish(self) -> None:
        """Both ends closed: to the console, the cable was pulled and the device node is gone.

        The link is pointed at nothing at once: the kernel reuses pty numbers, and
        another process's new pty must not look like this port coming back.
        """
        self._point_to(str(self.link.with_name(self.link.name + ".gone")))
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.master = self.slave = -1


def login(term: pexpect.fdpexpect.fdspawn) -> None:
    term.expect("PIN: ")
    term.send(PIN + "\r")
    term.expect("Logged in.")
    term.expect_exact(PROMPT)


def run(term: pexpect.fdpexpect.fdspawn, line: str) -> str:
    """Type a line, return everything up to the next prompt."""
    term.send(line + "\r")
    term.expect_exact(PROMPT)
    return term.before


def unwrapped(text: str) -> str:
    """Rows joined again: long paths wrap (with an indent) at the console's 80 columns."""
    return re.sub(r"\r\n *", "", text)


# -- the daemon in a thread -----------------------------------------------------
class ConsoleDaemon:
    def __init__(self, config: dict[str, Any], extra: Callable[[Runtime], None] | None = None) -> None:
        self.config = config_from_dict(config, "test.toml")
        self.extra = extra
        self.runtime: Runtime | None = None
        self.loop = asyncio.new_event_loop()

        @contextlib.asynccontextmanager
        async def test_tools(runtime: Runtime):
            self.runtime = runtime
            if extra is not None:
                extra(runtime)
            yield

        self.channel: ConsoleChannel | None = None

        def console(runtime: Runtime) -> ConsoleChannel:
            self.channel = console_service(runtime)
            return self.channel

        self.daemon = Daemon(self.config, services=[test_tools, console], environ={})
        self.result: list[int] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.result.append(self.loop.run_until_complete(self.daemon.run()))

    def start(self) -> ConsoleDaemon:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.daemon.ready.is_set():
            assert self.thread.is_alive() and time.monotonic() < deadline, "daemon did not start"
            time.sleep(0.02)
        return self

    def call(self, coro: Any, timeout: float = 10) -> Any:
        """Run a coroutine on the daemon's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.daemon.request_stop)
        self.thread.join(15)
        assert self.result == [0]
        self.loop.close()


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
def console(tmp_path: Path, request: pytest.FixtureRequest):
    """Start a daemon serving the console on `n` ptys; yields (daemon, [PtyPort...])."""
    started: list[tuple[ConsoleDaemon, list[PtyPort]]] = []

    def make(
        n: int = 1,
        *,
        with_llm: bool = True,
        extra: Callable[[Runtime], None] | None = None,
        **console_keys: Any,
    ) -> tuple[ConsoleDaemon, list[PtyPort]]:
        ports = [PtyPort(tmp_path / f"ttyTEST{i}") for i in range(n)]
        config: dict[str, Any] = {
            "board": "sim",
            "device_id": DEVICE,
            "state_dir": str(tmp_path / "state"),
            "console": {
                "ports": [str(p.link) for p in ports],
                "login_hash": PIN_HASH,
                "login_delay_s": 0,
                "reconnect_min_s": 0.05,
                "reconnect_max_s": 0.2,
                **console_keys,
            },
        }
        if with_llm:
            llm: ScriptedLLM = request.getfixturevalue("llm")
            config["agent"] = {"providers": ["local"], "provider_attempts": 1}
            config["providers"] = {
                "local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1", "timeout_s": 15}
            }
        daemon = ConsoleDaemon(config, extra).start()
        started.append((daemon, ports))
        return daemon, ports

    yield make
    for daemon, ports in started:
        daemon.stop()
        for port in ports:
            port.vanish()


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# -- the tests --------------------------------------------------------------------
def test_banner_login_and_a_chat_turn(console, llm):
    llm.reply(openai_text("Hello, technician. All sensors nominal."))
    _, (port,) = console()
    term = port.terminal()
    term.expect(r"edgeclaw \d+\.\d+\.\d+\S* · device bench-01 · board sim")
    term.expect(r"LLM: local \(m\) reachable\.")
    term.expect("Ctrl-C stops a turn, Ctrl-D logs out.")
    term.expect("PIN: ")
    term.send("1357\r")
    term.expect_exact("****")  # the entry is masked
    term.expect(r"Wrong PIN \(4 tries left before a lockout\)\.")
    term.expect("PIN: ")
    term.send(PIN + "\r")
    term.expect("Logged in.")
    term.expect_exact(PROMPT)
    out = run(term, "how are the sensors?")
    assert "All sensors nominal." in out
    sent = llm.requests[0]["messages"]
    assert sent[-1]["role"] == "user" and without_note(sent[-1]["content"]) == "how are the sensors?"
    # Ctrl-D on an empty line ends the login; the gate is back.
    term.send("\x04")
    term.expect(r"Logged out \(Ctrl-D\)\.")
    term.expect("PIN: ")


def test_lockout_after_five_wrong_entries(console, caplog):
    _, (port,) = console(with_llm=False)
    term = port.terminal()
    term.expect("none configured; slash commands only")
    for left in ("4 tries", "3 tries", "2 tries", "1 try"):
        term.expect("PIN: ")
        term.send("0000\r")
        term.expect_exact(f"Wrong PIN ({left} left before a lockout).")
    term.expect("PIN: ")
    term.send("0000\r")
    term.expect(r"Wrong PIN\.")
    term.expect(r"Locked after too many wrong entries; try again in (\d+) s\.")
    assert 295 <= int(term.match.group(1)) <= 300
    # The right PIN does not help while locked: it is not even checked.
    term.expect("PIN: ")
    term.send(PIN + "\r")
    term.expect("Locked after too many wrong entries")
    term.expect("PIN: ")
    messages = [r.getMessage() for r in caplog.records if r.name == "edgeclaw.audit"]
    assert sum("outcome=failed" in m or "outcome=locked_out" in m for m in messages) == 5
    assert any("outcome=locked_out" in m and "lockout_s=300" in m for m in messages)
    assert any("login outcome=refused" in m for m in messages)


def test_slash_commands_and_the_sim_i2c_scan(console):
    _, (port,) = console(with_llm=False)
    term = port.terminal()
    login(term)
    term.send("/tools\r")
    listing = ""
    while term.expect([r"-- more: \d+ of \d+ rows", PROMPT]) == 0:
        listing += term.before
        term.send(" ")
    listing += term.before
    assert "session_status" in listing and "read_file" in listing
    scan = run(term, '/call i2c {"action":"scan","bus":1}')
    for address in ("0x48", "0x50", "0x76"):
        assert address in scan
    status = run(term, "/call session_status {}")
    assert f"console:{port.link}" in unwrapped(status)
    help_text = run(term, "/help")
    assert "/call TOOL" in help_text and "/logout" in help_text
    term.send("/logout\r")
    term.expect(r"Logged out \(/logout\)\.")


def test_ctrl_c_cancels_a_long_turn(console, llm):
    # The model would answer after 30 s (the provider gives up at 15 s, with an error, not "Stopped.").
    llm.reply(Scripted(hang_s=30, body={}), openai_text("second answer"))
    _, (port,) = console()
    term = port.terminal()
    login(term)
    term.send("run the long diagnostic\r")
    term.expect_exact("(working; Ctrl-C stops it)")  # the turn is in flight
    started = time.monotonic()
    term.send("\x03")
    term.expect_exact("^C")
    term.expect("Stopped.")
    term.expect_exact(PROMPT)
    assert time.monotonic() - started < 10  # long before the model would have answered
    assert "second answer" in run(term, "and now?")


def test_ctrl_c_stops_a_slow_call(console):
    _, (port,) = console(with_llm=False)
    term = port.terminal()
    login(term)
    term.send('/call gpio {"action": "pulse", "pin": "led", "duration_ms": 10000}\r')  # the longest allowed
    term.expect_exact("(working; Ctrl-C stops it)")
    started = time.monotonic()
    term.send("\x03")
    term.expect_exact("^C")
    term.expect_exact("Stopped.")
    term.expect_exact(PROMPT)
    assert time.monotonic() - started < 8  # before the 10 s pulse, started before `started`, would have ended
    assert "reads inactive" in run(term, '/call gpio {"action": "read", "pin": "led"}')


def test_an_approval_answered_on_the_console(console):
    def tools(runtime: Runtime) -> None:
        runtime.registry.register(FlashFirmware(runtime.approvals))

    _, (port,) = console(with_llm=False, extra=tools)
    term = port.terminal()
    login(term)
    term.send('/call flash_firmware {"image": "blink.bin"}\r')
    term.expect("Approval needed: flash_firmware wants to run:")
    term.expect("flash blink.bin to the STM32")
    term.expect(r"allow once / always / deny \[o/w/d\] \((\d+) s\)\? ")
    first = int(term.match.group(1))
    assert 55 <= first <= 60
    # The countdown redraws the question in place.
    term.expect(r"\x1b\[Kallow once / always / deny \[o/w/d\] \((\d+) s\)\? ")
    assert int(term.match.group(1)) < first
    term.send("maybe\r")  # a word, not a key: read to Enter, and not an answer
    term.expect(r"Answer o \(allow once\), w \(allow always\) or d \(deny\)\.")
    term.send("o")  # one key answers, as the question says: no Enter needed
    term.expect("Allowed once.")
    term.expect(r"flashed blink\.bin \(allow-once\)")
    term.expect_exact(PROMPT)
    term.send('/call flash_firmware {"image": "evil.bin"}\r')
    term.expect("flash evil.bin to the STM32")
    term.expect(r"\[o/w/d\]")
    term.send("d")
    term.expect("Denied.")
    term.expect("error: not flashed: denied by the person asked")
    term.expect_exact(PROMPT)


def test_approvals_take_one_key_and_a_word_cannot_answer_letter_by_letter(console):
    def tools(runtime: Runtime) -> None:
        runtime.registry.register(FlashFirmware(runtime.approvals))

    _, (port,) = console(with_llm=False, extra=tools)
    term = port.terminal()
    login(term)
    term.send('/call flash_firmware {"image": "a.bin"}\r')
    term.expect(r"\[o/w/d\] \(\d+ s\)\? ")
    term.send("w")
    term.expect_exact("Allowed from now on.")
    term.expect(r"flashed a\.bin \(allow-always\)")
    term.expect_exact(PROMPT)
    # "maybe" typed key by key: "m" starts a written answer, so its "a" and "y" grant nothing.
    term.send('/call flash_firmware {"image": "b.bin"}\r')
    term.expect(r"\[o/w/d\] \(\d+ s\)\? ")
    for key in "maybe":
        term.send(key)
        time.sleep(0.05)
    term.expect_exact("maybe")
    assert "Allowed" not in term.before
    term.send("\r")
    term.expect_exact("Answer o (allow once), w (allow always) or d (deny).")
    term.send("deny\r")  # a whole word, then Enter, answers too
    term.expect_exact("Denied.")
    term.expect("error: not flashed: denied by the person asked")
    term.expect_exact(PROMPT)
    # A key and then the Enter of habit: the Enter is not taken as a line at the prompt.
    term.send('/call flash_firmware {"image": "c.bin"}\r')
    term.expect(r"\[o/w/d\] \(\d+ s\)\? ")
    term.send("o")
    term.expect_exact("Allowed once.")
    term.expect_exact(PROMPT)
    term.send("\r")
    term.send("/status\r")
    term.expect_exact("session console:")
    assert PROMPT not in term.before  # no empty line was entered in between
    term.expect_exact(PROMPT)
    # Three non-answers deny.
    term.send('/call flash_firmware {"image": "d.bin"}\r')
    term.expect(r"\[o/w/d\] \(\d+ s\)\? ")
    for _ in range(3):
        term.send("x\r")
        term.expect_exact("Answer o (allow once)")
    term.expect_exact("Denied (no answer after 3 tries).")
    term.expect("error: not flashed: denied by the person asked")


def test_approval_during_a_model_turn_and_ctrl_c_at_the_question(console, llm):
    def tools(runtime: Runtime) -> None:
        runtime.registry.register(FlashFirmware(runtime.approvals))

    llm.reply(
        openai_tools(("flash_firmware", {"image": "fw.bin"})),
        openai_text("Flashed it."),
        openai_tools(("flash_firmware", {"image": "fw2.bin"})),
        openai_text("Not reached."),
    )
    _, (port,) = console(extra=tools)
    term = port.terminal()
    login(term)
    term.send("flash the new firmware\r")
    term.expect("flash fw.bin to the STM32")
    term.expect(r"\[o/w/d\]")
    term.send("w\r")
    term.expect("Allowed from now on.")
    term.expect("Flashed it.")
    term.expect_exact(PROMPT)
    assert "flashed fw.bin (allow-always)" in llm.requests[1]["messages"][-1]["content"]
    # Ctrl-C at the question denies and stops the whole turn.
    term.send("again please\r")
    term.expect("flash fw2.bin to the STM32")
    term.expect(r"\[o/w/d\]")
    term.send("\x03")
    term.expect("Denied.")
    term.expect("Stopped.")
    term.expect_exact(PROMPT)


def test_line_editing_and_bytes_that_are_not_utf8(console):
    _, (port,) = console(with_llm=False)
    term = port.terminal()
    login(term)
    # Backspace, DEL, Ctrl-U, Ctrl-W and an arrow key's escape sequence.
    port.write(b"/stax\x7fg\x08tus now\x17\x1b[A\r")
    term.expect_exact("session console:")
    term.expect_exact(PROMPT)
    port.write(b"rubbish\x15/status\n")  # Ctrl-U, then LF alone ends the line too
    term.expect_exact("session console:")
    term.expect_exact(PROMPT)
    port.write(b"/status\r\n")  # CRLF: one line, not a line and an empty one
    term.expect_exact("session console:")
    term.expect_exact(PROMPT)
    # Invalid UTF-8 inside a line: dropped, counted, and the line still works.
    port.write(b"/call session_status\xff\xfe {}\xc3\r")
    term.expect("ignored 3 bytes that were not UTF-8")
    term.expect("channel: console")
    term.expect_exact(PROMPT)
    # Line noise (as from a wrong baud rate) and UTF-8 text: the session carries on.
    port.write(bytes(range(0x80, 0x100)) + b"\x00\x01\x02\x1b]0;title\x07\x15")
    port.write('/call read_file {"path": "température ✓.txt"}\r'.encode())
    term.expect("température ✓.txt")  # UTF-8 in, UTF-8 out
    term.expect_exact(PROMPT)
    assert "channel: console" in run(term, "/call session_status {}")


def test_long_output_is_paged_and_cut(console):
    def tools(runtime: Runtime) -> None:
        runtime.registry.register(ManyLines())

    _, (port,) = console(with_llm=False, extra=tools, page_lines=10, max_output_lines=25)
    term = port.terminal()
    login(term)
    term.send('/call many_lines {"count": 40}\r')
    term.expect("row 0010")
    term.expect(r"-- more: 10 of 40 rows")
    assert "row 0011" not in term.before
    term.send(" ")
    term.expect("row 0020")
    term.expect(r"-- more: 20 of 40 rows")
    term.send("q")
    term.expect(r"\[20 more rows not shown\]")
    term.expect_exact(PROMPT)
    term.send('/call many_lines {"count": 40}\r')
    term.expect(r"-- more: 10 of 40")
    term.send("a")  # all the rest, up to the cut
    term.expect("row 0025")
    term.expect(r"\[15 more rows cut: the console shows at most 25")
    assert "row 0026" not in term.before
    term.expect_exact(PROMPT)


def test_a_paste_at_the_more_question_ends_paging_and_becomes_the_next_line(console):
    def tools(runtime: Runtime) -> None:
        runtime.registry.register(ManyLines())

    _, (port,) = console(with_llm=False, extra=tools, page_lines=10)
    term = port.terminal()
    login(term)
    term.send('/call many_lines {"count": 30}\r')
    term.expect(r"-- more: 10 of 30 rows")
    term.send("/stop\r")  # pasted (or typed ahead) while the question is up
    term.expect_exact("[20 more rows not shown]")
    term.expect_exact(PROMPT + "/stop")  # kept as input, not swallowed
    term.expect_exact("Nothing is running.")
    term.expect_exact(PROMPT)
    assert "row 0011" not in term.before
    # The paging keys still page, a lone Enter included.
    term.send('/call many_lines {"count": 30}\r')
    term.expect(r"-- more: 10 of 30 rows")
    term.send("\r")
    term.expect("row 0020")
    term.expect(r"-- more: 20 of 30 rows")
    term.send("q")
    term.expect_exact("[10 more rows not shown]")
    term.expect_exact(PROMPT)


def test_the_registrys_truncation_note_survives_the_consoles_row_limit(console):
    def tools(runtime: Runtime) -> None:
        runtime.registry.register(ManyLines())

    # 5000 rows of 9 bytes: over the registry's 32 KiB, and far over the console's 25 rows.
    _, (port,) = console(with_llm=False, extra=tools, page_lines=0, max_output_lines=25)
    term = port.terminal()
    login(term)
    term.send('/call many_lines {"count": 5000}\r')
    term.expect("row 0025")
    term.expect(r"\[\d+ more rows cut: the console shows at most 25")
    term.expect(r"\[output truncated: \d+ of 44999 bytes not shown\]")
    term.expect_exact(PROMPT)


def test_up_and_down_recall_earlier_lines(console):
    _, (port,) = console(with_llm=False, page_lines=0)
    term = port.terminal()
    login(term)
    assert "i2c (hardware):" in run(term, "/help i2c")
    assert "session console:" in run(term, "/status")
    term.send("\x1b[A")  # Up: the last line
    term.expect_exact("\x1b[K" + PROMPT + "/status")
    term.send("\x1bOA")  # Up again, as a terminal in application cursor mode sends it
    term.expect_exact("\x1b[K" + PROMPT + "/help i2c")
    term.send("\r")
    term.expect_exact("i2c (hardware):")
    term.expect_exact(PROMPT)
    # Down past the newest line gives back what was being typed.
    term.send("/sta")
    term.send("\x1b[A")
    term.expect_exact("\x1b[K" + PROMPT + "/help i2c")
    term.send("\x1b[B")
    term.expect_exact("\x1b[K" + PROMPT + "/sta")
    term.send("tus\r")
    term.expect_exact("session console:")
    term.expect_exact(PROMPT)
    # A new login starts with no history: the last technician's lines are gone.
    term.send("\x04")
    login(term)
    term.send("\x1b[A")
    term.expect_exact("\x07")
    term.send("/status\r")
    term.expect_exact("session console:")


def test_tab_completes_commands_and_tool_names(console):
    _, (port,) = console(with_llm=False, page_lines=0)
    term = port.terminal()
    login(term)
    term.send("/he\t")
    term.expect_exact("\x1b[K" + PROMPT + "/help ")
    term.send("i2\t")
    term.expect_exact("\x1b[K" + PROMPT + "/help i2c ")
    term.send("\r")
    term.expect_exact("i2c (hardware):")
    term.expect_exact(PROMPT)
    term.send("/s\t")  # as far as /status and /stop agree
    term.expect_exact("\x1b[K" + PROMPT + "/st")
    term.send("\t")  # then both are listed, and the line stays
    term.expect_exact("/status  /stop\r\n" + PROMPT + "/st")
    term.send("\x15/call hardware_i\t")
    term.expect_exact("\x1b[K" + PROMPT + "/call hardware_info ")
    term.send("{}\r")
    term.expect("board sim")
    term.expect_exact(PROMPT)
    term.send("/call nosuchtool\t")
    term.expect_exact("\x07")  # nothing to complete: the bell


def test_help_for_a_tool_on_the_console(console):
    _, (port,) = console(with_llm=False, page_lines=0)
    term = port.terminal()
    login(term)
    text = unwrapped(run(term, "/help gpio"))
    assert "gpio (hardware): GPIO pins" in text
    assert "action" in text and "one of list, read, write, pulse, pwm, wait, required" in text


def test_a_message_delivered_at_the_more_question_leaves_it_on_screen(console):
    def tools(runtime: Runtime) -> None:
        runtime.registry.register(ManyLines())

    daemon, (port,) = console(with_llm=False, extra=tools, page_lines=10)
    term = port.terminal()
    login(term)
    term.send('/call many_lines {"count": 30}\r')
    term.expect(r"-- more: 10 of 30 rows")
    msg = InboundMessage("console", "", chat_id=str(port.link))
    daemon.call(daemon.channel.send(Reply("cron: the greenhouse door is open", msg.session_key, True, msg)))
    term.expect_exact("\x1b[Kcron: the greenhouse door is open\r\n")
    term.expect_exact("-- more: 10 of 30 rows")  # asked again, under the message
    term.send(" ")
    term.expect("row 0020")


def test_the_port_vanishing_at_the_more_question_is_survived(console, caplog):
    """Tearing a session down mid-page (cable pulled, then the daemon stopping) must not hang."""
    caplog.set_level(logging.INFO)

    def tools(runtime: Runtime) -> None:
        runtime.registry.register(ManyLines())

    _, (port,) = console(with_llm=False, extra=tools, page_lines=10)
    term = port.terminal()
    login(term)
    term.send('/call many_lines {"count": 30}\r')
    term.expect(r"-- more: 10 of 30 rows")
    port.vanish()
    _wait_for(lambda: any("port lost" in r.getMessage() for r in list(caplog.records)), "the loss")
    port.renew()
    term = port.terminal()
    term.expect("device bench-01")  # reopened: the session before it ended
    login(term)
    term.send('/call many_lines {"count": 30}\r')
    term.expect(r"-- more: 10 of 30 rows")  # and the daemon stops cleanly from here (the fixture)


def test_ctrl_c_stops_output_on_a_slow_line(console):
    def tools(runtime: Runtime) -> None:
        runtime.registry.register(ManyLines())

    # 4800 baud carries 480 bytes a second: 1000 rows would take 20 s.
    _, (port,) = console(with_llm=False, extra=tools, baud=4800, page_lines=0, max_output_lines=1000)
    term = port.terminal()
    login(term)
    term.send('/call many_lines {"count": 1000}\r')
    term.expect("row 0002")
    term.send("\x03")
    term.expect_exact("[output stopped]")
    term.expect_exact(PROMPT)
    assert "row 1000" not in term.before


def test_the_port_vanishes_and_comes_back(console, caplog):
    caplog.set_level(logging.INFO)
    daemon, (port,) = console(with_llm=False)
    term = port.terminal()
    login(term)
    run(term, "/status")

    def logged(text: str) -> bool:
        return any(text in r.getMessage() for r in list(caplog.records))

    port.vanish()  # cable pulled
    _wait_for(lambda: logged("port lost"), "the loss to be logged")
    _wait_for(lambda: logged("cannot open"), "a failed reopen to be logged")
    assert logged(f'logout caller=console:{port.link} channel=console reason="port lost"')
    # Meanwhile the daemon still serves: a tool call through the same registry works.
    runtime = daemon.runtime
    assert runtime is not None
    outcome = daemon.call(runtime.registry.execute("session_status", {}, ToolContext(channel="cli")))
    assert outcome.ok
    port.renew()  # plugged back in: the same path, a new device
    term = port.terminal()
    term.expect("device bench-01")
    login(term)  # a new connection means a new login
    assert "session console:" in run(term, "/status")


def test_two_consoles_are_independent_sessions(console, llm):
    llm.reply(Scripted(hang_s=30, body={}), openai_text("unused"))  # A's turn runs till its Ctrl-C
    _, (a, b) = console(2)
    term_a, term_b = a.terminal(), b.terminal()
    login(term_a)
    login(term_b)
    term_a.send("slow question\r")
    term_a.expect_exact("(working; Ctrl-C stops it)")
    status_b = run(term_b, "/status")
    assert f"session console:{b.link} (this conversation)" in unwrapped(status_b) and "now: idle" in status_b
    term_b.send("\x04")
    term_b.expect("Logged out")
    # Logging out on B touched nothing on A: its turn is still running, and Ctrl-C there stops it.
    term_a.send("\x03")
    term_a.expect("Stopped.")
    term_a.expect_exact(PROMPT)
    status_a = run(term_a, "/status")
    assert f"session console:{a.link} (this conversation)" in unwrapped(status_a)


def test_idle_logout_delivery_and_goodbye(console, caplog):
    caplog.set_level(logging.INFO)
    daemon, (port,) = console(with_llm=False, idle_logout_s=0.5)
    term = port.terminal()
    login(term)
    term.expect(r"Logged out \(idle for 0\.5 s\)\.")
    assert any('reason="idle for 0.5 s"' in r.getMessage() for r in caplog.records)
    login(term)
    term.send("/sta")  # half-typed when a message arrives from elsewhere
    msg = InboundMessage("console", "", chat_id=str(port.link))
    daemon.call(daemon.channel.send(Reply("cron: the greenhouse door is open", msg.session_key, True, msg)))
    term.expect("cron: the greenhouse door is open")
    term.expect_exact(PROMPT + "/sta")  # the line being typed is redrawn under it
    term.send("tus\r")
    term.expect_exact("session console:")
    term.expect_exact(PROMPT)
    daemon.stop()
    term.expect_exact("[edgeclaw is stopping]")


# -- the daemon as systemd runs it, with picocom on the other end ---------------
@pytest.mark.skipif(
    shutil.which("socat") is None or shutil.which("picocom") is None, reason="needs socat, picocom"
)
def test_edgeclaw_run_with_a_console_and_picocom(tmp_path, state_env):
    """`edgeclaw run --board sim` with a console on a pty: picocom logs in, runs /tools and the I2C scan."""
    board_end, tech_end = tmp_path / "ttyBOARD", tmp_path / "ttyTECH"
    socat = subprocess.Popen(
        ["socat", f"pty,raw,echo=0,link={board_end}", f"pty,raw,echo=0,link={tech_end}"],
        stderr=subprocess.DEVNULL,
    )
    daemon = picocom = None
    try:
        _wait_for(lambda: board_end.exists() and tech_end.exists(), "socat's ptys")
        Path(state_env["EDGECLAW_CONFIG"]).write_text(
            f'board = "sim"\ndevice_id = "{DEVICE}"\n[console]\nports = ["{board_end}"]\n'
            f'login_hash = "{PIN_HASH}"\n'
        )
        daemon = subprocess.Popen(
            [sys.executable, "-m", "edgeclaw", "run", "--board", "sim"],
            env=state_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        picocom = pexpect.spawn(
            "picocom",
            ["-b", "115200", "-d", "8", "-p", "n", "-y", "n", "-f", "n", str(tech_end)],
            encoding="utf-8",
            codec_errors="replace",
            timeout=20,
        )
        picocom.expect("Terminal ready")
        # The banner may have gone out before picocom opened the port: Enter at the PIN prompt shows it again.
        picocom.send("\r")
        picocom.expect("device bench-01 · board sim")
        login(picocom)
        picocom.send("/tools\r")
        listing = ""
        while picocom.expect([r"-- more: \d+ of \d+ rows", PROMPT]) == 0:
            listing += picocom.before
            picocom.send(" ")
        listing += picocom.before
        assert "i2c" in listing
        scan = run(picocom, '/call i2c {"action":"scan","bus":1}')
        assert f"I2C bus 1: {len(I2C_BUS1_PARTS)} devices" in scan
        for line in ("0x48  TMP102", "0x50  24C32", "0x76  BME280"):
            assert line in scan
        picocom.sendcontrol("a")
        picocom.sendcontrol("x")
        picocom.expect(pexpect.EOF)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(15) == 0
        err = daemon.stderr.read() if daemon.stderr else ""
        assert f"console {board_end}: open at 115200 8N1" in err
        assert "login outcome=ok caller=console:" in err
    finally:
        for proc in (picocom, daemon):
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.kill(signal.SIGKILL) if isinstance(proc, pexpect.spawn) else proc.kill()
        socat.terminate()
        socat.wait(5)
