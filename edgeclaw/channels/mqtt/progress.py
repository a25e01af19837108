"""A request's tool progress, published as progress messages before the request's one answer.

A tool that reports progress (flashing a firmware image: `ToolContext.progress`) gets, on MQTT, a
sink that publishes on the request's answer route (the Response Topic with its Correlation Data,
else `tool/result` or `chat/out`): `{"id", "tool", "progress", "total"?, "message", "seq"}` for a
tool call, `{"session", "in_reply_to"?, "progress", "total"?, "message", "seq"}` for the tool calls
of a chat turn; `seq` counts from 0. A progress message has no `ok` (and no `text`): that is how a
caller tells it from the answer and from a chat's partial answers. The tool
holds the figures to a pace (`tools.progress.PacedProgress`, at most four a second); they are
QoS 0 and never stored or resent — a lost one costs nothing, the answer says how it ended — and
published in order. The answer is queued only once the last progress message is out (`close`), so
it is always the last message of the call. A repeat answered from the request ledger gets none.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from edgeclaw.channels.mqtt.early import EarlyMessages, Publish

log = logging.getLogger("edgeclaw.mqtt")

Scrub = Callable[[str], str]
# More updates than this waiting to go out (a broker that stalls): the older ones are dropped.
MAX_QUEUED = 8


def progress_message(
    head: dict[str, Any], seq: int, progress: float, total: float | None, message: str
) -> dict[str, Any]:
    """`head` (what the request's answer is matched on) and the figures."""
    update: dict[str, Any] = {**head, "progress": progress}
    if total is not None:
        update["total"] = total
    update["message"] = message
    update["seq"] = seq
    return update


class ProgressPublisher(EarlyMessages):
    """The `ProgressSink` of one MQTT request (see the module docstring); `head` is what each
    message starts with: the tool call's `id` and `tool`, or the chat's `session` and `in_reply_to`."""

    def __init__(
        self, publish: Publish, head: dict[str, Any], scrub: Scrub, device: str | None = None
    ) -> None:
        super().__init__(publish)
        self._head = head
        self._scrub = scrub
        self._device = device
        self._queue: list[tuple[float, float | None, str]] = []

    def __call__(self, progress: float, total: float | None, message: str) -> None:
        if self._closing:
            return
        self._queue.append((progress, total, message))
        del self._queue[:-MAX_QUEUED]
        self._kick()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                progress, total, message = self._queue.pop(0)
                update = progress_message(self._head, self.sent, progress, total, self._scrub(message))
                if self._device is not None:
                    update["device"] = self._device
                try:
                    await self._publish(json.dumps(update, ensure_ascii=False).encode())
                    self.sent += 1
                except Exception as e:  # best effort: the answer says how the call ended
                    log.debug("a progress message was not published: %s", e)
            if self._closing:
                return
