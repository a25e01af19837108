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
from collections.abc import Mapping, Sequence
from dataclasses import field, replace
from pathlib import Path

from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass
from edgeclaw.sandbox.base import DEFAULT_ETC_ALLOW, Limits, SandboxBackend, SandboxSpec, hidden_around
from edgeclaw.sandbox.bubblewrap import BubblewrapBackend
from edgeclaw.sandbox.cgroup import SandboxCgroups, layout_reason
from edgeclaw.sandbox.firejail import FirejailBackend
from edgeclaw.sandbox.host import HostBackend
from edgeclaw.sandbox.process import MIB, ChildProcess, Launch, WorkspaceSpaceFloor, parent_death_launcher

log = logging.getLogger("edgeclaw.sandbox")

BACKEND_NAMES = ("auto", "firejail", "bubblewrap", "none")
AUTO_ORDER = ("firejail", "bubblewrap")
PROBE_TIMEOUT_S = 15.0
_SMOKE_WORD = "edgeclaw-sandbox-ok"

# (backend name, binary path, uid) -> None when it works, else why not. One probe per process.
_PROBE_CACHE: dict[tuple[str, str, int], str | None] = {}


class SandboxUnavailable(BackendError):
    """No backend that the configuration accepts works on this machine (or may run a command now)."""


