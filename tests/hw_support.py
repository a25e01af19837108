"""Helpers shared by the hardware tests: a runtime on a chosen board profile, and calls through it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeclaw.config.schema import Config
from edgeclaw.config.typed import build_dataclass
from edgeclaw.daemon.runtime import Runtime, build_runtime
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.registry import CallOutcome

CTX = ToolContext(channel="cli", session_key="hw-test")


def make_runtime(tmp_path: Path, board: str = "sim", **extra: Any) -> Runtime:
    data = {"board": board, "state_dir": str(tmp_path / "state"), "tools": {"rate_limit": 0}, **extra}
    config, errors = build_dataclass(Config, data, "test.toml")
    assert not errors and config is not None, errors
    return build_runtime(config, environ={})


async def call(runtime: Runtime, tool: str, dry_run: bool = False, **args: Any) -> CallOutcome:
    return await runtime.registry.execute(tool, args, CTX, dry_run=dry_run)


async def ok(runtime: Runtime, tool: str, **args: Any) -> dict[str, Any]:
    """Call and insist on success; returns the structured data of the result."""
    outcome = await call(runtime, tool, **args)
    assert outcome.ok, outcome.error
    assert outcome.data is not None, f"{tool} returned no structured data"
    return outcome.data


def write_profile(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'[board]\nname = "{name}"\n{body}')
    return str(path)
