"""Shared fixtures: an isolated state directory and a way to run the real `edgeclaw` command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may touch the machine's /var/lib/edgeclaw or /etc/edgeclaw: state goes to a temp dir."""
    monkeypatch.setenv("EDGECLAW_STATE_DIR", str(tmp_path_factory.mktemp("default-state")))
    monkeypatch.setattr("edgeclaw.config.loader.SYSTEM_CONFIG", Path("/nonexistent/edgeclaw.toml"))


@pytest.fixture
def state_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An environment whose state dir and config live under tmp_path (never /etc or /var/lib)."""
    state = tmp_path / "state"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("EDGECLAW_", "NOTIFY_SOCKET", "WATCHDOG_"))
    }
    env["EDGECLAW_STATE_DIR"] = str(state)
    env["EDGECLAW_CONFIG"] = str(tmp_path / "edgeclaw.toml")
    (tmp_path / "edgeclaw.toml").write_text('board = "sim"\n')
    monkeypatch.setenv("EDGECLAW_STATE_DIR", str(state))
    monkeypatch.setenv("EDGECLAW_CONFIG", str(tmp_path / "edgeclaw.toml"))
    return env


@pytest.fixture
def run_cli(state_env: dict[str, str]):
    """Run `python -m edgeclaw ARGS...` as a user would, returning the completed process."""

    def run(
        *args: str, timeout: float = 30, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "edgeclaw", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env or state_env,
        )

    return run
