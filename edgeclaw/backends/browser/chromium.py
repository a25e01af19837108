"""Starting and stopping one headless chromium, with its own throwaway profile directory.

chromium is started by whoever builds this (`spawn`): the browser tool starts it in the daemon's
sandbox, where the profile directory is the only writable place. DevTools goes over two pipes
(`--remote-debugging-pipe`, `cdp`), handed to chromium through the sandbox, so it opens no DevTools
port another local process could use. The profile directory is removed when the browser stops:
cookies and storage never outlive the instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import tempfile
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from edgeclaw.backends.browser.cdp import CDPConnection
from edgeclaw.errors import BackendError

if TYPE_CHECKING:
    from edgeclaw.sandbox.process import ChildProcess

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
# Starts chromium's argv with the profile directory as the only writable place, handing it the
# descriptors given; it takes them over (closes them in the daemon, started or not).
Spawn = Callable[[list[str], Path, tuple[int, ...]], Awaitable["ChildProcess"]]
# Inside the sandbox, just before chromium: its DevTools pipe ends become its descriptors 3 and 4,
# where --remote-debugging-pipe looks for them ($1 and $2: where they were passed). bash, not sh:
# dash redirects only descriptors 0 to 9.
_PIPE_SHIM = 'eval "exec 3<&$1 4>&$2 $1<&- $2>&-"; shift 2; exec "$@"'
# Passed descriptors go above this: clear of a shell's low numbers and of what the sandbox binds.
_FD_FLOOR = 100
_BASH = "/bin/bash"
_LOG_LINES = 20  # of chromium's own output, kept for an error at start


def find_chromium() -> str | None:
    """The chromium executable on PATH, or None (doctor reports it)."""
    for name in CHROMIUM_NAMES:
        if found := shutil.which(name):
            return found
    return None


def chromium_args(executable: str, profile_dir: str, proxy: str | None, confined: bool = True) -> list[str]:
    args = [
        executable,
        "--headless=new",
        "--remote-debugging-pipe",
        f"--user-data-dir={profile_dir}",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--mute-audio",
        "about:blank",
    ]
    if proxy:
        # Every request, loopback included ("<-loopback>" removes chromium's built-in bypass), goes
        # through the daemon's guarded proxy; DNS prefetching would leak names past it.
        args[1:1] = [
            f"--proxy-server={proxy}",
            "--proxy-bypass-list=<-loopback>",
            "--dns-prefetch-disable",
            # WebRTC's UDP (STUN, peer connections) does not go through an HTTP proxy: without this a
            # page could still reach the LAN directly.
            "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
        ]
    if confined or os.geteuid() == 0:
        # chromium's own sandbox needs a setuid helper or new user namespaces, both of which the
        # daemon's sandbox forbids (no new privileges, seccomp); that sandbox confines it instead.
        # As root on the host, chromium refuses to start with its own.
        args.insert(1, "--no-sandbox")
    return args


class Chromium:
    """One running chromium and its DevTools connection."""

    def __init__(self, child: ChildProcess, profile_dir: str, cdp: CDPConnection, log: deque[str]) -> None:
        self.child = child
        self.profile_dir = profile_dir
        self.cdp = cdp
        self._log = log

    @classmethod
    async def start(
        cls,
        executable: str,
        spawn: Spawn,
        proxy: str | None = None,
        confined: bool = True,
        within: float = 20.0,
    ) -> Chromium:
        """`confined`: `spawn` starts it in a sandbox (which replaces chromium's own)."""
        profile_dir = str(Path(tempfile.mkdtemp(prefix="edgeclaw-browser-")).resolve())  # noqa: ASYNC240
        commands_r, commands_w = os.pipe()  # the daemon writes, chromium reads (its fd 3)
        events_r, events_w = os.pipe()  # chromium writes (its fd 4), the daemon reads
        theirs = (_high(commands_r), _high(events_w))
        argv = [_BASH, "-c", _PIPE_SHIM, "bash", *map(str, theirs)]
        argv += chromium_args(executable, profile_dir, proxy, confined)
        try:
            child = await spawn(argv, Path(profile_dir), theirs)
        except BaseException:
            for fd in (commands_w, events_r):
                with contextlib.suppress(OSError):
                    os.close(fd)
            shutil.rmtree(profile_dir, ignore_errors=True)
            raise
        log: deque[str] = deque(maxlen=_LOG_LINES)
        drain = asyncio.create_task(_drain(child, log))
        cdp: CDPConnection | None = None
        try:
            cdp = await CDPConnection.over_pipe(events_r, commands_w)
            await _first_answer(cdp, child, log, within)
        except BaseException:
            if cdp is not None:
                await cdp.aclose()
            await child.close()
            drain.cancel()
            shutil.rmtree(profile_dir, ignore_errors=True)
            raise
        browser = cls(child, profile_dir, cdp, log)
        browser._drain = drain
        return browser

    @property
    def running(self) -> bool:
        return self.child.running and not self.cdp.closed

    def out_of_memory(self) -> bool:
        """Whether the memory bound of its cgroup ended it (or a process of it)."""
        self.child.note_limits()
        cgroup = self.child.launch.cgroup
        return self.child.limit_hit is not None or (cgroup is not None and cgroup.oom_kills() > 0)

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.cdp.send("Browser.close"), 3)
        await self.cdp.aclose()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.child.proc.wait()), 5)
        await self.child.close()  # what is left of it: its process group and its cgroup
        self._drain.cancel()
        shutil.rmtree(self.profile_dir, ignore_errors=True)

    _drain: asyncio.Task[None]


async def _drain(child: ChildProcess, log: deque[str]) -> None:
    """Read chromium's output (it logs a lot; a full pipe would stop it), keeping the last lines."""
    stdout = child.proc.stdout
    if stdout is None:
        return
    with contextlib.suppress(Exception):
        while chunk := await stdout.read(1 << 16):
            log.extend(chunk.decode("utf-8", "replace").splitlines()[-_LOG_LINES:])


def _high(fd: int) -> int:
    """`fd` moved above `_FD_FLOOR`, the original closed (close-on-exec: only `pass_fds` hands it on)."""
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _FD_FLOOR)
    finally:
        os.close(fd)


async def _first_answer(cdp: CDPConnection, child: ChildProcess, log: deque[str], within: float) -> None:
    """Wait until chromium answers on its DevTools pipe; a clear error when it exits first."""
    ask = asyncio.create_task(cdp.send("Browser.getVersion", within=within))
    await asyncio.wait({ask}, timeout=within)
    if ask.done() and ask.exception() is None:
        return
    ask.cancel()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(child.proc.wait()), 2)
    if not child.running:
        said = " | ".join(line for line in log if line)[-600:] or "no output"
        raise BackendError(
            f"browser: chromium exited at start (status {child.proc.returncode}, {child.launch.backend}): "
            f"{said}"
        )
    raise BackendError(f"browser: chromium did not answer on its DevTools pipe within {within:g} s")
