"""The `memory` target: a job's output as a line in today's daily note (`memory/daily/DATE.md`).

The note is the device's own (the global memory) when the job's owner may
write it (its channel is in `memory.shared_writers`, as for `memory_store`
with `shared: true`), else the owner's own memory. Lines are appended in one
transaction each, so two jobs finishing together lose nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from datetime import tzinfo as TzInfo

from edgeclaw.store.memory import GLOBAL, Document, MemoryStore
from edgeclaw.tools.automation.targets import Delivery
from edgeclaw.tools.automation.when import local_zone

MAX_LINE_CHARS = 500


class DailyNotes:
    def __init__(self, store: MemoryStore, shared_writers: Iterable[str], tz: TzInfo | None = None) -> None:
        self.store = store
        self.shared_writers = frozenset(shared_writers)
        self.tz = tz or local_zone()

    def path_for(self, ts: float) -> str:
        return f"memory/daily/{datetime.fromtimestamp(ts, self.tz).date().isoformat()}.md"

    async def __call__(self, rest: str, delivery: Delivery) -> None:
        moment = datetime.fromtimestamp(delivery.ts, self.tz)
        scope = GLOBAL if delivery.owner_channel in self.shared_writers else delivery.owner
        line = " ".join(delivery.line().split())[:MAX_LINE_CHARS]
        entry = f"- {moment.strftime('%H:%M')} {line}\n"

        def append(doc: Document | None) -> str:
            head = doc.content if doc is not None else f"# {moment.date().isoformat()}\n\n"
            return head + ("" if head.endswith("\n") else "\n") + entry

        self.store.update(self.path_for(delivery.ts), scope, append, category="daily")
