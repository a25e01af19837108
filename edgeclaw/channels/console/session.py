"""One technician's session on one console port: banner, login, prompt, turns, approvals, paging.

Three tasks run per session: the reader (bytes from the port), the writer
(paced output) and the main flow (banner → login → prompt loop). The reader
never waits on anything but the port, so a keystroke is seen at once even in
the middle of a long turn or a long reply. What a keystroke means depends on
what the main flow (or an approval question) is waiting for (`console.keys`);
replies are paged by `console.pager`, approval questions put by
`console.approval_prompt`.

The session ends only when the port fails; logging out starts over at the
banner on the same port.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Awaitable, Callable

from edgeclaw.agent import slash
from edgeclaw.agent.channel import InboundMessage
from edgeclaw.agent.loop import AgentLoop
from edgeclaw.agent.streaming import StreamedText
from edgeclaw.channels.console.approval_prompt import ApprovalPrompt
from edgeclaw.channels.console.editor import ERASE_LINE, EventKind, LineEditor
from edgeclaw.channels.console.keys import KeyInput, Mode
from edgeclaw.channels.console.login import LoginGate, LoginResult
from edgeclaw.channels.console.pager import Pager
from edgeclaw.channels.console.port import PacedWriter, PortGone, SerialPort
from edgeclaw.channels.console.progress import ConsoleProgress
from edgeclaw.channels.console.render import RowStream, encode_rows, to_rows
from edgeclaw.records import dataclass
from edgeclaw.tools.approval import ApprovalRequest, Decision
from edgeclaw.wording import plural

CHANNEL = "console"
WORKING_NOTICE_S = 2.0  # a turn running longer than this gets a line saying Ctrl-C stops it
LOGOUT_COMMANDS = ("/logout", "/exit", "/quit")
CONSOLE_HELP = """On this console:
  /logout               log out (so does Ctrl-D on an empty line)
  Ctrl-C                stop the turn or the output in progress
  Up, Down              earlier lines; Tab completes commands and tool names
  Ctrl-U, Ctrl-W        erase the line, the last word; Ctrl-L redraws it"""


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
        self.keys = KeyInput(self.out, self.editor, self._interrupt)
        self.pager = Pager(self.out, self.keys, self.options, self.say, self._idle_s)
        self.approvals = ApprovalPrompt(
            self.out, self.keys, self.options.width, self.say, self._interrupt_from_turn
        )
        self.logged_in = False
        self._handle_task: asyncio.Task[str] | None = None
        self._stream: StreamedText | None = None  # the running turn's answer as it is written
        self._stream_rows: RowStream | None = None
        self._progress: ConsoleProgress | None = None  # the running turn's tool progress line

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
            self.keys.feed(await self.port.read())

    # -- Ctrl-C ---------------------------------------------------------------
    def _interrupt(self) -> None:
        """Ctrl-C while nobody reads a line: stop the output being written and the turn in flight."""
        stopped = self.pager.stop()
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

    # -- output --------------------------------------------------------------
    def say(self, text: str) -> None:
        """Queue text (wrapped, made safe) followed by a newline."""
        if self._progress is not None:
            self._progress.wipe()  # a notice or question during a turn: not after the progress bar
        self.out.write(encode_rows(to_rows(text, self.options.width)))

    async def deliver(self, text: str) -> None:
        """A message from outside the prompt loop (Channel.send): keep the line being typed, or the
        `-- more --` question being asked, intact and last on the screen."""
        if self.keys.mode is Mode.LINE:
            self.out.write(ERASE_LINE)
            self.say(text)
            self.out.write(self.editor.redraw())
        elif self.keys.mode is Mode.KEY:
            self.out.write(ERASE_LINE)
            self.say(text)
            self.out.write(self.keys.key_prompt.encode())
        else:
            self.say(text)
        await self.out.drain()

    async def show(self, text: str) -> None:
        """A reply: wrapped, cut and paged (`console.pager`); Ctrl-C stops it."""
        await self.pager.show(text)

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
            event = await self.keys.read_line("PIN: ", mask="*")
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
        self.keys.last_activity = time.monotonic()
        try:
            return await self._prompt_loop()
        finally:
            self.editor.forget()  # the next person on this port starts with an empty history

    async def _prompt_loop(self) -> str:
        while True:
            event = await self.keys.read_line(self.prompt, idle_s=self._idle_s(), complete=self._complete)
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
            self.keys.last_activity = time.monotonic()

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
        if not self.approvals.asking and self._handle_task is not None and not streaming:
            self.say("(working; Ctrl-C stops it)")

    @property
    def in_turn(self) -> bool:
        """Someone is logged in and waiting on a turn of this console (a question may be put)."""
        return self._handle_task is not None and self.logged_in

    # -- approvals -----------------------------------------------------------
    async def ask_approval(self, request: ApprovalRequest) -> Decision | None:
        """Ask on this console (`console.approval_prompt`); None when no turn of this session is
        waiting for it. Ctrl-C denies and stops the turn."""
        if self._handle_task is None or not self.logged_in:
            return None
        return await self.approvals.ask(request)

    def _interrupt_from_turn(self) -> None:
        task = self._handle_task
        if task is not None and not task.done() and not self.agent.stop_turn(self.session_key):
            task.cancel()

    def goodbye(self, text: str) -> None:
        """A last line on shutdown, without waiting for a slow terminal."""
        self.port.write_nowait(b"\r\n" + text.encode() + b"\r\n")
