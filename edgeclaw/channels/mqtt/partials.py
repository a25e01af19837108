"""A chat answer as it is written, published as partial answers before the one final answer.

Asked for per request (`"stream": true` on `chat/in`) or for every chat (`mqtt.stream_chat`). Each
partial is `{"text": PIECE, "session", "partial": true, "seq": N, "in_reply_to"?}` on the answer's
route (the Response Topic with its Correlation Data, else `chat/out`), seq counting from 0. They are
QoS 0 and never stored: a partial lost on the way costs nothing, since the final answer (the usual
one, plus `"seq"`: how many partials came before it) carries the whole text. Pieces are coalesced so
a fast model does not turn into a message per word, and published in order; the final answer is
queued only once the last partial is out (`close`), so it is always the last message.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from edgeclaw.channels.mqtt.early import EarlyMessages, Publish

log = logging.getLogger("edgeclaw.mqtt")


def chat_partial(text: str, session: str, seq: int, request_id: str | None) -> dict[str, Any]:
    partial: dict[str, Any] = {"text": text, "session": session, "partial": True, "seq": seq}
    if request_id is not None:
        partial["in_reply_to"] = request_id
    return partial


class PartialPublisher(EarlyMessages):
    """The text sink of one streamed chat turn (see the module docstring)."""

    def __init__(
        self, publish: Publish, session: str, request_id: str | None, *, min_gap_s: float = 0.2
    ) -> None:
        super().__init__(publish)  # `sent`, the partials published, is the final answer's "seq"
        self._session = session
        self._request_id = request_id
        self._min_gap_s = min_gap_s
        self._pending = ""

    def __call__(self, piece: str) -> None:
        if self._closing or not piece:
            return
        self._pending += piece
        self._kick()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._pending:
                text, self._pending = self._pending, ""
                payload = chat_partial(text, self._session, self.sent, self._request_id)
                try:
                    await self._publish(json.dumps(payload, ensure_ascii=False).encode())
                    self.sent += 1
                except Exception as e:  # best effort: the final answer has the whole text
                    log.debug("a partial answer was not published: %s", e)
            if self._closing and not self._pending:
                return
            if not self._closing:
                await asyncio.sleep(self._min_gap_s)  # what arrives meanwhile goes in the next one
