"""firejail: the default backend. A setuid-root program, so it works for an unprivileged daemon.

Everything is given on the command line (`--noprofile`), so what confines a
command is exactly what this module says, whatever profiles the distribution
ships. systemd units must not imply NoNewPrivileges for a daemon that uses it
(see docs/sandbox.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from edgeclaw.sandbox.base import SandboxBackend, SandboxSpec


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
            f"--rlimit-as={limits.max_memory_bytes}",
            f"--rlimit-fsize={limits.max_file_bytes}",
            f"--rlimit-nofile={limits.max_open_files}",
            # Enforced by the kernel only for non-root users; as root the pids cgroup does it.
            f"--rlimit-nproc={limits.max_processes}",
            # No --timeout: firejail's own timer adds about 2 s to every command; the runner's
            # timer kills the whole process group instead.
        ]
        if not spec.network:
            args.append("--net=none")
        if ws.is_relative_to(Path("/tmp")):
            # --private-tmp would hide a workspace under /tmp; whitelisting it gives the
            # same empty tmpfs on /tmp with only the workspace inside.
            args.append(f"--whitelist={ws}")
        else:
            args.append("--private-tmp")
        args.extend(f"--blacklist={p}" for p in spec.hidden)
        args.append("--")
        args.extend(argv)
        return args
