"""The update's state machine across a daemon killed at each step, the health window, and the
update state the retained status carries."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.admin.update import BASE, Slots, UpdateTrial, launch, update_state


class Execd(Exception):
    """os.execv stood in for: the slot that would run."""


@pytest.fixture
def no_exec(monkeypatch):
    def execv(path: str, argv: list[str]) -> None:
        raise Execd(Path(path).parent.parent.name)

    monkeypatch.setattr(os, "execv", execv)
    monkeypatch.delenv("EDGECLAW_SLOT", raising=False)


def _slots(tmp_path: Path) -> Slots:
    """Two installed slots, `old` current; an update to `new` staged as `stage` leaves it."""
    slots = Slots(tmp_path)
    for name in ("old", "new"):
        (slots.root / name / "bin").mkdir(parents=True)
        (slots.root / name / "bin" / "python").write_text("")
        (slots.root / name / ".installed").write_text("{}")
    slots.switch("old")
    return slots


PENDING = {"state": "pending", "slot": "new", "previous": "old", "version": "9.9"}


def _start(slots: Slots, monkeypatch) -> tuple[str | None, str | None]:
    """A start of the base installation: which slot it runs and what it rolled back."""
    monkeypatch.delenv("EDGECLAW_SLOT", raising=False)
    try:
        rolled_back = launch(slots.root.parent, ["run"])
    except Execd as e:
        return str(e), None
    return None, rolled_back


def test_killed_after_marking_but_before_the_switch_stays_on_the_old_version(tmp_path, no_exec, monkeypatch):
    slots = _slots(tmp_path)
    slots.write_trial(PENDING)  # killed here: `current` still names the old slot
    assert _start(slots, monkeypatch) == ("old", None)
    assert slots.current() == "old" and slots.trial()["state"] == "rolled_back"
    assert "interrupted before it was switched to" in slots.trial()["reason"]


def test_killed_after_the_switch_starts_the_new_version_on_trial(tmp_path, no_exec, monkeypatch):
    slots = _slots(tmp_path)
    slots.write_trial(PENDING)
    slots.switch("new")  # killed here, before the restart: the next start tries the new version
    with pytest.raises(Execd, match="new"):
        launch(tmp_path, ["run"])
    assert slots.trial()["state"] == "trying"


def test_killed_while_on_trial_goes_back_to_the_old_version(tmp_path, no_exec, monkeypatch):
    slots = _slots(tmp_path)
    slots.write_trial({**PENDING, "state": "trying"})
    slots.switch("new")  # the new version died (SIGKILL, power cut) before it was kept
    with pytest.raises(Execd, match="old"):
        launch(tmp_path, ["run"])
    assert slots.current() == "old" and slots.trial()["state"] == "rolled_back"


def test_kept_once_healthy_and_then_stays(tmp_path, no_exec, monkeypatch):
    slots = _slots(tmp_path)
    slots.write_trial({**PENDING, "state": "trying"})
    slots.switch("new")
    monkeypatch.setenv("EDGECLAW_SLOT", "new")
    assert UpdateTrial(tmp_path).confirm()["state"] == "applied"
    assert slots.trial() is None
    assert update_state(tmp_path) == {"slot": "new", "state": "idle"}
    # A later kill changes nothing: the next start runs the new version, no trial.
    assert _start(slots, monkeypatch) == ("new", None)


def test_update_state_for_the_status(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGECLAW_SLOT", raising=False)
    assert update_state(tmp_path) == {"slot": BASE, "state": "idle"}
    slots = _slots(tmp_path)
    slots.write_trial({**PENDING, "state": "rolled_back", "reason": "not healthy"})
    assert update_state(tmp_path) == {
        "slot": BASE,
        "state": "rolled_back",
        "version": "9.9",
        "previous": "old",
        "reason": "not healthy",
    }


class Channel:
    name = "mqtt"

    def __init__(self) -> None:
        self.problem: str | None = None

    def health_problem(self) -> str | None:
        return self.problem


def _daemon(window: float, channel: Channel) -> tuple[Any, list[str]]:
    from edgeclaw.daemon.lifecycle import Daemon

    daemon = Daemon.__new__(Daemon)
    daemon._stop = asyncio.Event()
    daemon.ready = asyncio.Event()
    daemon.ready.set()
    daemon._entered = [channel]
    daemon.restart_reason = None
    daemon.health_deadline_s = 5.0
    daemon.runtime = None  # no channels to tell of the verdict
    daemon.health_window_s = window
    verdicts: list[str] = []
    daemon.on_ready = lambda: verdicts.append("kept")
    daemon.on_unhealthy = lambda why: verdicts.append(why)
    return daemon, verdicts


async def test_kept_only_after_the_health_window():
    channel = Channel()
    daemon, verdicts = _daemon(0.6, channel)
    task = asyncio.create_task(daemon._confirm_health())
    await asyncio.sleep(0.3)
    assert verdicts == []  # healthy, but not for long enough yet
    await task
    assert verdicts == ["kept"]


async def test_a_break_inside_the_window_rolls_back():
    channel = Channel()
    daemon, verdicts = _daemon(2.0, channel)
    task = asyncio.create_task(daemon._confirm_health())
    await asyncio.sleep(0.3)
    channel.problem = "broker connection lost"
    await asyncio.wait_for(task, 2)
    assert len(verdicts) == 1 and "window" in verdicts[0] and "broker connection lost" in verdicts[0]
    assert daemon.restart_reason == verdicts[0]


def test_the_trial_marker_is_on_the_disk_before_it_replaces_the_old_one(tmp_path, monkeypatch):
    # A power cut right after the rename must not leave an empty update.json: launch() would then
    # run the new version with no trial, and a broken one would never be rolled back.
    synced: list[str] = []
    renamed: list[tuple[str, str, list[str]]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        renamed.append((str(src), str(dst), list(synced)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    slots = Slots(tmp_path)
    slots.write_trial({"state": "pending", "slot": "0.2-b", "previous": BASE})
    [(src, dst, before)] = renamed
    assert dst == str(slots.marker) and src in before  # the new file's blocks flushed first
    assert str(slots.root) in synced[len(before) :]  # then the directory, with the rename in it
    assert slots.trial() == {"state": "pending", "slot": "0.2-b", "previous": BASE}