class NoRoomToRun(SandboxUnavailable):
    """The workspace's file system is under the reserve kept for the daemon: nothing is started."""


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
    # All sandboxed commands of this process together (a memory cgroup); 0 = no such bound.
    max_total_memory_bytes: int = 512 * MIB
    # Free space commands must leave on the workspace's file system; 0 = no reserve.
    disk_reserve_bytes: int = 64 * MIB


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
    import secrets  # on first use, not at start
    import tempfile

    with tempfile.TemporaryDirectory(prefix="edgeclaw-probe-") as tmp:
        ws = _real(tmp)
        spec = SandboxSpec(workspace=ws, cwd=ws, limits=limits, timeout_s=PROBE_TIMEOUT_S)
        token = secrets.token_hex(4)
        # Writes into the workspace and echoes: both must work for the backend to be of use.
        script = f"echo {token} > probe && cat probe && echo {_SMOKE_WORD}"
        # Started the way real commands are (the parent-death signal and the shell that keeps
        # it), so a chain that cannot work here fails the probe, not the first command.
        launch = Launch(
            argv=backend.wrap(["/bin/sh", "-c", script], spec),
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(ws)},
            cwd=ws,
            backend=backend.name,
            noise_lines=backend.noise_lines,
            parent_death=parent_death_launcher(),
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
    """The configured backend, probed once, plus the cgroups: builds `Launch`es."""

    def __init__(self, settings: SandboxSettings) -> None:
        if settings.backend not in BACKEND_NAMES:
            raise ValueError(f"unknown sandbox backend {settings.backend!r}")
        self.settings = settings
        self._chosen: SandboxBackend | None = None
        self._failures: list[str] = []
        self._cgroups: SandboxCgroups | None = None
        self._cgroups_checked = False

    @property
    def in_force(self) -> str | None:
        """The backend commands run in ("firejail", "bubblewrap", "none" for the host), once probed;
        None before the first command (probing runs a program, so nobody asks just to know)."""
        return None if self._chosen is None else self._chosen.name

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

    def cgroups(self) -> SandboxCgroups | None:
        if not self._cgroups_checked:
            self._cgroups_checked = True
            s = self.settings
            self._cgroups = SandboxCgroups.find(s.pids_cgroup, s.max_total_memory_bytes)
            if self._cgroups is None and os.geteuid() == 0:
                log.warning(
                    "running as root without a writable pids cgroup: the process limit is not enforced"
                )
            if s.max_total_memory_bytes > 0 and (self._cgroups is None or not self._cgroups.bounds_memory):
                log.warning("%s", self.memory_bound())
        return self._cgroups

    def memory_bound(self) -> str:
        """What bounds the memory of sandboxed commands here, in words (for the log and `doctor`)."""
        s = self.settings
        per_process = (
            f"per process only (RLIMIT_AS, sandbox.max_memory_mb = {s.limits.max_memory_bytes // MIB})"
        )
        if s.max_total_memory_bytes <= 0:
            return f"sandbox.max_total_memory_mb = 0: sandboxed commands are bounded {per_process}"
        cgroups = self.cgroups()
        if cgroups is not None and cgroups.bounds_memory:
            return (
                f"all sandboxed commands together: {s.max_total_memory_bytes // MIB} MiB, no swap "
                f"({cgroups.layout.how})"
            )
        why = layout_reason(s.pids_cgroup) if cgroups is None else "no memory controller there"
        return f"no memory cgroup ({why}): sandboxed commands are bounded {per_process}, not in total"

    def limits_report(self, workspace: Path) -> tuple[bool, str]:
        """The sandbox-wide limits in words, and whether they hold as configured (for `doctor`)."""
        s = self.settings
        cgroups = self.cgroups()
        memory_ok = s.max_total_memory_bytes <= 0 or (cgroups is not None and cgroups.bounds_memory)
        parts = [f"memory: {self.memory_bound()}"]
        disk_ok = True
        if s.disk_reserve_bytes > 0:
            free = WorkspaceSpaceFloor(workspace, s.disk_reserve_bytes).free_bytes()
            now = "" if free is None else f", {free // MIB} MiB free now"
            reserve = s.disk_reserve_bytes // MIB
            parts.append(f"disk: {reserve} MiB kept free on the workspace's file system{now}")
            disk_ok = free is None or free >= s.disk_reserve_bytes
            if not disk_ok:
                parts.append("commands are refused until space is freed")
        else:
            parts.append("disk: no reserve (sandbox.disk_reserve_mb = 0)")
        return memory_ok and disk_ok, "; ".join(parts)

    def check_disk(self, workspace: Path) -> None:
        """Refuse to start a command while the workspace's file system is under the reserve."""
        reserve = self.settings.disk_reserve_bytes
        if reserve <= 0:
            return
        free = WorkspaceSpaceFloor(workspace, reserve).free_bytes()
        if free is not None and free < reserve:
            raise NoRoomToRun(
                f"the workspace's file system has {free // MIB} MiB free, under the {reserve // MIB} MiB "
                "kept for the daemon's own state (sandbox.disk_reserve_mb); free some space first"
            )

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
        keep_visible: Sequence[Path] = (),
        memory_bytes: int = 0,
        max_processes: int = 0,
        unix_sockets: bool = False,
        etc_extra: Sequence[str] = (),
        address_space_limit: bool = True,
        pass_fds: Sequence[int] = (),
    ) -> Launch:
        """A confined launch. `keep_visible`: paths left readable even inside `hidden` (and the
        configured hide_paths): a program's own installation. `memory_bytes`: bound the command's
        memory by its own cgroup instead of by address space per process (RLIMIT_AS), which Node
        and the JVM cannot start under; where no memory cgroup is to be had, RLIMIT_AS stays.
        For one program rather than a shell command (the browser): `max_processes` replaces
        sandbox.max_processes (the pids cgroup counts threads, of which chromium has hundreds),
        `unix_sockets` lets it make unix-domain sockets (its own processes' IPC), `etc_extra` names
        /etc entries it needs besides the configured ones (its fonts, its own settings), and
        `address_space_limit = False` drops RLIMIT_AS where no cgroup bounds its memory (V8 reserves
        gigabytes of address space; the caller says it runs unbounded). `pass_fds`: descriptors the
        program inherits through the sandbox (closed here once it started, as the backend's are)."""
        backend = await self.backend()
        s = self.settings
        self.check_disk(workspace)
        cgroups = self.cgroups()
        if cgroups is None and os.geteuid() == 0 and backend.confines and s.required:
            # RLIMIT_NPROC does nothing for root: without a pids cgroup a fork bomb is not contained.
            raise SandboxUnavailable(
                "running as root and no pids cgroup is writable, so the process limit cannot be "
                "enforced; run the daemon as an unprivileged user or set sandbox.pids_cgroup"
            )
        limits = s.limits if max_processes <= 0 else replace(s.limits, max_processes=max_processes)
        by_cgroup = memory_bytes > 0 and cgroups is not None and cgroups.bounds_commands_memory
        if by_cgroup or not address_space_limit:
            limits = replace(limits, max_memory_bytes=0)
        elif memory_bytes > 0:
            log.warning(
                "no memory cgroup for %s: it runs under RLIMIT_AS (%d MiB of address space), which "
                "Node and the JVM cannot start under; %s",
                argv[0],
                limits.max_memory_bytes // MIB,
                self.memory_bound(),
            )
        spec = SandboxSpec(
            workspace=workspace,
            cwd=cwd,
            hidden=tuple(hidden_around(list(dict.fromkeys([*hidden, *s.hide_paths])), keep_visible)),
            network=network,
            limits=limits,
            timeout_s=timeout_s,
            visible=tuple(Path(p) for p in keep_visible),
            unix_sockets=unix_sockets,
            keep_fds=tuple(pass_fds),
            etc_allow=tuple(
                dict.fromkeys([*(DEFAULT_ETC_ALLOW if s.etc_allow is None else s.etc_allow), *etc_extra])
            ),
        )
        cgroup = None
        if cgroups is not None:
            try:
                # The backend's own processes (the guard shell, firejail's two, a shell) count too.
                cgroup = cgroups.create(limits.max_processes + 5, memory_bytes if by_cgroup else 0)
            except OSError as e:
                where = cgroups.run_dir
                raise BackendError(f"cannot create a command cgroup under {where}: {e.strerror}") from None
        wrapped, fds = backend.wrap_with_fds(list(argv), spec)
        return Launch(
            argv=wrapped,
            pass_fds=(*fds, *pass_fds),
            env=dict(env),
            cwd=cwd,
            backend=backend.name,
            cgroup=cgroup,
            noise_lines=backend.noise_lines,
            parent_death=parent_death_launcher(),
            space_floor=WorkspaceSpaceFloor(workspace, s.disk_reserve_bytes)
            if s.disk_reserve_bytes > 0
            else None,
            memory_bound_bytes=cgroups.memory_max if cgroups is not None else 0,
            command_memory_bytes=memory_bytes if by_cgroup else 0,
        )

    def describe(self) -> str:
        if self._chosen is not None:
            return self._chosen.name
        return f"{self.settings.backend} (not probed yet)"
