"""The heartbeat: every `agent.heartbeat_interval` the agent reads HEARTBEAT.md and acts on it.

HEARTBEAT.md is one of the context files (routed by the memory's virtual
files, else the workspace's file). It is not part of chat turns' prompts: it
is read here, and a turn of its own (session `heartbeat:AGENT`, channel
`agent`, caller `agent:heartbeat`) gets it with the instruction to do what
it asks. A file that is empty, or holds only headings and comments, costs
nothing: no turn is run. Neither is one during the quiet hours. The reply
goes to `agent.heartbeat_to`, unless it is just HEARTBEAT_OK (nothing needed
doing). Approvals are asked on channel `agent`, where nobody can answer: a
heartbeat cannot run a command that needs a person's yes.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from datetime import time as Time
from datetime import tzinfo as TzInfo
from typing import TYPE_CHECKING, Protocol

from edgeclaw.records import dataclass

if TYPE_CHECKING:
    from edgeclaw.agent.channel import InboundMessage, Reply

log = logging.getLogger("edgeclaw.heartbeat")

CHANNEL = "agent"
CALLER = "agent:heartbeat"
NOTHING_TO_DO = "HEARTBEAT_OK"
PROMPT = (
    "Heartbeat ({when}). Your HEARTBEAT.md says what to check or do at each heartbeat:\n\n{text}\n\n"
    "Do it now with your tools. Answer with a short report of what you found or did; if nothing "
    f"needed doing, answer exactly {NOTHING_TO_DO}."
)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_QUIET = re.compile(r"\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*")


class Answers(Protocol):
    async def handle(self, msg: InboundMessage) -> Reply: ...


@dataclass(frozen=True)
class QuietHours:
    """A daily span of time in which the heartbeat does not run."""

    start: Time
    end: Time

    @classmethod
    def parse(cls, text: str) -> QuietHours | None:
        """ "22:00-07:00" (may wrap midnight); "" = none. ValueError names what was expected."""
        if not text.strip():
            return None
        m = _QUIET.fullmatch(text)
        if m is None:
            raise ValueError(f"expected HH:MM-HH:MM such as 22:00-07:00, got {text!r}")
        h1, m1, h2, m2 = (int(g) for g in m.groups())
        if h1 > 23 or h2 > 23 or m1 > 59 or m2 > 59:
            raise ValueError(f"no such time of day in {text!r}")
        return cls(Time(h1, m1), Time(h2, m2))

    def contains(self, moment: datetime) -> bool:
        now = moment.time().replace(tzinfo=None)
        if self.start <= self.end:
            return self.start <= now < self.end
        return now >= self.start or now < self.end


def is_empty(text: str | None) -> bool:
    """Nothing to act on: no file, or only blank lines, headings and HTML comments."""
    if text is None:
        return True
    body = _COMMENT.sub("", text)
    return not any(line.strip() and not line.lstrip().startswith("#") for line in body.splitlines())


class Heartbeat:
    def __init__(
        self,
        read: Callable[[], str | None],
        agent: Callable[[], Answers | None],
        deliver: Callable[[Reply], Awaitable[list[str]]],
        *,
        agent_id: str = "main",
        quiet: QuietHours | None = None,
        tz: TzInfo | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.read = read
        self.agent = agent
        self.deliver = deliver
        self.agent_id = agent_id
        self.quiet = quiet
        self.tz = tz
        self.clock = clock
        self.beats = 0
        self.last: tuple[float, str] | None = None  # (when, what happened)

    async def beat(self) -> str:
        """One heartbeat; returns what happened: quiet, empty, ok (nothing to do), replied, failed."""
        now = self.clock()
        moment = datetime.fromtimestamp(now, self.tz)
        outcome = await self._beat(moment)
        self.beats += 1
        self.last = (now, outcome)
        log.info("heartbeat: %s", outcome)
        return outcome

    async def _beat(self, moment: datetime) -> str:
        if self.quiet is not None and self.quiet.contains(moment):
            return "quiet"
        text = self.read()
        if is_empty(text):
            return "empty"
        agent = self.agent()
        if agent is None:
            return "failed: no agent to run it"
        assert text is not None
        from edgeclaw.agent.channel import InboundMessage  # with the agent: not needed at start-up

        msg = InboundMessage(
            channel=CHANNEL,
            text=PROMPT.format(when=moment.isoformat(timespec="minutes"), text=text.strip()),
            chat_id="heartbeat",
            session=f"heartbeat:{self.agent_id}",
            peer_kind="local",
            caller=CALLER,
            request_id=f"heartbeat:{int(moment.timestamp())}",
        )
        reply = await agent.handle(msg)
        if not reply.ok:
            problems = await self.deliver(reply)
            return (
                "failed: "
                + reply.text.splitlines()[0][:200]
                + ("; " + "; ".join(problems) if problems else "")
            )
        if reply.text.strip() == NOTHING_TO_DO:
            return "ok"
        problems = await self.deliver(reply)
        return "replied" + (f" ({'; '.join(problems)})" if problems else "")
