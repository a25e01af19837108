"""Starting and stopping one headless chromium, with its own throwaway profile directory.

chromium is started by whoever builds this (`spawn`): the browser tool starts it in the daemon's
sandbox, where the profile directory is the only writable place. chromium picks its own DevTools
port (`--remote-debugging-port=0`) and writes it to DevToolsActivePort in the profile directory, so
no port is guessed and none is shared between instances. The profile directory is removed when the
browser stops: cookies and storage never outlive the instance.
"""

from __future__ import annotations

import asyncio
import contextlib
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
# Starts chromium's argv with the profile directory as the only writable place.
Spawn = Callable[[list[str], Path], Awaitable["ChildProcess"]]
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
        "--remote-debugging-port=0",
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
        try:
            child = await spawn(chromium_args(executable, profile_dir, proxy, confined), Path(profile_dir))
        except BaseException:
            shutil.rmtree(profile_dir, ignore_errors=True)
            raise
        log: deque[str] = deque(maxlen=_LOG_LINES)
        drain = asyncio.create_task(_drain(child, log))
        try:
            url = await _devtools_url(Path(profile_dir), child, log, within)
            cdp = await CDPConnection.connect(url)
        except BaseException:
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


async def _devtools_url(profile: Path, child: ChildProcess, log: deque[str], within: float) -> str:
    marker = profile / "DevToolsActivePort"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        if not child.running:
            await asyncio.sleep(0.2)  # its last words
            said = " | ".join(line for line in log if line)[-600:] or "no output"
            raise BackendError(
                f"browser: chromium exited at start (status {child.proc.returncode}, "
                f"{child.launch.backend}): {said}"
            )
        with contextlib.suppress(OSError, ValueError):
            lines = marker.read_text().splitlines()
            if len(lines) >= 2:
                return f"ws://127.0.0.1:{int(lines[0])}{lines[1]}"
        await asyncio.sleep(0.1)
    raise BackendError(f"browser: chromium did not open its DevTools port within {within:g} s")
