"""A turn's answer as it is written: from the provider's text deltas to a channel's text sink.

A channel that can show text as it arrives (the console, `edgeclaw chat`, MQTT partials) puts a sink
on its `InboundMessage` (`on_text`). The loop wraps it in a `TurnStream` for the turn:

- what reaches the sink is scrubbed like every reply. Scrubbing needs whole tokens, so text is
  released up to the last whitespace and the word still being written is held back; each release
  is what scrubbing everything so far adds to what was already released. Should a later word change
  how earlier text scrubs (a redaction reaching back), the stream stops for that step and the
  channel shows the final answer, scrubbed whole, instead: nothing scrubbed is ever shown unscrubbed.
- the model's steps are separated: text written before a tool call ends its line before the next
  step's text starts.
- an answer broken off mid-stream (the connection lost, so the provider chain tries again or asks
  the next provider) cannot be taken back from a screen: `restart` closes what was shown of it with
  a note, and the new answer starts on a line of its own.

`StreamedText` is the channel's side: it forwards what it is given and remembers it, so that after
the turn the channel can tell how much of the final answer was already shown (`remainder`): it is never shown
twice, and shown after all when the stream did not show it (a failed turn, a provider that did not stream).
"""

from __future__ import annotations

from collections.abc import Callable

TextSink = Callable[[str], None]
RESTARTED = "[the answer broke off; it starts again]"


class TurnStream:
    """One turn's deltas → scrubbed releases to `sink`."""

    def __init__(self, sink: TextSink, scrub: Callable[[str], str]) -> None:
        self._sink = sink
        self._scrub = scrub
        self._raw = ""  # this step's text as the provider gave it
        self._released = ""  # this step's scrubbed text given to the sink so far
        self._stalled = False  # scrubbing changed released text: nothing more this step
        self._line_open = False  # the last text released did not end its line

    def __call__(self, delta: str) -> None:
        """A delta from the provider (its `on_text`)."""
        if not delta:
            return
        self._raw += delta
        cut = max(self._raw.rfind(" "), self._raw.rfind("\n"), self._raw.rfind("\t"))
        if cut >= 0:
            self._release(self._raw[: cut + 1])

    def end_step(self) -> None:
        """The model's answer for this step is complete: release the rest, end the line."""
        if self._raw:
            self._release(self._raw)
        self._raw, self._released, self._stalled = "", "", False
        if self._line_open:
            self._emit("\n")

    def restart(self) -> None:
        """The provider chain starts this step's answer over (see the module doc)."""
        shown = bool(self._released)
        self._raw, self._released, self._stalled = "", "", False
        if shown:
            self._emit(("\n" if self._line_open else "") + RESTARTED + "\n")

    def _release(self, text: str) -> None:
        if self._stalled:
            return
        scrubbed = self._scrub(text)
        if not scrubbed.startswith(self._released):
            self._stalled = True
            return
        new = scrubbed[len(self._released) :]
        self._released = scrubbed
        if new:
            self._emit(new)

    def _emit(self, text: str) -> None:
        self._line_open = not text.endswith("\n")
        self._sink(text)


class StreamedText:
    """A channel's sink: forwards each piece to `write` and remembers what was shown."""

    def __init__(self, write: TextSink) -> None:
        self._write = write
        self.text = ""

    def __call__(self, piece: str) -> None:
        self.text += piece
        self._write(piece)

    @property
    def started(self) -> bool:
        return bool(self.text)

    @property
    def line_open(self) -> bool:
        """What was shown does not end its line (a turn that failed mid-answer)."""
        return bool(self.text) and not self.text.endswith("\n")

    def remainder(self, answer: str) -> str | None:
        """What of the final answer is still to be shown: "" when the stream showed all of it, the
        rest when it showed its beginning (the loop may add a note to the model's words), None when
        the stream did not show it (a failed turn, a provider that did not stream, a stalled stream)."""
        shown = self.text.rstrip()
        answer = answer.strip()
        if not shown or not answer:
            return None
        # The final step's text starts the stream or a line of it: try each line start, earliest first.
        start = 0
        while start < len(shown):
            step = shown[start:].lstrip()
            if step and answer.startswith(step):
                return answer[len(step) :]
            newline = shown.find("\n", start)
            if newline < 0:
                return None
            start = newline + 1
        return None
