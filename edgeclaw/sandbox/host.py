"""The `none` backend: no confinement at all, only resource limits.

Chosen explicitly (`sandbox.backend = "none"`) or, with `sandbox.required =
false`, when no real backend works; the command then sees everything the
daemon's user can see. The environment allowlist, the process-group kill and
the output cap still apply, because those are done by the runner.
"""

from __future__ import annotations

from collections.abc import Sequence

from edgeclaw.sandbox.base import SandboxBackend, SandboxSpec, prlimit_prefix


class HostBackend(SandboxBackend):
    name = "none"
    confines = False

    def __init__(self, binary: str = "") -> None:
        super().__init__("")

    def locate(self) -> str | None:
        return ""

    def wrap(self, argv: Sequence[str], spec: SandboxSpec) -> list[str]:
        return [*prlimit_prefix(spec.limits), *argv]
