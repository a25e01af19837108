"""One device's step in an update rollout (fleetpage/update_rollout.py), against a window fed the
statuses a device publishes around an update: the answer, the restart, the verdict.

The whole path with real daemons, wheels and a broker is tests/test_fleet_update_rollout.py; here
each way the device's word can go (kept, rolled back, deferred, refused, unsigned, forged, silent)
is played one at a time.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from edgeclaw.fleetpage.update_rollout import UpdateStep
from edgeclaw.fleetpage.window import FleetWindow
from tests.fleet_support import SignedDevice

SLOT = "9.9.9-0123456789ab"
ARGS = {"url": "http://127.0.0.1/edgeclaw-9.9.9-py3-none-any.whl", "sha256": "0" * 64}


def online(since: float, update: dict[str, Any]) -> dict[str, Any]:
    return {"state": "online", "since": since, "update": update}


class Device:
    """The page's broker side as the step sees it: `admin` answers as the device would, then the
    statuses it publishes come into the window one by one."""

    def __init__(self, window: FleetWindow, device: SignedDevice | None, answer: dict[str, Any]) -> None:
        self.window = window
        self.device = device
        self.answer = answer
        self.after: list[tuple[dict[str, Any], SignedDevice | None]] = []
        self.sent: list[tuple[str, str, dict[str, Any]]] = []

    def publish(self, body: dict[str, Any], signer: SignedDevice | None = None) -> None:
        signer = signer or self.device
        if signer is None:  # an unsigned status, as an older edgeclaw publishes
            self.window.take("edgeclaw/d1/status", json.dumps(body).encode())
        else:
            self.window.take(*signer.message("status", body))

    async def admin(self, device: str, action: str, args: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self.sent.append((device, action, args))
        asyncio.get_running_loop().create_task(self._later())
        return self.answer

    async def _later(self) -> None:
        for body, signer in self.after:
            await asyncio.sleep(0.05)
            self.publish(body, signer)


def setup(tmp_path: Path, answer: dict[str, Any], signed: bool = True) -> tuple[Device, UpdateStep]:
    signer = SignedDevice(tmp_path, "d1") if signed else None
    window = FleetWindow()
    device = Device(window, signer, answer)
    device.publish(online(100.0, {"slot": "base", "state": "idle"}))  # before: on the base installation
    return device, UpdateStep(device, window, poll_s=0.02)  # type: ignore[arg-type]


INSTALLED = {"ok": True, "data": {"slot": SLOT, "previous": "base", "version": "9.9.9"}}


async def test_kept_once_a_later_start_reports_the_new_slot_idle(tmp_path):
    device, step = setup(tmp_path, INSTALLED)
    device.after = [
        (online(100.0, {"slot": "base", "state": "pending"}), None),  # the old process, marked
        ({"state": "offline"}, None),
        (online(200.0, {"slot": SLOT, "state": "trying"}), None),  # the new one, on trial
        (online(200.0, {"slot": SLOT, "state": "idle"}), None),  # healthy: kept
    ]
    assert await step("d1", ARGS, 5.0) == {"state": "ok", "slot": SLOT}
    assert device.sent == [("d1", "update", ARGS)]


async def test_rolled_back_with_the_devices_reason(tmp_path):
    device, step = setup(tmp_path, INSTALLED)
    reason = "the new version did not come up healthy (it stopped before that)"
    device.after = [(online(300.0, {"slot": "base", "state": "rolled_back", "reason": reason}), None)]
    outcome = await step("d1", ARGS, 5.0)
    assert outcome["state"] == "failed" and "rolled back" in outcome["error"] and reason in outcome["error"]
    # The rollback already reported and cleared when the page next hears from it: idle, on the base.
    device, step = setup(tmp_path / "later", INSTALLED)
    device.after = [(online(300.0, {"slot": "base", "state": "idle"}), None)]
    outcome = await step("d1", ARGS, 5.0)
    assert outcome["state"] == "failed" and "idle on base" in outcome["error"], outcome


async def test_the_process_that_answered_is_not_taken_for_the_new_version(tmp_path):
    # Its own status after the answer (same `since`) says idle on the base: not a verdict.
    device, step = setup(tmp_path, INSTALLED)
    device.after = [(online(100.0, {"slot": "base", "state": "idle"}), None)]
    outcome = await step("d1", ARGS, 1.0)
    assert outcome["state"] == "no_answer" and "idle on base" in outcome["error"], outcome


async def test_a_refused_update_fails_with_the_devices_error(tmp_path):
    _, step = setup(tmp_path, {"ok": False, "error": "update: the signature does not match"})
    outcome = await step("d1", ARGS, 1.0)
    assert outcome == {"state": "failed", "error": "update: the signature does not match"}


async def test_deferred_is_its_own_outcome_and_a_deferral_given_up_fails(tmp_path):
    answer = {"ok": True, "data": {"deferred": True, "version": "9.9.9"}}
    device, step = setup(tmp_path, answer)
    device.after = [(online(100.0, {"slot": "base", "state": "deferred", "version": "9.9.9"}), None)]
    assert (await step("d1", ARGS, 1.0))["state"] == "deferred"
    device, step = setup(tmp_path / "again", answer)
    device.after = [
        (online(100.0, {"slot": "base", "state": "deferred"}), None),
        (online(100.0, {"slot": "base", "state": "deferred_expired", "reason": "still held"}), None),
    ]
    outcome = await step("d1", ARGS, 5.0)
    assert outcome["state"] == "failed" and "deferred_expired: still held" in outcome["error"]
    # Applied once the lock freed: the slot is VERSION-SHA12, the answer named the version only.
    device, step = setup(tmp_path / "applied", answer)
    device.after = [(online(400.0, {"slot": SLOT, "state": "idle"}), None)]
    assert await step("d1", ARGS, 5.0) == {"state": "ok", "slot": SLOT}


async def test_a_status_the_page_cannot_verify_is_not_taken_as_the_devices_word(tmp_path):
    # No device key: anyone could have published "kept" in its name.
    device, step = setup(tmp_path, INSTALLED, signed=False)
    device.after = [(online(200.0, {"slot": SLOT, "state": "idle"}), None)]
    outcome = await step("d1", ARGS, 5.0)
    assert outcome["state"] == "failed" and "not signed with a pinned key" in outcome["error"]


async def test_a_status_forged_in_the_devices_name_changes_nothing(tmp_path):
    device, step = setup(tmp_path, INSTALLED)
    forger = SignedDevice(tmp_path / "forger", "d1")  # another key, the same device name
    device.after = [(online(200.0, {"slot": SLOT, "state": "idle"}), forger)]
    outcome = await step("d1", ARGS, 1.0)
    assert outcome["state"] == "no_answer", outcome
