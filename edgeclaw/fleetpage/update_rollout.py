"""One device's step in an update rollout: the update sent, then the device watched until its own
signed status says whether the new version was kept.

The update goes to the device's `admin/gateway` as the `update` action, signed with the page's
admin key (`FleetBroker.admin`); the device fetches the wheel from the URL, checks it (SHA-256, its
signature), installs it beside the running version, answers, and restarts onto it. Its answer only
says that much: whether the new version is kept is decided later, on the device, by its health
(docs/fleet.md#updates). So the step then watches the device's retained `status`, as the window
holds it, for a start after the answer (another `since` than the one seen when the answer came)
whose `update` member is settled:

- the slot the answer named, `idle`: kept, healthy — `ok`;
- another slot (`rolled_back`, then `idle` on the previous one), or a deferred update given up or
  failed: `failed`, with the device's reason;
- `pending`, `trying`, `deferred`: not yet; a device still `deferred` when the wait ends (its update
  lock held: a job or a flagged tool call running) is `deferred`, which does not count as a failure.

Only a status the device signed, verified with its pinned key, counts as its word: from a device
whose status cannot be verified (no key pinned), the step ends `failed` rather than believe a status
any client could have published in its name. Nothing came back within the wait: `no_answer`.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from edgeclaw.net.device_trust import VERIFIED

if TYPE_CHECKING:
    from edgeclaw.fleetpage.broker import FleetBroker
    from edgeclaw.fleetpage.window import FleetWindow

POLL_S = 0.5
NOT_YET = ("pending", "trying", "deferred")  # the device's update states that are not an outcome


class UpdateStep:
    """Update one device and wait for its verdict (a rollout's `update` call)."""

    def __init__(self, broker: FleetBroker, window: FleetWindow, poll_s: float = POLL_S) -> None:
        self.broker = broker
        self.window = window
        self.poll_s = poll_s

    async def __call__(self, device: str, args: dict[str, Any], wait_s: float) -> dict[str, Any]:
        """The device's outcome; TimeoutError when it did not even answer within `wait_s`."""
        deadline = time.monotonic() + wait_s
        answer = await self.broker.admin(device, "update", args, wait_s)
        if answer.get("ok") is not True:
            error = answer.get("error")
            return {"state": "failed", "error": str(error or "the update was refused")[:500]}
        data = answer.get("data") if isinstance(answer.get("data"), dict) else {}
        # The status when the answer came: the verdict is in a later one, from a later start.
        answered = self._status(device)
        slot = data.get("slot") if isinstance(data.get("slot"), str) else None
        version = str(data.get("version") or "")
        last = "no status since the update"
        while True:
            status = self._status(device)
            if status is not answered and status.get("state") == "online":
                update = status.get("update") if isinstance(status.get("update"), dict) else {}
                state = str(update.get("state") or "idle")
                running = str(update.get("slot") or "")
                last = f"{state} on {running or 'an unknown slot'}"
                restarted = status.get("since") != answered.get("since")
                verdict = self._verdict(
                    device, state, running, slot, version, update.get("reason"), restarted
                )
                if verdict is not None:
                    return verdict
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(self.poll_s)
        if last.startswith("deferred") or (data.get("deferred") is True and last.startswith("no status")):
            return {"state": "deferred", "error": f"still waiting for its update lock after {wait_s:g} s"}
        return {"state": "no_answer", "error": f"not back with a settled update within {wait_s:g} s ({last})"}

    def _status(self, device: str) -> dict[str, Any]:
        view = self.window.devices.get(device)
        return view.status if view is not None else {}

    def _verdict(
        self,
        device: str,
        state: str,
        running: str,
        slot: str | None,
        version: str,
        reason: Any,
        restarted: bool,
    ) -> dict[str, Any] | None:
        if state in NOT_YET:
            return None
        view = self.window.devices.get(device)
        if view is None or view.trust != VERIFIED:
            return {
                "state": "failed",
                "error": "its status is not signed with a pinned key: whether the update was kept "
                "cannot be told from it (docs/fleet.md#device-keys)",
            }
        why = f": {reason}" if isinstance(reason, str) and reason else ""
        if state in ("deferred_expired", "deferred_failed"):  # said by the process that deferred it
            return {"state": "failed", "error": f"the deferred update ended {state}{why}"[:500]}
        if not restarted:
            return None  # still the process that answered: the new version has not started yet
        # A deferred update's answer names its version only: its slot is VERSION-SHA12.
        kept = running == slot if slot else running.rsplit("-", 1)[0] == version
        if kept and state == "idle":
            return {"state": "ok", "slot": running}
        error = f"not kept: rolled back (the device reports {state} on {running or 'an unknown slot'}){why}"
        return {"state": "failed", "slot": running, "error": error[:500]}
