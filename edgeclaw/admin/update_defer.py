"""An update that arrives while STATE/update.lock is held: checked, kept, applied once the lock frees.

The update is checked as any other (size, SHA-256, signature, version) before it is deferred, then
kept with a task that tries the lock exclusive every `POLL_S` seconds; once it gets the lock it
installs the update and restarts onto it, holding the lock until the process ends, so a process
that takes it with `flock` waits for the restart (work the daemon itself starts meanwhile still
runs: a hold never waits, and it gets the usual drain). `gateway.update_defer_max_s` bounds the
wait: past it the update is given up (`deferred_expired`), not forced; the sender sends it again,
or with `force`.

One update waits at a time: a second one replaces the first (its answer says which it replaced),
and one applied at once (the lock free, or `force`) cancels a waiting one.

A deferred update survives a restart of the daemon, a kill or a power cut too. Before `deferred`
is answered, the bytes received (the wheel, or the bundle with its dependency wheels) are written to
STATE/venvs/deferred-SHA12.update and the request's facts (version, sha256, signature, who sent it,
the deadline) to the marker below, each fsync'd and renamed into place. At the next start the
daemon takes the marker over (`kept_at_start`: a read of the marker, nothing more when there is
none) and, once its channels are up, checks the stored bytes again exactly as when they arrived
(`admin.update.resume_update`): a file that no longer passes is dropped (`deferred_failed`), never
installed. It then waits for the lock until the original deadline (a restart does not extend it);
past it already, the update is given up at once. The kept file goes when the update is applied,
replaced, given up or dropped.

STATE/venvs/deferred.json tells the retained status (`update_state`) about it: `deferred` with the
version, who sent it and what holds the lock, while a process keeps it; `deferred_expired` or
`deferred_failed` after, until the next update. Each change is told to `on_change` (the daemon
republishes its status).
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
from edgeclaw.store.durable import replace_durably
from edgeclaw.tasks import TaskSet

if TYPE_CHECKING:
    from edgeclaw.store.update_lock import UpdateLock
    from edgeclaw.tools.audit import AuditTrail

log = logging.getLogger("edgeclaw.update")

POLL_S = 1.0
MARKER = Path("venvs") / "deferred.json"
KEPT_PREFIX, KEPT_SUFFIX = "deferred-", ".update"  # venvs/deferred-SHA12.update: the bytes received
# The request's arguments a kept update is checked and installed with again after a restart.
KEPT_ARGS = ("sha256", "signature", "allow_downgrade", "upload")

# Installs the checked update and restarts onto it; given what held the lock when it was forced.
Install = Callable[[list[str]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class KeptUpdate:
    """What a deferred update needs to be checked again and applied after a restart."""

    data: bytes  # as received: the wheel, or the bundle with its dependency wheels
    name: str | None  # the file name it was downloaded under (checked against its version)
    args: dict[str, Any]  # the request's KEPT_ARGS


@dataclass
class _Waiting:
    version: str
    by: str
    task: asyncio.Future[None]


def deferred_state(state_dir: Path) -> dict[str, Any] | None:
    """The deferral for the status: a `deferred` one only while a process that keeps it runs."""
    try:
        value = json.loads((state_dir / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(value, dict):
        return None
    if value.get("state") == "deferred" and value.get("pid") != os.getpid():
        return None  # kept by a process gone since; the next start of the daemon takes it over
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
        self.on_change: Callable[[], None] | None = None  # the marker changed: the status may have
        self._waiting: _Waiting | None = None
        self._tasks = TaskSet()
        self._held: int | None = None  # the lock, held from an update's install until the process ends
        self._installing: str | None = None  # the version being installed (then restarted onto)
        self._resumable: dict[str, Any] | None = None  # kept by an earlier run, until resumed

    async def apply_or_defer(
        self, version: str, by: str, force: bool, install: Install, kept: KeptUpdate | None = None
    ) -> dict[str, Any]:
        if self._installing is not None:
            raise ToolError(
                f"update: the update to {self._installing} is being installed and restarted onto; "
                "send this one once that is done"
            )
        fd = self.lock.try_exclusive()
        if fd is None and not force:
            return self._defer(version, by, install, kept)
        held_by = [] if fd is not None else (self.lock.holders() or ["(unknown)"])
        if self._waiting is not None:  # superseded: neither waits nor is kept any more
            self._cancel_waiting()
            self._forget()
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
        self._forget()
        return answer

    def _defer(self, version: str, by: str, install: Install, kept: KeptUpdate | None) -> dict[str, Any]:
        held_by = self.lock.holders() or ["(a holder that cannot be named)"]
        waiting = self._waiting.version if self._waiting is not None else None
        replaced = waiting or (self._resumable or {}).get("version")  # or one kept, not yet resumed
        max_s = self.max_s()
        reason = f"the update lock is held by {', '.join(held_by)}"
        now = time.time()
        marker = {"state": "deferred", "version": version, "by": by, "reason": reason, "held_by": held_by,
                  "since": round(now, 3), "until": round(now + max_s, 3), "pid": os.getpid()}  # fmt: skip
        try:
            if kept is not None:
                # On disk before the answer: what is answered `deferred` is applied after a restart too.
                marker["kept"] = {"file": self._keep(kept), "name": kept.name, "force": False,
                                  **{key: kept.args.get(key) for key in KEPT_ARGS}}  # fmt: skip
            self._write(marker)
        except OSError as e:  # the update waiting before, if any, still waits and stays kept
            self._drop_files(keep=self._kept_file())
            raise ToolError(
                f"update: cannot keep the update in {self.marker.parent} to apply it later ({e}); "
                "nothing deferred"
            ) from None
        self._cancel_waiting()
        self._resumable = None  # one kept by an earlier run, replaced by this one
        self._drop_files(keep=marker.get("kept", {}).get("file"))
        self._start_waiting(version, by, install, max_s, max_s)
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

    def _start_waiting(self, version: str, by: str, install: Install, max_s: float, left_s: float) -> None:
        task = self._tasks.spawn(
            self._wait(version, by, install, max_s, left_s), name=f"deferred update {version}"
        )
        self._waiting = _Waiting(version, by, task)

    async def _wait(self, version: str, by: str, install: Install, max_s: float, left_s: float) -> None:
        deadline = time.monotonic() + left_s
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
        self._resumable = None
        self._write(
            {"state": state, "version": version, "by": by, "reason": reason, "at": round(time.time(), 3)}
        )
        self._drop_files()
        self.audit.emit("update_" + state, by=by, version=version, reason=reason)

    def _cancel_waiting(self) -> None:
        """Stop waiting for the update lock (replaced, superseded, or the daemon stopping)."""
        if self._waiting is not None:
            self._waiting.task.cancel()
            self._waiting = None

    def _forget(self) -> None:
        """No update waits any more (applied, or replaced by one applied at once): marker and file go."""
        self._resumable = None
        existed = self.marker.exists()
        with contextlib.suppress(FileNotFoundError):
            self.marker.unlink()
        self._drop_files()
        if existed:
            self._changed()

    # -- kept across a restart ---------------------------------------------------------------------
    def kept_at_start(self) -> dict[str, Any] | None:
        """At the daemon's start: the deferral an earlier run kept, now this process's (the status
        shows it from the first publish), or None. Reads the marker only."""
        try:
            value = json.loads(self.marker.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(value, dict) or value.get("state") != "deferred":
            return None
        if not isinstance(value.get("kept"), dict):
            return None  # kept in memory only, by a version before kept files: gone with it
        self._write({**value, "pid": os.getpid()})
        self._resumable = value
        return value

    def left_to_resume(self) -> dict[str, Any] | None:
        """The deferral `kept_at_start` took over, unless an update since replaced or superseded it."""
        return self._resumable

    def expire_if_late(self, kept: dict[str, Any]) -> bool:
        """Give a kept deferral up when its deadline passed while the daemon was down."""
        if self._left_s(kept) > 0:
            return False
        version, by = str(kept.get("version")), str(kept.get("by"))
        why = (
            f"its deadline ({self._max_s(kept):g} s, gateway.update_defer_max_s) passed before the "
            "daemon started again: not applied; send it again, or with force"
        )
        self._finish("deferred_expired", version, by, why)
        log.error("the deferred update to %s was given up: %s", version, why)
        return True

    def kept_args(self, kept: dict[str, Any]) -> dict[str, Any]:
        """The request's arguments, as the update was deferred with them (never `force`)."""
        return {key: kept["kept"].get(key) for key in KEPT_ARGS} | {"force": False}

    def read_kept(self, kept: dict[str, Any], max_bytes: int) -> bytes:
        """The kept file's bytes, at most one past `max_bytes` (the checks then refuse its size)."""
        name = str(kept["kept"].get("file"))
        if not (name.startswith(KEPT_PREFIX) and name.endswith(KEPT_SUFFIX)) or "/" in name:
            raise ToolError(f"update: the deferral's kept file {name!r} is not one it writes")
        try:
            with open(self.marker.parent / name, "rb") as f:
                return f.read(max_bytes + 1)
        except OSError as e:
            raise ToolError(f"update: the deferred update's kept file cannot be read: {e}") from None

    def drop_kept(self, kept: dict[str, Any], why: str) -> None:
        """A kept update that no longer passes its checks: never installed, and the status says why."""
        version = str(kept.get("version"))
        self._finish("deferred_failed", version, str(kept.get("by")), why)
        log.error(
            "the deferred update to %s kept across the restart is dropped, not installed: %s", version, why
        )

    def forget_kept(self) -> None:
        """A kept update this process already runs (installed by the run that stopped applying it)."""
        self._forget()

    def resume(self, kept: dict[str, Any], install: Install) -> None:
        """Wait for the lock again for a kept deferral (checked again), until its original deadline."""
        self._resumable = None
        version, by = str(kept.get("version")), str(kept.get("by"))
        self._start_waiting(version, by, install, self._max_s(kept), self._left_s(kept))
        log.warning("the deferred update to %s from %s waits for the update lock again", version, by)

    @staticmethod
    def _max_s(kept: dict[str, Any]) -> float:
        return float(kept.get("until", 0)) - float(kept.get("since", 0))

    def _left_s(self, kept: dict[str, Any]) -> float:
        # A clock set back (a board without a real-time clock, before its time sync) does not
        # make it wait longer than it was given when deferred.
        return min(float(kept.get("until", 0)) - time.time(), self._max_s(kept))

    # -- files -------------------------------------------------------------------------------------
    def _keep(self, kept: KeptUpdate) -> str:
        """The bytes received in venvs/deferred-SHA12.update, fsync'd; its file name."""
        name = f"{KEPT_PREFIX}{str(kept.args.get('sha256', '')).strip().lower()[:12]}{KEPT_SUFFIX}"
        self._write_file(self.marker.parent / name, kept.data)
        return name

    def _kept_file(self) -> str | None:
        """The kept file the marker names, if any."""
        with contextlib.suppress(OSError, ValueError, AttributeError):
            return json.loads(self.marker.read_text()).get("kept", {}).get("file")
        return None

    def _drop_files(self, keep: str | None = None) -> None:
        """The kept files but `keep` (and any a write cut short left)."""
        if not self.marker.parent.is_dir():
            return
        for path in self.marker.parent.glob(f"{KEPT_PREFIX}*{KEPT_SUFFIX}*"):
            if path.name != keep:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    def _write(self, value: dict[str, Any]) -> None:
        self._write_file(self.marker, json.dumps(value).encode())
        self._changed()

    def _write_file(self, path: Path, data: bytes) -> None:
        """Written whole or not at all, across a power cut too."""
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_durably(path, data, mode=0o644)

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:  # the status is told late, the update goes on
                log.exception("telling the status about the deferred update failed")

    async def aclose(self) -> None:
        """At the daemon's stop: the wait ends; a kept update is taken over by the next start."""
        self._cancel_waiting()
        self._tasks.cancel()
        await self._tasks.wait(5.0)
