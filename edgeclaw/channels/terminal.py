"""The local terminal: `edgeclaw chat`, one turn or interactive.

Interactive mode keeps readline history in the state directory; Ctrl-C
stops the turn or slash command in flight (at the prompt it just says how to
leave), Ctrl-D quits. Approval questions are asked on the same terminal when there is one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TextIO

from edgeclaw.agent.channel import InboundMessage, Reply
from edgeclaw.agent.loop import AgentLoop
from edgeclaw.agent.streaming import StreamedText
from edgeclaw.channels.cli_approver import TerminalApprover
from edgeclaw.channels.cli_progress import TerminalProgress
from edgeclaw.config.paths import current_user
from edgeclaw.tools.approval import ApprovalBroker, ApprovalRequest, Decision
from edgeclaw.tools.outlets import DeliveryFailed, Outgoing, Outlets

CHANNEL = "cli"


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):  # a closed or stand-in stream
        return False


class TerminalChannel:
    name = CHANNEL

    def __init__(
        self, agent: AgentLoop, *, out: TextIO = sys.stdout, interactive: bool | None = None
    ) -> None:
        self.agent = agent
        self.out = out
        self.user = current_user()
        self.interactive = sys.stdin.isatty() if interactive is None else interactive
        # Questions go to stdout here: in a chat, that is where the person is looking.
        self._approver = TerminalApprover(0, out)
        self._current: asyncio.Task[Reply] | None = None  # the message being handled, if any
        self._progress: TerminalProgress | None = None  # the latest message's progress bar

    def message(self, text: str) -> InboundMessage:
        return InboundMessage(
            channel=CHANNEL,
            text=text,
            chat_id=self.user,
            sender=self.user,
            peer_kind="local",
            caller=f"{CHANNEL}:{self.user}",
        )

    def streamed_message(self, text: str) -> InboundMessage:
        """A message whose answer is printed as the model writes it (`send` then adds the rest), and
        whose tool calls show their progress as a bar on a terminal (wiped before any text)."""
        # Not on a pipe: there the output is the answer alone.
        progress = self._progress = TerminalProgress(self.out, tty=_isatty(self.out), quiet=True)

        def write(piece: str) -> None:
            progress.close()
            self.out.write(piece)
            self.out.flush()

        return dataclasses.replace(self.message(text), on_text=StreamedText(write), on_progress=progress)

    async def send(self, reply: Reply) -> None:
        progress = reply.in_reply_to.on_progress if reply.in_reply_to is not None else None
        if isinstance(progress, TerminalProgress):
            progress.close()  # the bar is wiped before the answer
        stream = reply.in_reply_to.on_text if reply.in_reply_to is not None else None
        if isinstance(stream, StreamedText) and stream.started:
            rest = stream.remainder(reply.text)
            if rest is not None:  # the stream showed the answer: only what it did not show
                if rest.strip():
                    print(rest.strip("\n"), file=self.out, flush=True)
                return
            if stream.line_open:  # a turn that failed mid-answer: its error on a line of its own
                print(file=self.out)
        print(reply.text, file=self.out, flush=True)

    async def ask_approval(self, request: ApprovalRequest) -> Decision | None:
        """Ask on the terminal; without one nobody can answer, which the broker turns into a deny."""
        if not self.interactive:
            return None
        if self._progress is not None:
            self._progress.close()  # the question is not written after a progress bar
        return await self._approver.ask_approval(request)

    # -- the Outlet protocol: what is sent into this terminal's session while it is open ----------
    def has_session(self, session_key: str) -> bool:
        return session_key == self.message("").session_key

    async def to_session(self, session_key: str, text: str) -> str:
        if not self.has_session(session_key):
            raise DeliveryFailed(f"session {session_key!r} is not this terminal's")
        print(text, file=self.out, flush=True)
        return "printed on the terminal"

    async def to_target(self, target: str, message: Outgoing) -> str:
        raise DeliveryFailed("the terminal of edgeclaw chat takes no message targets")

    async def one_turn(self, text: str, settle: Callable[[str], Awaitable[None]] | None = None) -> Reply:
        """One message and its reply; with `settle`, also what follows from it before the chat
        ends (the results of subagents it started, and the agent's answer to them)."""
        msg = self.streamed_message(text)
        reply = await self.agent.handle(msg)
        await self.send(reply)
        if settle is not None:
            await settle(msg.session_key)
        return reply

    def interrupt(self) -> None:
        """Ctrl-C: stop what is running; at the prompt, say how to leave."""
        current = self._current
        if current is None or current.done():
            print("\n(Ctrl-D quits)", file=self.out, flush=True)
        elif not self.agent.stop_turn(self.message("").session_key):
            # A turn (the model's or a /call) stops through the loop; anything else is cancelled.
            current.cancel()

    async def handle_line(self, text: str) -> Reply:
        """One message, stoppable by `interrupt` without ending the chat."""
        msg = self.streamed_message(text)
        current = self._current = asyncio.create_task(self.agent.handle(msg))
        try:
            await asyncio.wait({current})
        finally:
            self._current = None
            if not current.done():  # we were cancelled ourselves: take the message down with us
                current.cancel()
        if current.cancelled():
            return Reply("Stopped.", msg.session_key, False, msg)
        return current.result()

    async def interactive_loop(self, history_file: Path | None = None) -> int:
        _load_history(history_file)
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self.interrupt)
        print(
            "edgeclaw chat — /help for commands, Ctrl-C stops a turn, Ctrl-D quits", file=self.out, flush=True
        )
        try:
            while True:
                line = await loop.run_in_executor(None, _read_line, "you> ")
                if line is None:
                    print(file=self.out)
                    return 0
                if not line.strip():
                    continue
                await self.send(await self.handle_line(line))
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)
            _save_history(history_file)


def register_approver(channel: TerminalChannel, broker: ApprovalBroker) -> None:
    broker.register(CHANNEL, channel)


def register_outlet(channel: TerminalChannel, outlets: Outlets) -> None:
    outlets.register(CHANNEL, channel)


def _read_line(prompt: str) -> str | None:
    try:
        return input(prompt)
    except EOFError:
        return None


def _load_history(path: Path | None) -> None:
    if path is None:
        return
    try:
        import readline

        readline.set_history_length(500)
        if path.is_file():
            readline.read_history_file(path)
    except (ImportError, OSError):
        pass


def _save_history(path: Path | None) -> None:
    if path is None:
        return
    try:
        import readline

        path.parent.mkdir(parents=True, exist_ok=True)
        readline.write_history_file(path)
    except (ImportError, OSError):
        pass
