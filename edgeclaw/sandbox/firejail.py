"""firejail: the default backend. A setuid-root program, so it works for an unprivileged daemon.

Everything is given on the command line (`--noprofile`), so what confines a
command is exactly what this module says, whatever profiles the distribution
ships. systemd units must not imply NoNewPrivileges for a daemon that uses it
(see docs/sandbox.md).

The workspace is shown with `--whitelist`: firejail then replaces the whole
top-level directory holding it (`/var` for `/var/lib/edgeclaw/workspace`)
with an empty one in which only the workspace appears. That is the only way
firejail (unprivileged) can hide a directory *around* the workspace, such as
the state directory, including files created there while the command runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from edgeclaw.sandbox.base import SandboxBackend, SandboxSpec, entries_beside, split_hidden

# Top-level directories firejail cannot (or must not) replace for a whitelist: a workspace
# under one of them falls back to blacklisting what is beside it.
_NO_WHITELIST_TOP = frozenset(
    {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys", "usr"}
)


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
            # When the command's shell exits, kill whatever it left behind (a daemonised
            # grandchild would otherwise keep the sandbox, and the call, alive until the
            # timeout) and report the shell's exit status, not the last process's.
            "--deterministic-shutdown",
            "--deterministic-exit-code",
            # No unix-domain sockets (socketpair still works): with the daemon's uid, a socket
            # visible in /run (D-Bus, systemd, a broker, a database) would be a way out of the
            # sandbox that --net=none does not close.
            "--protocol=inet,inet6,netlink",
        ]
        if not spec.network:
            args.append("--net=none")
        whitelist = len(ws.parts) > 2 and ws.parts[1] not in _NO_WHITELIST_TOP
        if whitelist:
            args.append(f"--whitelist={ws}")
        # What must stay readable where a whitelist leaves only what it names: /tmp, and the top
        # directory the workspace's whitelist is in. Whitelisted, read-only.
        tmp = Path("/tmp")
        kept = [
            p
            for p in spec.visible
            if p.is_absolute() and len(p.parts) > 2
            and (p.is_relative_to(tmp) or (whitelist and p.parts[1] == ws.parts[1]))
        ]  # fmt: skip
        for path in kept:
            args += [f"--whitelist={path}", f"--read-only={path}"]
        if not ws.is_relative_to(tmp) and not any(p.is_relative_to(tmp) for p in kept):
            # A whitelist under /tmp (the workspace's, a kept path's) leaves /tmp an empty tmpfs
            # with only what it names; otherwise /tmp is made a private one.
            args.append("--private-tmp")
        ancestors, others = split_hidden(spec.hidden, ws)
        if not whitelist:
            # Directories holding the workspace are covered by the whitelist's empty top-level
            # directory; without one, hide what lies beside the way down to the workspace.
            for ancestor in ancestors:
                args.extend(f"--blacklist={p}" for p in entries_beside(ancestor, ws))
        args.extend(f"--blacklist={p}" for p in others)
        # No `--` before the program: with it, firejail 0.9.7x runs the command through the
        # user's login shell, which for a system user (/usr/sbin/nologin) runs nothing at all.
        # The program is an absolute path, so it cannot be read as an option.
        if not argv or not str(argv[0]).startswith("/"):
            raise ValueError("firejail needs the program as an absolute path")
        args.extend(argv)
        return args
