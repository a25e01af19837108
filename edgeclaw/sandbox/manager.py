"""Choosing the sandbox backend, proving it works, and building launches with it.

`auto` tries firejail, then bubblewrap, by really running a smoke command in
each with the same confinement a real command gets; the first that answers
correctly wins. The verdict is cached for the life of the process, per
backend and binary, so the probe runs once. With `required = true` (the
default) and no working backend, every launch is refused: there is no silent
fallback to the host. `backend = "none"` (or `required = false` with nothing
working) runs commands on the host, and says so.
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edgeclaw.errors import BackendError
from edgeclaw.sandbox.base import Limits, SandboxBackend, SandboxSpec
from edgeclaw.sandbox.bubblewrap import BubblewrapBackend
from edgeclaw.sandbox.cgroup import PidsCgroups
from edgeclaw.sandbox.firejail import FirejailBackend
from edgeclaw.sandbox.host import HostBackend
from edgeclaw.sandbox.process import ChildProcess, Launch

log = logging.getLogger("edgeclaw.sandbox")

BACKEND_NAMES = ("auto", "firejail", "bubblewrap", "none")
AUTO_ORDER = ("firejail", "bubblewrap")
PROBE_TIMEOUT_S = 15.0
_SMOKE_WORD = "edgeclaw-sandbox-ok"

# (backend name, binary path, uid) -> None when it works, else why not. One probe per process.
_PROBE_CACHE: dict[tuple[str, str, int], str | None] = {}


class SandboxUnavailable(BackendError):
    """No backend that the configuration accepts works on this machine."""


@dataclass(frozen=True)
class SandboxSettings:
    """The sandbox configuration, as the backends need it."""

    backend: str = "auto"
    required: bool = True
    firejail_path: str = "firejail"
    bubblewrap_path: str = "bwrap"
    limits: Limits = field(default_factory=Limits)
    pids_cgroup: str = "auto"
    etc_allow: tuple[str, ...] | None = None  # None = the built-in list
    hide_paths: tuple[Path, ...] = ()


def make_backend(name: str, settings: SandboxSettings) -> SandboxBackend:
    if name == "firejail":
        return FirejailBackend(settings.firejail_path)
    if name == "bubblewrap":
        return BubblewrapBackend(settings.bubblewrap_path)
    if name == "none":
        return HostBackend()
    raise ValueError(f"unknown sandbox backend {name!r} (expected one of: {', '.join(BACKEND_NAMES)})")


async def probe(backend: SandboxBackend, limits: Limits) -> str | None:
    """Run a smoke command under `backend`; None when it works, else the reason it does not."""
    binary = backend.locate()
    if binary is None:
        return f"{backend.binary!r} is not installed (not found on PATH)"
    key = (backend.name, binary, os.geteuid())
    if key in _PROBE_CACHE:
        return _PROBE_CACHE[key]
    # Two first calls racing would both probe; harmless, and cheaper than a lock that
    # would tie this module to one event loop.
    verdict = await _smoke(backend, limits)
    _PROBE_CACHE[key] = verdict
    if verdict is None:
        log.info("sandbox backend %s works (%s)", backend.name, binary or "host")
    else:
        log.warning("sandbox backend %s does not work: %s", backend.name, verdict)
    return verdict


def _real(path: str) -> Path:
    return Path(os.path.realpath(path))


async def _smoke(backend: SandboxBackend, limits: Limits) -> str | None:
    with tempfile.TemporaryDirectory(prefix="edgeclaw-probe-") as tmp:
        ws = _real(tmp)
        spec = SandboxSpec(workspace=ws, cwd=ws, limits=limits, timeout_s=PROBE_TIMEOUT_S)
        token = secrets.token_hex(4)
        # Writes into the workspace and echoes: both must work for the backend to be of use.
        script = f"echo {token} > probe && cat probe && echo {_SMOKE_WORD}"
        launch = Launch(
            argv=backend.wrap(["/bin/sh", "-c", script], spec),
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(ws)},
            cwd=ws,
            backend=backend.name,
            noise_lines=backend.noise_lines,
        )
        try:
            child = await ChildProcess.start(launch)
            result = await child.run_to_end(PROBE_TIMEOUT_S, 4096, 65536)
        except BackendError as e:
            return str(e)
        if result.timed_out:
            return f"the smoke test did not finish within {PROBE_TIMEOUT_S:g} s"
        lines = result.output.split()
        if result.exit_code == 0 and token in lines and _SMOKE_WORD in lines:
            return None
        shown = " ".join(result.output.split())[:300] or "no output"
        return f"the smoke test failed (exit status {result.exit_code}): {shown}"


class Sandbox:
    """The configured backend, probed once, plus the pids cgroups: builds `Launch`es."""

    def __init__(self, settings: SandboxSettings) -> None:
        if settings.backend not in BACKEND_NAMES:
            raise ValueError(f"unknown sandbox backend {settings.backend!r}")
        self.settings = settings
        self._chosen: SandboxBackend | None = None
        self._failures: list[str] = []
        self._cgroups: PidsCgroups | None = None
        self._cgroups_checked = False

    async def backend(self) -> SandboxBackend:
        """The backend to use. Raises SandboxUnavailable when none works and one is required."""
        if self._chosen is not None:
            return self._chosen
        s = self.settings
        names = AUTO_ORDER if s.backend == "auto" else (s.backend,)
        failures: list[str] = []
        for name in names:
            backend = make_backend(name, s)
            why = await probe(backend, s.limits)
            if why is None:
                self._chosen = backend
                return backend
            failures.append(f"{name}: {why}")
        self._failures = failures
        if s.required:
            hint = (
                "install firejail or bubblewrap, or set sandbox.required = false to run on the host"
                if s.backend == "auto"
                else f"fix {s.backend}, choose another sandbox.backend, or set sandbox.required = false"
            )
            raise SandboxUnavailable("no sandbox backend works (" + "; ".join(failures) + f"); {hint}")
        log.warning("no sandbox backend works (%s); running commands on the host", "; ".join(failures))
        self._chosen = HostBackend()
        return self._chosen

    def cgroups(self) -> PidsCgroups | None:
        if not self._cgroups_checked:
            self._cgroups_checked = True
            self._cgroups = PidsCgroups.find(self.settings.pids_cgroup)
            if self._cgroups is None and os.geteuid() == 0:
                log.warning(
                    "running as root without a writable pids cgroup: the process limit is not enforced"
                )
        return self._cgroups

    async def launch(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        cwd: Path,
        env: Mapping[str, str],
        network: bool,
        timeout_s: float,
        hidden: Sequence[Path] = (),
    ) -> Launch:
        backend = await self.backend()
        s = self.settings
        cgroups = self.cgroups()
        if cgroups is None and os.geteuid() == 0 and backend.confines and s.required:
            # RLIMIT_NPROC does nothing for root: without a pids cgroup a fork bomb is not contained.
            raise SandboxUnavailable(
                "running as root and no pids cgroup is writable, so the process limit cannot be "
                "enforced; run the daemon as an unprivileged user or set sandbox.pids_cgroup"
            )
        spec = SandboxSpec(
            workspace=workspace,
            cwd=cwd,
            hidden=tuple(dict.fromkeys([*hidden, *s.hide_paths])),
            network=network,
            limits=s.limits,
            timeout_s=timeout_s,
            **({} if s.etc_allow is None else {"etc_allow": s.etc_allow}),
        )
        cgroup = None
        if cgroups is not None:
            try:
                # The backend's own processes (firejail's two, a shell) count too.
                cgroup = cgroups.create(s.limits.max_processes + 4)
            except OSError as e:
                where = cgroups.parent
                raise BackendError(f"cannot create a pids cgroup under {where}: {e.strerror}") from None
        return Launch(
            argv=backend.wrap(list(argv), spec),
            env=dict(env),
            cwd=cwd,
            backend=backend.name,
            cgroup=cgroup,
            noise_lines=backend.noise_lines,
        )

    def describe(self) -> str:
        if self._chosen is not None:
            return self._chosen.name
        return f"{self.settings.backend} (not probed yet)"
