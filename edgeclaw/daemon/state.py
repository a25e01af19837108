"""The daemon's care of its state database: check at start, say so when it was recovered, keep it up.

Entered after the channels, so that the database is opened (checked and, if
need be, recovered: `store.state`) and the recovery is then reported as an
audit event (`state_database`) that the MQTT channel publishes on `events`.
While the daemon runs it backs the database up every
`state.backup_interval_s` and puts the disk reserve back once there is room;
the backup at a clean stop is taken by `Runtime.aclose`, after the last
write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from edgeclaw.daemon.runtime import Runtime
from edgeclaw.store.state import StateStore

log = logging.getLogger("edgeclaw.daemon.state")

UPKEEP_S = 60.0  # how often the reserve and the backup schedule are looked at


@contextlib.asynccontextmanager
async def state_service(runtime: Runtime, *, upkeep_s: float | None = None) -> AsyncIterator[StateStore]:
    store = runtime.state
    runtime.db  # noqa: B018 - opened (checked, recovered) now, not at the first message
    health = store.health
    if health is not None and health.recovered:
        runtime.audit.emit(
            "state_database",
            outcome=health.outcome,
            problem=health.problem,
            moved_to=[str(p) for p in health.moved_to],
            restored_from=str(health.restored_from) if health.restored_from else None,
        )
    if store.reserve.enabled and not store.reserve.present and store.reserve.released_at is None:
        log.warning(
            "no room for the %d-byte disk reserve in %s: a full disk will stop the daemon's own writes",
            store.reserve.size,
            store.path.parent,
        )
    store.backup_on_close = True
    every = UPKEEP_S if upkeep_s is None else upkeep_s
    task = asyncio.get_running_loop().create_task(_upkeep(store, every), name="state-upkeep")
    try:
        yield store
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _upkeep(store: StateStore, every_s: float) -> None:
    while True:
        try:
            if store.reserve.enabled and not store.reserve.present:
                await asyncio.to_thread(store.reserve.ensure)
            if store.backup_due():
                await asyncio.to_thread(store.backup)
        except Exception:
            log.exception("state database upkeep failed")
        await asyncio.sleep(every_s)
