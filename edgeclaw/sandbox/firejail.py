"""firejail: the default backend. A setuid-root program, so it works for an unprivileged daemon.

Everything is given on the command line (`--noprofile`), so what confines a
command is exactly what this module says, whatever profiles the distribution
ships. systemd units must not imply NoNewPrivileges for a daemon that uses it
(see docs/sandbox.md).

What of the host a command sees is an allowlist: the system directories
read-only, a private /etc, /dev and /tmp, /proc, and nothing else of / (see
`_host_view`). The workspace is shown with `--whitelist`: firejail then
replaces the whole top-level directory holding it (`/var` for
`/var/lib/edgeclaw/workspace`) with an empty one in which only the workspace
appears. That is the only way firejail (unprivileged) can hide a directory
*around* the workspace, such as the state directory, including files created
there while the command runs.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from collections.abc import Sequence
from pathlib import Path

from edgeclaw.sandbox.base import (
    SYSTEM_DIRS,
    SandboxBackend,
    SandboxSpec,
    entries_beside,
    only_trusted_can_swap,
    split_hidden,
)

# Top-level directories firejail cannot (or must not) replace for a whitelist: a workspace
# under one of them falls back to blacklisting what is beside it.
_NO_WHITELIST_TOP = frozenset({*SYSTEM_DIRS, "boot", "dev", "etc", "proc", "run", "sys"})
# Top-level entries firejail makes private itself (--private-dev, --private-etc, its own /proc,
# --private-tmp or a whitelist in /tmp), or that it needs: /run holds firejail's own state, so
# it cannot be hidden whole; what else is in it is.
_OWN_TOP = frozenset({*SYSTEM_DIRS, "dev", "etc", "proc", "tmp", "run"})


class FirejailBackend(SandboxBackend):
    name = "firejail"
    # firejail 0.9.7x prints these on every --private-etc run (it tries to unmount bind
    # mounts it never made); they are not the command's output.
    noise_lines = frozenset(
        {"/etc/group: unmount: Invalid argument", "/etc/passwd: unmount: Invalid argument"}
    )

    def __init__(self, binary: str = "firejail") -> None:
        super().__init__(binary)

    def wrap(self, argv: Sequence[str], spec: SandboxSpec) -> list[str]:
        ws = spec.workspace
        limits = spec.limits
        args = [
            self.locate() or self.binary,
            "--quiet",
            "--noprofile",
            # Privileges: no capabilities, a seccomp filter against the usual kernel-attack
            # syscalls, no setuid gains, no root user (when we are not root) and no groups
            # (the daemon's i2c/spi/gpio/dialout membership stays with the daemon).
            "--caps.drop=all",
            "--seccomp",
            "--nonewprivs",
            "--noroot",
            "--nogroups",
            # Namespaces and devices: a private /dev without hardware nodes, a private IPC space.
            "--private-dev",
            "--ipc-namespace",
            "--disable-mnt",
            # Files: everything read-only except the workspace; /etc reduced to what shells need.
            "--read-only=/",
            f"--read-write={ws}",
            "--private-etc=" + ",".join(spec.etc_allow),
            *([f"--rlimit-as={limits.max_memory_bytes}"] if limits.max_memory_bytes > 0 else []),
            f"--rlimit-fsize={limits.max_file_bytes}",
            f"--rlimit-nofile={limits.max_open_files}",
            # Enforced by the kernel only for non-root users; as root the pids cgroup does it.
            f"--rlimit-nproc={limits.max_processes}",
            # No --timeout: firejail's own timer adds about 2 s to every command; the runner's
            # timer kills the whole process group instead.
            # When the command's shell exits, kill whatever it left behind (a daemonised
            # grandchild would otherwise keep the sandbox, and the call, alive until the
            # timeout) and report the shell's exit status, not the last process's.
            "--deterministic-shutdown",
            "--deterministic-exit-code",
            # No unix-domain sockets (socketpair still works): with the daemon's uid, a socket
            # visible in /run (D-Bus, systemd, a broker, a database) would be a way out of the
            # sandbox that --net=none does not close. A program whose own processes talk over them
            # asks (`unix_sockets`); /run's entries are hidden from it all the same (`_host_view`).
            "--protocol=" + ("unix," if spec.unix_sockets else "") + "inet,inet6,netlink",
        ]
        if not spec.network:
            args.append("--net=none")
        if spec.keep_fds:
            # firejail closes every inherited descriptor above 2 but those named here.
            args.append("--keep-fd=" + ",".join(str(fd) for fd in spec.keep_fds))
        args += _host_view(spec)
        # No `--` before the program: with it, firejail 0.9.7x runs the command through the
        # user's login shell, which for a system user (/usr/sbin/nologin) runs nothing at all.
        # The program is an absolute path, so it cannot be read as an option.
        if not argv or not str(argv[0]).startswith("/"):
            raise ValueError("firejail needs the program as an absolute path")
        args.extend(argv)
        return args


def _host_view(spec: SandboxSpec) -> list[str]:
    """The options that leave only an allowlist of the host visible.

    Every top-level entry of / that is not a system directory, nor one firejail makes private,
    is blacklisted (empty and unreadable inside), unless the workspace or a visible path lies in
    it: then it is whitelisted, firejail replacing it with an empty directory holding only those.
    /run cannot be hidden whole (firejail keeps its own state there): its entries are. The
    listing is a snapshot: an entry made in / or /run after the command starts is not hidden.
    """
    ws = spec.workspace
    # firejail whitelists a symlink's target too, which whoever can change the link chooses, and
    # looks the path up by name, after this check. So a visible path is left out when it lies in
    # the workspace (the command's own to change; shown anyway) or could be swapped, or reached
    # through a symlink, that anyone but root and the daemon's user could change. bubblewrap
    # binds from a descriptor instead.
    kept = [
        p
        for p in spec.visible
        if p.is_absolute() and len(p.parts) > 2 and not p.is_relative_to(ws) and only_trusted_can_swap(p)
    ]  # fmt: skip
    args: list[str] = []
    whitelist = len(ws.parts) > 2 and ws.parts[1] not in _NO_WHITELIST_TOP
    if whitelist:
        args.append(f"--whitelist={ws}")
    shown_tops = {ws.parts[1]} if whitelist else set()
    for path in kept:
        if path.parts[1] not in _NO_WHITELIST_TOP:
            args += [f"--whitelist={path}", f"--read-only={path}"]
            shown_tops.add(path.parts[1])
    if "tmp" not in shown_tops:
        # A whitelist under /tmp (the workspace's, a kept path's) leaves /tmp an empty tmpfs
        # with only what it names; otherwise /tmp is made a private one.
        args.append("--private-tmp")
    # firejail replaces the user's home, not /home, for a whitelist inside it: hide its siblings.
    home = _home()
    if home is not None and len(home.parts) > 2 and home.parts[1] in shown_tops:
        with contextlib.suppress(ValueError):
            args.extend(f"--blacklist={p}" for p in entries_beside(Path("/", home.parts[1]), home))
    blacklisted: list[Path] = []
    for top in _entries(Path("/")):
        name = top.name
        if name in shown_tops or name in _OWN_TOP:
            continue
        if ws.is_relative_to(top) or any(k.is_relative_to(top) for k in kept):
            continue  # holds what must be seen where no whitelist can be made (/boot, /sys)
        blacklisted.append(top)
    run = Path("/run")
    # In /run: the workspace, kept paths and, with the network granted, the resolver file a
    # symlinked /etc/resolv.conf points at (systemd-resolved's stub) stay, and what lies beside
    # the way down to each of them goes.
    needed = [p for p in (ws, *kept, *_resolver(spec)) if p.is_relative_to(run) and p != run]
    for entry in _entries(run):
        if entry.name != "firejail" and not any(p.is_relative_to(entry) for p in needed):
            blacklisted.append(entry)
    for path in needed:
        blacklisted.extend(p for p in entries_beside(run, path) if p.parent != run)
    args.extend(f"--blacklist={p}" for p in blacklisted)
    ancestors, others = split_hidden(spec.hidden, ws)
    if not whitelist:
        # Directories holding the workspace are covered by the whitelist's empty top-level
        # directory; without one, hide what lies beside the way down to the workspace.
        for ancestor in ancestors:
            args.extend(f"--blacklist={p}" for p in entries_beside(ancestor, ws))
    # A hidden path inside what is blacklisted whole is hidden already (and cannot be reached to
    # be blacklisted again).
    args.extend(f"--blacklist={p}" for p in others if not any(p.is_relative_to(b) for b in blacklisted))
    return args


def _resolver(spec: SandboxSpec) -> list[Path]:
    resolv = Path("/etc/resolv.conf")
    return [Path(os.path.realpath(resolv))] if spec.network and resolv.is_symlink() else []


def _entries(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir())
    except OSError:
        return []


def _home() -> Path | None:
    """The home firejail uses: the user's from the password database, not $HOME."""
    try:
        return Path(os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir))
    except (KeyError, OSError):
        return None
