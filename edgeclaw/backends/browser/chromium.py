"""Starting and stopping one headless chromium, with its own throwaway profile directory.

chromium picks its own DevTools port (`--remote-debugging-port=0`) and writes it to DevToolsActivePort
in the profile directory, so no port is guessed and none is shared between instances. The profile
directory is removed when the browser stops: cookies and storage never outlive the instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from pathlib import Path

from edgeclaw.backends.browser.cdp import CDPConnection
from edgeclaw.errors import BackendError

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    """The chromium executable on PATH, or None (doctor reports it)."""
    for name in CHROMIUM_NAMES:
        if found := shutil.which(name):
            return found
    return None


def chromium_args(executable: str, profile_dir: str, proxy: str | None) -> list[str]:
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
    if os.geteuid() == 0:
        args.insert(1, "--no-sandbox")  # chromium refuses to start as root with its own sandbox
    return args


class Chromium:
    """One running chromium and its DevTools connection."""

    def __init__(self, process: asyncio.subprocess.Process, profile_dir: str, cdp: CDPConnection) -> None:
        self.process = process
        self.profile_dir = profile_dir
        self.cdp = cdp

    @classmethod
    async def start(
        cls,
        executable: str,
        proxy: str | None = None,
        wrapper: list[str] | None = None,
        within: float = 20.0,
    ) -> Chromium:
        profile_dir = tempfile.mkdtemp(prefix="edgeclaw-browser-")
        argv = [*(wrapper or []), *chromium_args(executable, profile_dir, proxy)]
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            url = await _devtools_url(Path(profile_dir), process, within)
            cdp = await CDPConnection.connect(url)
        except BaseException:
            _kill(process)
            await process.wait()
            shutil.rmtree(profile_dir, ignore_errors=True)
            raise
        return cls(process, profile_dir, cdp)

    @property
    def running(self) -> bool:
        return self.process.returncode is None and not self.cdp.closed

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.cdp.send("Browser.close"), 3)
        await self.cdp.aclose()
        try:
            await asyncio.wait_for(self.process.wait(), 5)
        except TimeoutError:
            _kill(self.process)
            await self.process.wait()
        _kill(self.process)  # helpers left in its process group
        shutil.rmtree(self.profile_dir, ignore_errors=True)


def _kill(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _devtools_url(profile: Path, process: asyncio.subprocess.Process, within: float) -> str:
    marker = profile / "DevToolsActivePort"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        if process.returncode is not None:
            raise BackendError(f"browser: chromium exited at start (status {process.returncode})")
        with contextlib.suppress(OSError, ValueError):
            lines = marker.read_text().splitlines()
            if len(lines) >= 2:
                return f"ws://127.0.0.1:{int(lines[0])}{lines[1]}"
        await asyncio.sleep(0.1)
    raise BackendError(f"browser: chromium did not open its DevTools port within {within:g} s")
