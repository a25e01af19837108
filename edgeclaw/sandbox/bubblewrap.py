"""bubblewrap: no setuid needed where unprivileged user namespaces are enabled.

The file system is built from nothing but what is listed here: the host root
read-only, fresh /dev, /proc, /tmp and /run, a replaced /etc with only the
allowed entries, the hidden paths covered and the workspace bound writable.
bubblewrap applies no seccomp filter of its own (it would need a compiled BPF
program); capabilities are dropped and every namespace is unshared instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from edgeclaw.sandbox.base import SandboxBackend, SandboxSpec, prlimit_prefix


class BubblewrapBackend(SandboxBackend):
    name = "bubblewrap"

    def __init__(self, binary: str = "bwrap") -> None:
        super().__init__(binary)

    def wrap(self, argv: Sequence[str], spec: SandboxSpec) -> list[str]:
        ws = str(spec.workspace)
        args = [
            self.locate() or self.binary,
            "--die-with-parent",
            # setsid inside: the command cannot push keystrokes into our terminal (TIOCSTI).
            "--new-session",
            "--unshare-all",
            "--cap-drop",
            "ALL",
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
        for path in spec.hidden:
            if path.is_dir():
                args += ["--tmpfs", str(path)]
            elif path.exists():
                args += ["--ro-bind", "/dev/null", str(path)]
        args += ["--bind", ws, ws, "--chdir", str(spec.cwd)]
        if spec.network and Path("/etc/resolv.conf").is_symlink():
            # A symlinked resolv.conf (systemd-resolved) points into /run, which is a fresh tmpfs here.
            target = Path("/etc/resolv.conf").resolve()
            args += ["--ro-bind-try", str(target), str(target)]
        args.append("--")
        args += prlimit_prefix(spec.limits)
        args.extend(argv)
        return args
