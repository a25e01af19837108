"""An approval question on the console: one key answers, a typed answer too; Ctrl-C denies.

One key answers (o, w or d, as the question says); a key that is not one of
them starts a typed answer, read up to Enter, so the letters of a word typed
at the question can never answer it one by one. Type-ahead from before the
question is thrown away, so a stray key can never answer it. The question
counts down to its deadline in place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from edgeclaw.agent import approval_text
from edgeclaw.channels.console.editor import CTRL_C, CTRL_D, ERASE_LINE, EventKind
from edgeclaw.channels.console.keys import KeyInput, Mode, enter_after, lone_key
from edgeclaw.channels.console.port import PacedWriter
from edgeclaw.channels.console.render import encode_rows, to_rows
from edgeclaw.tools.approval import ApprovalRequest, Decision


class _Interrupted(Exception):
    """Ctrl-C at an approval question."""


class ApprovalPrompt:
    """Puts approval questions on one port, one at a time; Ctrl-C denies and calls `stop_turn`."""

    def __init__(
        self,
        out: PacedWriter,
        keys: KeyInput,
        width: int,
        say: Callable[[str], None],
        stop_turn: Callable[[], None],
    ) -> None:
        self.out = out
        self.keys = keys
        self.width = width
        self._say = say
        self._stop_turn = stop_turn
        self._lock = asyncio.Lock()
        self.asking = False

    async def ask(self, request: ApprovalRequest) -> Decision:
        async with self._lock:
            self.asking = True
            self.keys.drop_typeahead()  # only an answer typed after the question counts
            rows = [""]
            for row in approval_text.question_rows(request):
                rows += to_rows(row, self.width)
            self.out.write(encode_rows(rows))
            ticker = asyncio.create_task(self._count_down(request))
            try:
                for _ in range(approval_text.MAX_TRIES):
                    answer = await self._answer(request)
                    if answer is None:
                        self._say(approval_text.HINT)
                        continue
                    self._say(approval_text.decided(answer))
                    return answer
                self._say(approval_text.DENIED_AFTER_TRIES)
                return Decision.DENY
            except _Interrupted:
                self._say(approval_text.decided(Decision.DENY))
                self._stop_turn()
                return Decision.DENY
            except asyncio.CancelledError:
                self.out.write(b"\r\n")
                # The broker cancels at the deadline; anything earlier is the turn or the console stopping.
                self._say(approval_text.TIMED_OUT if request.seconds_left < 1 else "Cancelled.")
                raise
            finally:
                ticker.cancel()
                self.asking = False
                self.keys.key_prompt = ""

    async def _answer(self, request: ApprovalRequest) -> Decision | None:
        """One answer: a key, or a typed line; None when it was not an answer."""
        keys = self.keys
        keys.key_prompt = approval_text.prompt(request)
        self.out.write(keys.key_prompt.encode())
        typed = await keys.read_key()
        assert typed is not None
        if bytes([CTRL_C]) in typed:
            raise _Interrupted
        if typed[:1] == bytes([CTRL_D]):
            self.out.write(b"\r\n")
            return Decision.DENY
        key = lone_key(typed)
        if key == b"\r":
            self.out.write(b"\r\n")
            return None  # Enter alone: asked again, not taken as an answer either way
        decision = approval_text.KEYS.get(key.decode("ascii", "replace").lower()) if key else None
        if decision is not None:
            keys.swallow_enter = enter_after(typed)
            self.out.write(key + b"\r\n")  # echo the answer on its row
            return decision
        # Not one key: what was typed is the start of a written answer ("allow once", "deny").
        keys.keep(typed)
        self.out.write(ERASE_LINE)
        event = await keys.read_line(keys.key_prompt)
        assert event is not None
        if event.kind is EventKind.INTERRUPT:
            raise _Interrupted
        if event.kind is EventKind.EOF:
            return Decision.DENY
        return approval_text.parse_answer(event.text)

    async def _count_down(self, request: ApprovalRequest) -> None:
        keys = self.keys
        while True:
            # Wake at whole seconds of the deadline, so the count steps evenly.
            await asyncio.sleep((request.seconds_left % 1.0) or 1.0)
            keys.key_prompt = approval_text.prompt(request)
            if keys.mode is Mode.LINE:
                self.out.write(keys.editor.redraw(keys.key_prompt))
            elif keys.mode is Mode.KEY:
                self.out.write(ERASE_LINE + keys.key_prompt.encode())
