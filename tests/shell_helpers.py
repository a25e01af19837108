"""Helpers shared by the exec, process and custom tool tests: a runtime on a temporary state directory."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import Runtime, build_runtime
from edgeclaw.tools.approval import ApprovalRequest, Decision
from edgeclaw.tools.base import ToolContext


def make_runtime(tmp_path: Path, environ: dict[str, str] | None = None, **sections: Any) -> Runtime:
    data: dict[str, Any] = {"board": "sim", "state_dir": str(tmp_path / "state")}
    data.update(sections)
    config = config_from_dict(data, str(tmp_path / "edgeclaw.toml"))
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    env.update(environ or {})
    return build_runtime(config, environ=env)


class ScriptedApprover:
    """Answers approval questions from a script, recording what it was asked."""

    def __init__(self, *answers: Decision | None, delay: float = 0.0) -> None:
        self.answers = list(answers)
        self.delay = delay
        self.asked: list[ApprovalRequest] = []

    async def ask_approval(self, request: ApprovalRequest) -> Decision | None:
        self.asked.append(request)
        await asyncio.sleep(self.delay)
        return self.answers.pop(0) if self.answers else Decision.DENY


def ctx(channel: str = "mqtt", agent: str = "main", session: str = "mqtt:test") -> ToolContext:
    return ToolContext(channel=channel, agent_id=agent, session_key=session, sender="tester")


def marked_processes(marker: str) -> list[int]:
    """Pids whose command line holds `marker` (the `sh -c` wrapper that names it excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and b"sh\x00-c" not in cmdline:
            found.append(int(entry))
    return found
