"""bubblewrap: no setuid needed where unprivileged user namespaces are enabled.

The file system is built from nothing but what is listed here: the host root
read-only, fresh /dev, /proc, /tmp and /run, a replaced /etc with only the
allowed entries, the hidden paths covered and the workspace bound writable.
bubblewrap applies no seccomp filter of its own (it would need a compiled BPF
program); capabilities are dropped and every namespace is unshared instead.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Sequence
from pathlib import Path

from edgeclaw.sandbox.base import SandboxBackend, SandboxSpec, prlimit_prefix, split_hidden


@functools.cache
def _supports(binary: str, option: str) -> bool:
    """Whether this bwrap knows `option` (bubblewrap 0.8 added --disable-userns; bullseye has 0.4)."""
    try:
        done = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return option in done.stdout + done.stderr


class BubblewrapBackend(SandboxBackend):
    name = "bubblewrap"

    def __init__(self, binary: str = "bwrap") -> None:
        super().__init__(binary)

    def wrap(self, argv: Sequence[str], spec: SandboxSpec) -> list[str]:
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
        args += [
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "--tmpfs",
            "/var/tmp",
            "--tmpfs",
            "/run",
            "--tmpfs",
            "/etc",
        ]
        if spec.network:
            args.append("--share-net")
        for name in spec.etc_allow:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        ancestors, others = split_hidden(spec.hidden, spec.workspace)
        # Directories holding the workspace become empty first; binding the workspace then
        # makes its path inside them. Other hidden paths come after the workspace bind, or
        # one inside the workspace would be uncovered by it.
        for path in ancestors:
            args += ["--tmpfs", str(path)]
        args += ["--bind", ws, ws]
        for path in others:
            if path.is_dir():
                args += ["--tmpfs", str(path)]
            elif path.exists():
                args += ["--ro-bind", "/dev/null", str(path)]
        for path in spec.visible:
            # Under the fresh /tmp, /var/tmp or /run only what is bound there exists.
            if path.is_absolute() and any(path.is_relative_to(t) for t in ("/tmp", "/var/tmp", "/run")):
                args += ["--ro-bind-try", str(path), str(path)]
        args += ["--chdir", str(spec.cwd)]
        if spec.network and Path("/etc/resolv.conf").is_symlink():
            # A symlinked resolv.conf (systemd-resolved) points into /run, which is a fresh tmpfs here.
            target = Path("/etc/resolv.conf").resolve()
            args += ["--ro-bind-try", str(target), str(target)]
        args.append("--")
        args += prlimit_prefix(spec.limits)
        args.extend(argv)
        return args
