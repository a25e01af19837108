"""An update that arrives while STATE/update.lock is held: checked, kept, applied once the lock frees.

The update is checked as any other (size, SHA-256, signature, version) before it is deferred, then
kept in memory with a task that tries the lock exclusive every `POLL_S` seconds; once it gets the
lock it installs the update and restarts onto it, holding the lock until the process ends, so a
process that takes it with `flock` waits for the restart (work the daemon itself starts meanwhile
still runs: a hold never waits, and it gets the usual drain). `gateway.update_defer_max_s` bounds
the wait: past it the update is given up (`deferred_expired`), not forced; the sender sends it
again, or with `force`.

One update waits at a time: a second one replaces the first (its answer says which it replaced),
and one applied at once (the lock free, or `force`) cancels a waiting one. A deferred update lives
in this process only: a restart forgets it (the status then no longer shows it as deferred).

STATE/venvs/deferred.json tells the retained status (`update_state`) about it: `deferred` with the
version, who sent it and what holds the lock, while this process waits; `deferred_expired` or
`deferred_failed` after, until the next update.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeclaw.errors import ToolError
from edgeclaw.records import dataclass
from edgeclaw.tasks import TaskSet

if TYPE_CHECKING:
    from edgeclaw.store.update_lock import UpdateLock
    from edgeclaw.tools.audit import AuditTrail

log = logging.getLogger("edgeclaw.update")

POLL_S = 1.0
MARKER = Path("venvs") / "deferred.json"

# Installs the checked update and restarts onto it; given what held the lock when it was forced.
Install = Callable[[list[str]], Awaitable[dict[str, Any]]]


@dataclass
class _Waiting:
    version: str
    by: str
    task: asyncio.Future[None]


def deferred_state(state_dir: Path) -> dict[str, Any] | None:
    """The deferral for the status: a `deferred` one only while the process that keeps it runs."""
    try:
        value = json.loads((state_dir / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(value, dict):
        return None
    if value.get("state") == "deferred" and value.get("pid") != os.getpid():
        return None  # kept by a process gone since: forgotten with it
    return value


class UpdateDeferral:
    """The update lock's side of `update`: apply now, or keep the update until the lock frees."""

    def __init__(
        self, lock: UpdateLock, state_dir: Path, audit: AuditTrail, max_s: Callable[[], float]
    ) -> None:
        self.lock = lock
        self.marker = state_dir / MARKER
        self.audit = audit
        self.max_s = max_s  # read at each deferral: gateway.update_defer_max_s of the config in force
        self.poll_s = POLL_S
        self._waiting: _Waiting | None = None
        self._tasks = TaskSet()
        self._held: int | None = None  # the lock, held from an update's install until the process ends
        self._installing: str | None = None  # the version being installed (then restarted onto)

    async def apply_or_defer(self, version: str, by: str, force: bool, install: Install) -> dict[str, Any]:
        if self._installing is not None:
            raise ToolError(
                f"update: the update to {self._installing} is being installed and restarted onto; "
                "send this one once that is done"
            )
        fd = self.lock.try_exclusive()
        if fd is None and not force:
            return self._defer(version, by, install)
        held_by = [] if fd is not None else (self.lock.holders() or ["(unknown)"])
        self._cancel_waiting()
        answer = await self._install(version, fd, install, held_by)
        if held_by:
            answer["text"] += f" (forced: the update lock was held by {', '.join(held_by)})"
        return answer

    async def _install(
        self, version: str, fd: int | None, install: Install, held_by: list[str]
    ) -> dict[str, Any]:
        self._installing = version
        try:
            answer = await install(held_by)
        except BaseException:
            self._installing = None
            if fd is not None:
                os.close(fd)
            raise
        self._held = fd
        with contextlib.suppress(FileNotFoundError):
            self.marker.unlink()
        return answer

    def _defer(self, version: str, by: str, install: Install) -> dict[str, Any]:
        held_by = self.lock.holders() or ["(a holder that cannot be named)"]
        replaced = self._waiting.version if self._waiting is not None else None
        self._cancel_waiting()
        max_s = self.max_s()
        reason = f"the update lock is held by {', '.join(held_by)}"
        self._write({"state": "deferred", "version": version, "by": by, "reason": reason,
                     "held_by": held_by, "since": round(time.time(), 3),
                     "until": round(time.time() + max_s, 3), "pid": os.getpid()})  # fmt: skip
        task = self._tasks.spawn(self._wait(version, by, install, max_s), name=f"deferred update {version}")
        self._waiting = _Waiting(version, by, task)
        self.audit.emit("update_deferred", by=by, version=version, held_by=held_by, replaced=replaced)
        log.warning("update to %s from %s deferred: %s", version, by, reason)
        text = (
            f"edgeclaw {version} checked and deferred: {reason}. It is applied as soon as the lock is "
            f"free, or given up after {max_s:g} s (gateway.update_defer_max_s); "
            'send "force": true to apply it now'
        )
        if replaced is not None:
            text += f". It replaces the update to {replaced} that was waiting"
        return {"ok": True, "deferred": True, "how": "deferred", "text": text, "version": version,
                "held_by": held_by, "replaced": replaced, "defer_max_s": max_s}  # fmt: skip

    async def _wait(self, version: str, by: str, install: Install, max_s: float) -> None:
        deadline = time.monotonic() + max_s
        while True:
            fd = self.lock.try_exclusive()
            if fd is not None:
                self._waiting = None
                try:
                    await self._install(version, fd, install, [])
                except Exception as e:  # told in the status, not left showing `deferred`
                    why = str(e) if isinstance(e, ToolError) else f"internal error: {type(e).__name__}: {e}"
                    self._finish("deferred_failed", version, by, why)
                    log.error("the deferred update to %s failed: %s", version, why)
                else:
                    log.warning("update lock free: the deferred update to %s is applied", version)
                return
            if time.monotonic() >= deadline:
                self._waiting = None
                held_by = self.lock.holders() or ["(a holder that cannot be named)"]
                why = (
                    f"the update lock was still held after {max_s:g} s (gateway.update_defer_max_s) by "
                    f"{', '.join(held_by)}: not applied; send it again, or with force"
                )
                self._finish("deferred_expired", version, by, why)
                log.error("the deferred update to %s was given up: %s", version, why)
                return
            await asyncio.sleep(self.poll_s)

    def _finish(self, state: str, version: str, by: str, reason: str) -> None:
        self._write(
            {"state": state, "version": version, "by": by, "reason": reason, "at": round(time.time(), 3)}
        )
        self.audit.emit("update_" + state, by=by, version=version, reason=reason)

    def _cancel_waiting(self) -> None:
        """Drop the update waiting, if any (replaced, superseded, or the daemon stopping)."""
        if self._waiting is not None:
            self._waiting.task.cancel()
            self._waiting = None
            with contextlib.suppress(FileNotFoundError):
                self.marker.unlink()

    def _write(self, value: dict[str, Any]) -> None:
        self.marker.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.marker.with_name("deferred.json.new")
        tmp.write_text(json.dumps(value))
        os.replace(tmp, self.marker)

    async def aclose(self) -> None:
        """At the daemon's stop: a waiting update is dropped (a restart forgets it)."""
        self._cancel_waiting()
        self._tasks.cancel()
        await self._tasks.wait(5.0)
