"""Approval questions for `edgeclaw tool call` on a terminal.

When the command runs on a terminal, a tool that needs approval asks right
there, in the same words as the console and `edgeclaw chat`: allow once,
allow always, or deny. Without a terminal nobody can
answer, so the approver says so and the broker turns that into a deny. The
answer is read with the event loop's reader (not a blocking thread), so a
question that times out is simply withdrawn and the command can exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import TextIO

from edgeclaw.agent import approval_text
from edgeclaw.tools.approval import ApprovalRequest, Decision


class TerminalApprover:
    """Asks the person at this terminal; `fd` is read, the question is written to `out`.

    The words and answers are the console's (`approval_text`); a terminal in line mode needs
    Enter after the answer.
    """

    def __init__(self, fd: int = 0, out: TextIO | None = None) -> None:
        self.fd = fd
        self.out = out if out is not None else sys.stderr

    async def ask_approval(self, request: ApprovalRequest) -> Decision | None:
        if not os.isatty(self.fd):
            return None
        self._say("\n" + "\n".join(approval_text.question_rows(request)) + "\n")
        for _ in range(approval_text.MAX_TRIES):
            self._say(approval_text.prompt(request))
            line = await self._read_line()
            if line is None:
                return None  # end of input: nobody there
            decision = approval_text.parse_answer(line)
            if decision is not None:
                self._say(approval_text.decided(decision) + "\n")
                return decision
            self._say(approval_text.HINT + "\n")
        self._say(approval_text.DENIED_AFTER_TRIES + "\n")
        return Decision.DENY

    def _say(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    async def _read_line(self) -> str | None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str | None] = loop.create_future()
        buffer = bytearray()

        def readable() -> None:
            try:
                chunk = os.read(self.fd, 1024)
            except OSError:
                chunk = b""
            if not chunk:
                if not done.done():
                    done.set_result(None)
                return
            buffer.extend(chunk)
            if b"\n" in buffer and not done.done():
                done.set_result(buffer.split(b"\n", 1)[0].decode("utf-8", "replace"))

        loop.add_reader(self.fd, readable)
        try:
            return await done
        finally:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(self.fd)
