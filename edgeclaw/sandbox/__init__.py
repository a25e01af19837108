"""Sandbox backends for shell tools: firejail, bubblewrap, or none (the host).

Backends build confined command lines; `manager.Sandbox` picks one (probing
it once), `process.ChildProcess` runs and kills commands, `cgroup` caps their
process count. Nothing here imports a tool.
"""

from edgeclaw.sandbox.base import Limits, SandboxBackend, SandboxSpec
from edgeclaw.sandbox.manager import Sandbox, SandboxSettings, SandboxUnavailable
from edgeclaw.sandbox.process import ChildProcess, Launch, RunResult

__all__ = [
    "ChildProcess",
    "Launch",
    "Limits",
    "RunResult",
    "Sandbox",
    "SandboxBackend",
    "SandboxSettings",
    "SandboxSpec",
    "SandboxUnavailable",
]
