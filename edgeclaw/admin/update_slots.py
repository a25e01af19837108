"""Which installed version `edgeclaw run` starts, and the update on trial in the running daemon.

The part of updates every start takes (`launch`, `UpdateTrial`, the `Slots` they read, what the
retained status and `version` report), apart from receiving, checking and installing a wheel
(`admin.update`): a start that has no update waiting reads a link and a marker file, and need not
load what checks and installs wheels. The layout under STATE/venvs is described in `admin.update`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from edgeclaw.store.durable import fsync_dir, replace_durably

log = logging.getLogger("edgeclaw.update")

BASE = "base"  # the `previous` of a first update: the base installation, no slot


class Slots:
    """The slots under STATE/venvs, the `current` link and the trial marker."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "venvs"
        self.current_link = self.root / "current"
        self.marker = self.root / "update.json"
        self.uploads = state_dir / "updates"

    def current(self) -> str | None:
        """The slot `current` names (None: the base installation)."""
        try:
            return os.readlink(self.current_link)
        except OSError:
            return None

    def python(self, slot: str) -> Path:
        return self.root / slot / "bin" / "python"

    def switch(self, slot: str | None) -> None:
        """Point `current` at `slot` (None: back to the base installation), atomically."""
        self.root.mkdir(parents=True, exist_ok=True)
        if slot is None:
            with contextlib.suppress(FileNotFoundError):
                self.current_link.unlink()
            return
        tmp = self.root / "current.new"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.symlink(slot, tmp)
        os.replace(tmp, self.current_link)
        fsync_dir(self.root)

    def trial(self) -> dict[str, Any] | None:
        try:
            value = json.loads(self.marker.read_text())
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def write_trial(self, state: dict[str, Any]) -> None:
        # Flushed before the rename: after a power cut the marker is there whole, or not at all --
        # an empty one would let `launch` run a new version with no trial, never rolled back.
        self.root.mkdir(parents=True, exist_ok=True)
        replace_durably(self.marker, json.dumps(state).encode(), mode=0o644)

    def roll_back(self, reason: str) -> str:
        """Put the previous slot back; the trial marker says why until a healthy start reports it."""
        state = self.trial() or {}
        previous = state.get("previous")
        self.switch(None if previous in (None, BASE) else str(previous))
        self.write_trial({**state, "state": "rolled_back", "reason": reason, "at": time.time()})
        log.error("update to %s rolled back (%s): back on %s", state.get("slot"), reason, previous or BASE)
        return reason

    def installed(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if not p.is_symlink() and (p / ".installed").exists()
        )


# -- at start-up: which slot runs ------------------------------------------------------------------
def launch(state_dir: Path, argv: list[str]) -> str | None:
    """In the base installation's `edgeclaw run`: settle the trial, then run the current slot
    (os.execv, does not return) or return None to run this installation. Returns what was rolled
    back, if anything (then this installation or the previous slot runs)."""
    if os.environ.get("EDGECLAW_SLOT"):
        return None  # already in a slot: it was launched
    slots = Slots(state_dir)
    state = slots.trial()
    rolled_back = None
    if state is not None and state.get("state") == "trying":
        rolled_back = slots.roll_back("the new version did not come up healthy (it stopped before that)")
    elif state is not None and state.get("state") == "pending" and slots.current() != state.get("slot"):
        # Stopped between marking the update and switching to it: the old version is still current.
        rolled_back = slots.roll_back("the update was interrupted before it was switched to")
    elif state is not None and state.get("state") == "pending":
        slots.write_trial({**state, "state": "trying", "started": time.time()})
    slot = slots.current()
    if slot is None:
        return rolled_back
    python = slots.python(slot)
    if not python.exists():
        log.error("the current slot %s has no interpreter: running the base installation", slot)
        slots.switch(None)
        return rolled_back
    os.environ["EDGECLAW_SLOT"] = slot
    os.environ["EDGECLAW_BASE_PYTHON"] = sys.executable
    # PYTHONPATH comes before the slot's site-packages: an entry holding an edgeclaw package (a
    # checkout) would run that code instead of the update's, so the slot starts without it.
    kept = [
        p
        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if p and not Path(p, "edgeclaw").is_dir()
    ]
    if kept:
        os.environ["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        os.environ.pop("PYTHONPATH", None)
    # -P: the working directory is not put on sys.path, so a checkout there cannot shadow the slot.
    os.execv(str(python), [str(python), "-P", "-m", "edgeclaw", *argv])
    return None  # not reached


class UpdateTrial:
    """In the running daemon: confirm (healthy) or roll back the slot it was started from."""

    def __init__(self, state_dir: Path) -> None:
        self.slots = Slots(state_dir)
        self.slot = os.environ.get("EDGECLAW_SLOT")

    @property
    def trying(self) -> bool:
        state = self.slots.trial()
        return state is not None and state.get("state") == "trying" and state.get("slot") == self.slot

    def confirm(self) -> dict[str, Any] | None:
        state = self.slots.trial()
        if state is None:
            return None
        if state.get("state") == "trying" and state.get("slot") == self.slot:
            state["state"] = "applied"
        elif state.get("state") != "rolled_back":
            return None
        with contextlib.suppress(FileNotFoundError):
            self.slots.marker.unlink()
        return state

    def roll_back(self, why: str) -> None:
        if self.trying:
            self.slots.roll_back(why)


def versions(state_dir: Path) -> dict[str, Any]:
    """For `version`: the slot running, the one `current` names, the installed ones, the trial, and an
    update waiting for the update lock (or given up)."""
    from edgeclaw.admin.update_defer import deferred_state

    slots = Slots(state_dir)
    return {
        "deferred": deferred_state(state_dir),
        "slot": os.environ.get("EDGECLAW_SLOT") or BASE,
        "current": slots.current() or BASE,
        "slots": slots.installed(),
        "trial": slots.trial(),
    }


def update_state(state_dir: Path) -> dict[str, Any]:
    """The `update` member of the retained status: the slot running and the update in progress, if
    any (`state`: idle, deferred, deferred_expired, deferred_failed, pending, trying, rolled_back; a
    kept update leaves no marker: idle)."""
    from edgeclaw.admin.update_defer import deferred_state

    trial = Slots(state_dir).trial()
    deferred = deferred_state(state_dir)
    if trial is None or (deferred is not None and deferred["state"] == "deferred"):
        trial = deferred or {}  # waiting for the update lock (admin/update_defer.py), or given up
    out: dict[str, Any] = {
        "slot": os.environ.get("EDGECLAW_SLOT") or BASE,
        "state": trial.get("state", "idle"),
    }
    for key in ("version", "previous", "reason", "until"):
        if trial.get(key) is not None:
            out[key] = trial[key]
    return out
