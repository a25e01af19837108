"""One technician's session on one console port: banner, login, prompt, turns, approvals, paging.

Three tasks run per session: the reader (bytes from the port), the writer
(paced output) and the main flow (banner → login → prompt loop). The reader
never waits on anything but the port, so a keystroke is seen at once even in
the middle of a long turn or a long reply. What a keystroke means depends on
what the main flow (or an approval question) is waiting for:

- a line (the PIN, the prompt, a typed approval answer): the line editor gets it;
- one key (the `-- more --` prompt, an approval question): the next chunk
  answers it when it is one of the keys asked for; anything else is typing
  (a paste at `-- more --` ends the paging and becomes the next line; at an
  approval question it starts a typed answer);
- nothing (a turn is running, output is being written): Ctrl-C stops the turn
  or the output, anything else is kept as type-ahead for the next prompt
  (except before an approval question, where type-ahead is thrown away so a
  stray key can never answer it).

The session ends only when the port fails; logging out starts over at the
banner on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum

from edgeclaw.agent import approval_text, slash
from edgeclaw.agent.channel import InboundMessage
from edgeclaw.agent.loop import AgentLoop
from edgeclaw.agent.streaming import StreamedText
from edgeclaw.channels.console.editor import CTRL_C, CTRL_D, ERASE_LINE, EventKind, LineEditor, LineEvent
from edgeclaw.channels.console.login import LoginGate, LoginResult
from edgeclaw.channels.console.port import PacedWriter, PortGone, SerialPort
from edgeclaw.channels.console.progress import ConsoleProgress
from edgeclaw.channels.console.render import Bounded, RowStream, encode_rows, layout, to_rows
from edgeclaw.tools.approval import ApprovalRequest, Decision
from edgeclaw.tools.outcome import TRUNCATION_NOTE
from edgeclaw.wording import plural

CHANNEL = "console"
TYPEAHEAD_MAX = 1024
WORKING_NOTICE_S = 2.0  # a turn running longer than this gets a line saying Ctrl-C stops it
LOGOUT_COMMANDS = ("/logout", "/exit", "/quit")
CONSOLE_HELP = """On this console:
  /logout               log out (so does Ctrl-D on an empty line)
  Ctrl-C                stop the turn or the output in progress
  Up, Down              earlier lines; Tab completes commands and tool names
  Ctrl-U, Ctrl-W        erase the line, the last word; Ctrl-L redraws it"""
ENTER = (b"\r", b"\n", b"\r\n")


@dataclass(frozen=True)
class SessionOptions:
    echo: bool = True
    width: int = 80  # 0 = no wrapping
    page_lines: int = 22  # 0 = no paging
    max_output_lines: int = 400
    idle_logout_s: float = 900.0  # 0 = never; only with a login gate
    pace: bool = True
    # The session ends at a logout instead of showing the banner again: for a console on the
    # terminal of the person who started edgeclaw (`edgeclaw try`), where logging out means leaving.
    end_on_logout: bool = False


@dataclass(frozen=True)
class Banner:
    version: str
    device_id: str
    board: str


# The banner's line about the language model, e.g. "LLM: local (qwen) reachable".
LlmStatus = Callable[[], Awaitable[str]]


class _Mode(Enum):
    BUSY = "busy"  # nobody reads: Ctrl-C interrupts, the rest is type-ahead
    LINE = "line"
    KEY = "key"


class ConsoleSession:
    def __init__(
        self,
        port: SerialPort,
        agent: AgentLoop,
        *,
        banner: Banner,
        llm_status: LlmStatus,
        gate: LoginGate | None = None,
        options: SessionOptions | None = None,
    ) -> None:
        self.port = port
        self.agent = agent
        self.banner = banner
        self.llm_status = llm_status
        self.gate = gate
        self.options = options or SessionOptions()
        self.chat_id = port.path
        self.session_key = InboundMessage(CHANNEL, "", chat_id=port.path).session_key
        self.prompt = f"{banner.device_id}> "
        self.out = PacedWriter(port, pace=self.options.pace)
        self.editor = LineEditor(echo=self.options.echo)
        self.logged_in = False
        self._mode = _Mode.BUSY
        self._line_future: asyncio.Future[LineEvent] | None = None
        self._key_future: asyncio.Future[bytes] | None = None
        self._typeahead = bytearray()
        self._last_activity = time.monotonic()
        self._handle_task: asyncio.Task[str] | None = None
        self._stream: StreamedText | None = None  # the running turn's answer as it is written
        self._stream_rows: RowStream | None = None
        self._progress: ConsoleProgress | None = None  # the running turn's tool progress line
        self._output_active = False
        self._output_stopped = False
        self._approval_lock = asyncio.Lock()
        self._asking = False
        # After a key that answered a question, the Enter a habit adds is not the next line:
        # "any" swallows a leading CR, LF or CRLF of the next input, "lf" only an LF (CR came already).
        self._swallow_enter = ""
        self._key_prompt = ""  # the one-key question on screen, redrawn under a delivered message

    # -- running -----------------------------------------------------------
    async def run(self) -> None:
        """Serve the port until it fails (PortGone) or the task is cancelled."""
        tasks = [
            asyncio.create_task(self._read_loop(), name=f"console reader {self.chat_id}"),
            asyncio.create_task(self.out.run(), name=f"console writer {self.chat_id}"),
            asyncio.create_task(self._main(), name=f"console session {self.chat_id}"),
        ]
        reason = "session failed"
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # PortGone (or a bug) surfaces here
        except PortGone:
            reason = "port lost"
            raise
        except asyncio.CancelledError:
            reason = "console stopped"
            raise
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._handle_task is not None:
                self._handle_task.cancel()
            if self.logged_in and self.gate is not None:
                self.gate.log_logout(self.chat_id, reason)
            self.logged_in = False

    async def _read_loop(self) -> None:
        while True:
            self._on_input(await self.port.read())

    # -- input dispatch ------------------------------------------------------
    def _on_input(self, data: bytes) -> None:
        self._last_activity = time.monotonic()
        swallow, self._swallow_enter = self._swallow_enter, ""
        if swallow:
            data = _drop_enter(data, lf_only=swallow == "lf")
            if not data:
                return
        if self._mode is _Mode.LINE:
            self._feed_line(data)
            return
        if self._mode is _Mode.KEY:
            if self._key_future is not None and not self._key_future.done():
                self._key_future.set_result(data)
            return
        if CTRL_C in data:
            self._interrupt()
            data = data[data.rindex(CTRL_C) + 1 :]  # what was typed before Ctrl-C is abandoned too
            self._typeahead.clear()
        room = TYPEAHEAD_MAX - len(self._typeahead)
        self._typeahead += data[: max(room, 0)]

    def _feed_line(self, data: bytes) -> None:
        echo, event, rest = self.editor.feed(data)
        self.out.write(echo)
        if event is None:
            return
        self._mode = _Mode.BUSY
        self._typeahead[:0] = rest
        if self._line_future is not None and not self._line_future.done():
            self._line_future.set_result(event)

    def _interrupt(self) -> None:
        """Ctrl-C while nobody reads a line: stop the output being written and the turn in flight."""
        stopped = False
        if self._output_active:
            self.out.discard()
            self._output_stopped = stopped = True
        task = self._handle_task
        if task is not None and not task.done():
            if self._stream is not None and self._stream.started:
                self.out.discard()  # the answer being streamed stops here, not a line later
            # A turn (the model's or a /call) is stopped through the loop, which says "Stopped.";
            # anything else still running is simply cancelled.
            if not self.agent.stop_turn(self.session_key):
                task.cancel()
            stopped = True
        if stopped:
            self.out.write(b"^C\r\n")

    async def _read_line(
        self, prompt: str, *, mask: str | None = None, idle_s: float = 0, history: bool = False
    ) -> LineEvent | None:
        """The next line from the editor; None when `idle_s` pass with no keystroke.

        `history`: the prompt's own lines, with Up/Down and Tab completion (not a PIN or an answer).
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[LineEvent] = loop.create_future()
        self._line_future = fut
        complete = self._complete if history else None
        self.out.write(self.editor.start(prompt, mask=mask, history=history, complete=complete))
        self._mode = _Mode.LINE
        if self._typeahead:
            data = bytes(self._typeahead)
            self._typeahead.clear()
            self._feed_line(data)
        try:
            while True:
                if not idle_s:
                    return await fut
                left = self._last_activity + idle_s - time.monotonic()
                if left <= 0:
                    return None
                with contextlib.suppress(TimeoutError):
                    return await asyncio.wait_for(asyncio.shield(fut), left)
        finally:
            self._mode = _Mode.BUSY
            self._line_future = None

    async def _read_key(self, idle_s: float = 0) -> bytes | None:
        """The next chunk of keys; None after `idle_s` without one."""
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._key_future = fut
        self._mode = _Mode.KEY
        try:
            if not idle_s:
                return await fut
            try:
                return await asyncio.wait_for(fut, idle_s)
            except TimeoutError:
                return None
        finally:
            self._mode = _Mode.BUSY
            self._key_future = None

    # -- output --------------------------------------------------------------
    def say(self, text: str) -> None:
        """Queue text (wrapped, made safe) followed by a newline."""
        if self._progress is not None:
            self._progress.wipe()  # a notice or question during a turn: not after the progress bar
        self.out.write(encode_rows(to_rows(text, self.options.width)))

    async def deliver(self, text: str) -> None:
        """A message from outside the prompt loop (Channel.send): keep the line being typed, or the
        `-- more --` question being asked, intact and last on the screen."""
        if self._mode is _Mode.LINE:
            self.out.write(ERASE_LINE)
            self.say(text)
            self.out.write(self.editor.redraw())
        elif self._mode is _Mode.KEY:
            self.out.write(ERASE_LINE)
            self.say(text)
            self.out.write(self._key_prompt.encode())
        else:
            self.say(text)
        await self.out.drain()

    async def show(self, text: str) -> None:
        """A reply: wrapped, cut at max_output_lines, paged every page_lines rows; Ctrl-C stops it.

        The registry's own "[output truncated …]" note is kept out of the console's cut: it is
        shown at the end whatever the console cut or the technician skipped.
        """
        self._output_active, self._output_stopped = True, False
        opts = self.options
        try:
            await self._page(
                layout(text, opts.width, opts.max_output_lines, keep_last=TRUNCATION_NOTE.fullmatch)
            )
        finally:
            self._output_active = False
        # Not in the `finally`: when the session is being torn down (port lost, daemon stopping)
        # the writer task is cancelled with this one, and waiting for it would never end.
        await self.out.drain()

    async def _page(self, bounded: Bounded) -> None:
        opts = self.options
        rows = bounded.rows
        total = len(rows)
        page = opts.page_lines or total
        shown = 0
        while shown < total:
            end = min(shown + page, total)
            # A few rows at a time, so Ctrl-C takes effect within a row or two.
            for i in range(shown, end, 4):
                if self._output_stopped:
                    break
                self.out.write(encode_rows(rows[i : min(i + 4, end)]))
                await self.out.drain()
            if self._output_stopped:
                self.say("[output stopped]")
                self.out.write(encode_rows(bounded.tail))
                return
            shown = end
            if shown < total and opts.page_lines:
                choice = await self._more(shown, total + bounded.cut)
                if choice in ("quit", "typing"):
                    self.say(f"[{plural(total - shown + bounded.cut, 'more row')} not shown]")
                    self.out.write(encode_rows(bounded.tail))
                    return
                if choice == "all":
                    page = total
        if bounded.cut:
            self.say(
                f"[{plural(bounded.cut, 'more row')} cut: the console shows at most "
                f"{opts.max_output_lines}; ask for less, or read it in parts]"
            )
        self.out.write(encode_rows(bounded.tail))

    async def _more(self, shown: int, total: int) -> str:
        """ "next", "all", "quit", or "typing": keys that are not paging keys (a paste, a command typed
        ahead) end the paging and are kept, to become the next line at the prompt."""
        self._key_prompt = f"-- more: {shown} of {total} rows; Space/Enter next page, a all, q quit --"
        self.out.write(self._key_prompt.encode())
        try:
            keys = await self._read_key(self._idle_s())
            while keys is not None and keys[:1] == b"\x1b":
                keys = await self._read_key(self._idle_s())  # a cursor key: not typing, not an answer
            if keys is None:
                return "quit"
            if bytes([CTRL_C]) in keys or keys[:1] == bytes([CTRL_D]):
                return "quit"
            key = _lone_key(keys)
            if key in (b" ", b"\r"):
                self._swallow_enter = "lf" if keys.endswith(b"\r") else ""  # a CRLF terminal's LF
                return "next"
            if key in (b"a", b"A"):
                return "all"
            if key in (b"q", b"Q"):
                return "quit"
            self._typeahead[:0] = keys[:TYPEAHEAD_MAX]
            return "typing"
        finally:
            self.out.write(ERASE_LINE)

    def _idle_s(self) -> float:
        return self.options.idle_logout_s if self.gate is not None else 0.0

    # -- the flow ------------------------------------------------------------
    async def _main(self) -> None:
        while True:
            await self._show_banner()
            if self.gate is not None and not await self._login():
                continue
            self.logged_in = True
            reason = await self._shell()
            self.logged_in = False
            if self.gate is not None:
                self.gate.log_logout(self.chat_id, reason)
            self.say(f"Logged out ({reason}).")
            self.out.write(b"\r\n")
            if self.options.end_on_logout:
                await self.out.drain()
                return

    async def _show_banner(self) -> None:
        b = self.banner
        self.say(f"edgeclaw {b.version} · device {b.device_id} · board {b.board}")
        await self.out.drain()
        self.say(await self.llm_status())
        self.say("Type a message for the agent, or /help. Ctrl-C stops a turn, Ctrl-D logs out.")
        await self.out.drain()

    async def _login(self) -> bool:
        """True once the right PIN is entered; False to show the banner again (Ctrl-D, empty entry)."""
        assert self.gate is not None
        while True:
            left = self.gate.locked_for()
            if left > 0:
                self.say(f"Locked after too many wrong entries; try again in {math.ceil(left)} s.")
            event = await self._read_line("PIN: ", mask="*")
            assert event is not None
            if event.kind is EventKind.INTERRUPT:
                continue
            if event.kind is EventKind.EOF or not event.text:
                return False
            attempt = await self.gate.attempt(event.text, self.chat_id)
            if attempt.result is LoginResult.OK:
                self.say("Logged in.")
                return True
            if attempt.result is LoginResult.LOCKED:
                continue  # the loop head says for how long
            if attempt.locked_for_s:
                self.say("Wrong PIN.")
            else:
                self.say(f"Wrong PIN ({plural(attempt.tries_left, 'try', 'tries')} left before a lockout).")

    async def _shell(self) -> str:
        """The prompt loop; returns why it ended."""
        self._last_activity = time.monotonic()
        try:
            return await self._prompt_loop()
        finally:
            self.editor.forget()  # the next person on this port starts with an empty history

    async def _prompt_loop(self) -> str:
        while True:
            event = await self._read_line(self.prompt, idle_s=self._idle_s(), history=True)
            if event is None:
                self.out.write(b"\r\n")
                return f"idle for {self.options.idle_logout_s:g} s"
            if event.invalid_bytes:
                self.say(
                    f"(ignored {plural(event.invalid_bytes, 'byte')} that "
                    f"{'was' if event.invalid_bytes == 1 else 'were'} not UTF-8: "
                    "check the terminal is set to UTF-8 and the port's speed and framing)"
                )
            if event.kind is EventKind.EOF:
                return "Ctrl-D"
            if event.kind is EventKind.INTERRUPT:
                continue
            text = event.text.strip()
            if not text:
                continue
            self.editor.remember(text)
            if text.lower() in LOGOUT_COMMANDS:
                return text.lower()
            reply = await self._handle(text)
            if text.lower() in ("/help", "/?"):
                reply += "\n" + CONSOLE_HELP
            if reply:  # empty: the streamed answer was all of it
                await self.show(reply)
            else:
                await self.out.drain()
            self._last_activity = time.monotonic()

    def _message(self, text: str) -> InboundMessage:
        return InboundMessage(
            CHANNEL,
            text,
            chat_id=self.chat_id,
            sender="technician",
            peer_kind="local",
            caller=f"console:{self.port.path}",  # the port is who the console knows is calling
        )

    def _complete(self, typed: str) -> list[str]:
        """Tab at the prompt: slash commands, then the tool names /call and /help take here."""
        if not typed.startswith("/"):
            return []
        head, space, rest = typed.partition(" ")
        if not space:
            names = [*slash.COMMANDS, *(c.removeprefix("/") for c in LOGOUT_COMMANDS)]
            return [f"/{n} " for n in sorted(names)]
        if head.lower() in ("/call", "/help") and " " not in rest:
            # Only the tools the policy lets through on this console, as /tools lists them.
            return [f"{head} {name} " for name in self.agent.tool_names(self._message(typed))]
        return []

    async def _handle(self, text: str) -> str:
        """What to show for a message: its reply, less what of it was already streamed ("" = all)."""
        # The model's answer is shown as it is written, at the line's pace (the writer paces all
        # output); the reply then only adds what the stream did not show.
        rows = self._stream_rows = RowStream(self.options.width, self.options.max_output_lines)
        # A tool's progress is one line redrawn in place, wiped before any other output.
        progress = self._progress = ConsoleProgress(self.out.write, self.options.width)

        def streamed(piece: str) -> None:
            progress.wipe()
            self.out.write(rows.feed(piece))

        stream = self._stream = StreamedText(streamed)
        msg = dataclasses.replace(self._message(text), on_text=stream, on_progress=progress)
        task = asyncio.create_task(self._reply_text(msg), name=f"console turn {self.chat_id}")
        self._handle_task = task
        notice = asyncio.get_running_loop().call_later(WORKING_NOTICE_S, self._working_notice)
        try:
            await asyncio.wait({task})
        finally:
            notice.cancel()
            self._handle_task = None
            self._stream = self._stream_rows = None
            self._progress = None
            if not task.done():
                task.cancel()
            progress.wipe()
            self.out.write(rows.finish())  # whatever comes next starts on a row of its own
        if task.cancelled():
            return "Stopped."
        error = task.exception()
        if error is not None:
            return f"error: {type(error).__name__}: {error}"
        answer = task.result()
        rest = stream.remainder(answer) if stream.started else None
        if rest is None:
            return answer
        note = f"[{plural(rows.cut, 'more row')} of the answer not shown]\n" if rows.cut else ""
        return (note + rest.strip("\n")).strip("\n")

    async def _reply_text(self, msg: InboundMessage) -> str:
        reply = await self.agent.handle(msg)
        return reply.text

    def _working_notice(self) -> None:
        streaming = self._stream is not None and self._stream.started
        if not self._asking and self._handle_task is not None and not streaming:
            self.say("(working; Ctrl-C stops it)")

    @property
    def in_turn(self) -> bool:
        """Someone is logged in and waiting on a turn of this console (a question may be put)."""
        return self._handle_task is not None and self.logged_in

    # -- approvals -----------------------------------------------------------
    async def ask_approval(self, request: ApprovalRequest) -> Decision | None:
        """Ask on this console; None when no turn of this session is waiting for it.

        One key answers (o, w or d, as the question says); a key that is not one of them starts a
        typed answer, read up to Enter, so the letters of a word typed at the question can never
        answer it one by one. Ctrl-C denies and stops the turn.
        """
        if self._handle_task is None or not self.logged_in:
            return None
        async with self._approval_lock:
            self._asking = True
            self._typeahead.clear()  # only an answer typed after the question counts
            rows = [""]
            for row in approval_text.question_rows(request):
                rows += to_rows(row, self.options.width)
            self.out.write(encode_rows(rows))
            ticker = asyncio.create_task(self._count_down(request))
            try:
                for _ in range(approval_text.MAX_TRIES):
                    answer = await self._approval_answer(request)
                    if answer is None:
                        self.say(approval_text.HINT)
                        continue
                    self.say(approval_text.decided(answer))
                    return answer
                self.say(approval_text.DENIED_AFTER_TRIES)
                return Decision.DENY
            except _Interrupted:
                self.say(approval_text.decided(Decision.DENY))
                self._interrupt_from_turn()
                return Decision.DENY
            except asyncio.CancelledError:
                self.out.write(b"\r\n")
                # The broker cancels at the deadline; anything earlier is the turn or the console stopping.
                self.say(approval_text.TIMED_OUT if request.seconds_left < 1 else "Cancelled.")
                raise
            finally:
                ticker.cancel()
                self._asking = False
                self._key_prompt = ""

    async def _approval_answer(self, request: ApprovalRequest) -> Decision | None:
        """One answer: a key, or a typed line; None when it was not an answer."""
        self._key_prompt = approval_text.prompt(request)
        self.out.write(self._key_prompt.encode())
        keys = await self._read_key()
        assert keys is not None
        if bytes([CTRL_C]) in keys:
            raise _Interrupted
        if keys[:1] == bytes([CTRL_D]):
            self.out.write(b"\r\n")
            return Decision.DENY
        key = _lone_key(keys)
        if key == b"\r":
            self.out.write(b"\r\n")
            return None  # Enter alone: asked again, not taken as an answer either way
        decision = approval_text.KEYS.get(key.decode("ascii", "replace").lower()) if key else None
        if decision is not None:
            self._swallow_enter = _after(keys)
            self.out.write(key + b"\r\n")  # echo the answer on its row
            return decision
        # Not one key: what was typed is the start of a written answer ("allow once", "deny").
        self._typeahead[:0] = keys[:TYPEAHEAD_MAX]
        self.out.write(ERASE_LINE)
        event = await self._read_line(self._key_prompt)
        assert event is not None
        if event.kind is EventKind.INTERRUPT:
            raise _Interrupted
        if event.kind is EventKind.EOF:
            return Decision.DENY
        return approval_text.parse_answer(event.text)

    def _interrupt_from_turn(self) -> None:
        task = self._handle_task
        if task is not None and not task.done() and not self.agent.stop_turn(self.session_key):
            task.cancel()

    async def _count_down(self, request: ApprovalRequest) -> None:
        while True:
            # Wake at whole seconds of the deadline, so the count steps evenly.
            await asyncio.sleep((request.seconds_left % 1.0) or 1.0)
            self._key_prompt = approval_text.prompt(request)
            if self._mode is _Mode.LINE:
                self.out.write(self.editor.redraw(self._key_prompt))
            elif self._mode is _Mode.KEY:
                self.out.write(ERASE_LINE + self._key_prompt.encode())

    def goodbye(self, text: str) -> None:
        """A last line on shutdown, without waiting for a slow terminal."""
        self.port.write_nowait(b"\r\n" + text.encode() + b"\r\n")


class _Interrupted(Exception):
    """Ctrl-C at an approval question."""


def _lone_key(keys: bytes) -> bytes | None:
    """The one key this input is, Enter (CR, LF or CRLF) as b"\\r", or None when it is more than one key
    (typing, a paste, an escape sequence)."""
    if keys in ENTER:
        return b"\r"
    for enter in (b"\r\n", b"\r", b"\n"):
        if keys.endswith(enter):
            keys = keys[: -len(enter)]
            break
    return keys if len(keys) == 1 else None


def _after(keys: bytes) -> str:
    """Which Enter may still follow a key that answered: any, only the LF of a CRLF, or none."""
    if keys.endswith((b"\n",)):
        return ""
    return "lf" if keys.endswith(b"\r") else "any"


def _drop_enter(data: bytes, *, lf_only: bool) -> bytes:
    if data.startswith(b"\n"):
        return data[1:]
    if not lf_only and data.startswith(b"\r"):
        return data[2:] if data.startswith(b"\r\n") else data[1:]
    return data
