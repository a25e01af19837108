"""bubblewrap: no setuid needed where unprivileged user namespaces are enabled.

The file system is built from nothing but what is listed here: the system
directories (`SYSTEM_DIRS`: /usr, /bin, /lib...) read-only, fresh /dev, /proc,
/tmp and /run, a replaced /etc with only the allowed entries, the visible paths
read-only, the workspace bound writable and the hidden paths covered. The rest
of the host's root does not exist inside.
bubblewrap applies no seccomp filter of its own (it would need a compiled BPF
program); capabilities are dropped and every namespace is unshared instead.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from edgeclaw.sandbox.base import (
    SYSTEM_DIRS,
    SandboxBackend,
    SandboxSpec,
    only_trusted_can_swap,
    open_unfollowed,
    prlimit_prefix,
    split_hidden,
    unfollowed,
)


@functools.cache
def _supports(binary: str, option: str) -> bool:
    """Whether this bwrap knows `option` (bubblewrap 0.8 added --disable-userns; bullseye has 0.4)."""
    try:
        done = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return option in done.stdout + done.stderr


def _shown(path: Path) -> bool:
    """Whether `path` is inside what every command sees anyway (a system directory, /etc, /dev, /proc)."""
    return len(path.parts) > 1 and path.parts[1] in (*SYSTEM_DIRS, "etc", "dev", "proc")


class BubblewrapBackend(SandboxBackend):
    name = "bubblewrap"

    def __init__(self, binary: str = "bwrap") -> None:
        super().__init__(binary)

    def wrap(self, argv: Sequence[str], spec: SandboxSpec) -> list[str]:
        """Visible paths bound by name (checked for symlinks, not race-free): `Sandbox.launch`
        uses `wrap_with_fds`, which binds them from descriptors."""
        return self._wrap(argv, spec, None)

    def wrap_with_fds(self, argv: Sequence[str], spec: SandboxSpec) -> tuple[list[str], tuple[int, ...]]:
        fds: list[int] = []
        try:
            return self._wrap(argv, spec, fds), tuple(fds)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

    def _wrap(self, argv: Sequence[str], spec: SandboxSpec, fds: list[int] | None) -> list[str]:
        ws = str(spec.workspace)
        binary = self.locate() or self.binary
        args = [
            binary,
            "--die-with-parent",
            # setsid inside: the command cannot push keystrokes into our terminal (TIOCSTI).
            "--new-session",
            "--unshare-all",
            "--cap-drop",
            "ALL",
        ]
        if _supports(binary, "--disable-userns"):
            # A user namespace of its own (also for a root daemon) in which no further user
            # namespace can be made: nested namespaces are kernel attack surface a command
            # never needs (firejail's seccomp filter refuses them too).
            args += ["--unshare-user", "--disable-userns"]
        # Built from an empty root: the system directories read-only, fresh /dev, /proc, /tmp and
        # /run, an /etc with only the allowed entries, the workspace and the visible paths. Nothing
        # else of the host exists inside (no /var, /home, /root, /srv, /opt, /mnt, /boot, /sys).
        for name in SYSTEM_DIRS:
            host = Path("/", name)
            if host.is_symlink():
                # /bin -> usr/bin on a merged-/usr system: the same link, to the bound /usr.
                args += ["--symlink", os.readlink(host), str(host)]
            elif host.is_dir():
                args += ["--ro-bind", str(host), str(host)]
        args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run", "--tmpfs", "/etc"]
        if spec.network:
            args.append("--share-net")
        for name in spec.etc_allow:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        if spec.network and Path("/etc/resolv.conf").is_symlink():
            # A symlinked resolv.conf (systemd-resolved) points into /run, which is a fresh tmpfs here.
            target = Path("/etc/resolv.conf").resolve()
            args += ["--ro-bind-try", str(target), str(target)]
        for path in spec.visible:
            if not path.is_absolute() or _shown(path):
                continue
            # Bound from a descriptor opened without following a symlink, not by name: a name
            # swapped for a symlink (before the check or after it) cannot bind what it points at.
            real = Path(os.path.realpath(path))
            if real != path and not only_trusted_can_swap(path):
                continue  # reached through a symlink someone else could change: not shown
            if fds is None:
                if unfollowed(real):
                    args += ["--ro-bind-try", str(real), str(real)]
            elif (fd := open_unfollowed(real)) is not None:
                fds.append(fd)
                args += ["--ro-bind-fd", str(fd), str(real)]
            else:
                continue
            if real != path:
                # The link as it was resolved (a virtualenv linked from a checkout), made by us.
                args += ["--symlink", str(real), str(path)]
        ancestors, others = split_hidden(spec.hidden, spec.workspace)
        # Directories holding the workspace become empty first (one may lie in a visible path);
        # binding the workspace then makes its path inside them. Other hidden paths come after
        # the workspace bind, or one inside the workspace would be uncovered by it.
        for path in ancestors:
            args += ["--tmpfs", str(path)]
        args += ["--bind", ws, ws]
        seen = [spec.workspace, *(p for p in spec.visible if p.is_absolute())]
        for path in others:
            if not _shown(path) and not any(path.is_relative_to(p) for p in seen):
                continue  # not in the sandbox at all; covering it would make it appear
            if path.is_dir():
                args += ["--tmpfs", str(path)]
            elif path.exists():
                args += ["--ro-bind", "/dev/null", str(path)]
        # The root itself (the mount points made above) is not the command's to write.
        args += ["--remount-ro", "/"]
        args += ["--chdir", str(spec.cwd)]
        args.append("--")
        args += prlimit_prefix(spec.limits)
        args.extend(argv)
        return args
