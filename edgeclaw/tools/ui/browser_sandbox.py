"""How the browser's chromium is confined: the daemon's sandbox, as exec's commands are.

chromium starts through `SandboxManager`'s launch (firejail or bubblewrap, whichever exec uses): its
throwaway profile directory is its workspace and the only place it may write; the host's files are
hidden as for exec (the state directory, the workspace, the config, secrets, the daemon user's home);
its own installation stays readable. It is given the network only to reach the daemon's guarded
proxy on loopback: every request of a page goes through that proxy (`--proxy-server`, no bypass),
which applies web_fetch's rules. Its memory is bounded by its own cgroup (`memory_mb`), its
processes and threads by its pids cgroup (`max_processes`). Where the sandbox is required and does
not work, the browser does not start (fail closed); where no memory cgroup exists it starts without
a memory bound, and says so in the log and in `doctor`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from edgeclaw.errors import ToolError

if TYPE_CHECKING:
    from edgeclaw.config.schema import Config
    from edgeclaw.config.tools_schema import BrowserConfig
    from edgeclaw.sandbox.manager import Sandbox, SandboxSettings
    from edgeclaw.sandbox.process import ChildProcess

log = logging.getLogger("edgeclaw.tools.browser")

MIB = 1024 * 1024
MIN_MEMORY_MB = 64
MIN_PROCESSES = 64
# /etc entries chromium reads besides a shell's: its fonts' configuration and Debian's settings for
# it (the /usr/bin/chromium script reads /etc/chromium.d).
CHROMIUM_ETC = ("fonts", "chromium", "chromium.d")
_PASSED_ENV = ("LANG", "LC_ALL", "TZ")


class BrowserSandbox:
    """Starts chromium confined, with the browser's own bounds."""

    def __init__(self, settings: SandboxSettings | Sandbox, hidden: Sequence[Path] = ()) -> None:
        """`settings`: a Sandbox to share (the configuration's, whose cgroups exec's commands use
        too), or the settings of one of its own."""
        from edgeclaw.sandbox.manager import Sandbox

        self.sandbox: Sandbox = settings if isinstance(settings, Sandbox) else Sandbox(settings)
        self.hidden = [Path(os.path.realpath(p)) for p in hidden]

    async def confined(self, config: BrowserConfig) -> bool:
        """Whether chromium runs in a sandbox (False: on the host, sandbox.required = false).
        Raises ToolError where the sandbox is required and does not work, or the bounds are bad."""
        from edgeclaw.sandbox.manager import SandboxUnavailable

        if config.memory_mb < MIN_MEMORY_MB:
            raise ToolError(f"browser: tools.browser.memory_mb is {config.memory_mb}, under {MIN_MEMORY_MB}")
        if config.max_processes < MIN_PROCESSES:
            raise ToolError(
                f"browser: tools.browser.max_processes is {config.max_processes}, under {MIN_PROCESSES}"
            )

        try:
            return (await self.sandbox.backend()).confines
        except SandboxUnavailable as e:
            raise ToolError(f"browser: refused to start chromium unconfined: {e}") from None

    def memory_bounded(self) -> bool:
        cgroups = self.sandbox.cgroups()
        return cgroups is not None and cgroups.bounds_commands_memory

    def report(self, config: BrowserConfig) -> tuple[bool, str]:
        """Whether the browser will be confined and memory-bounded, in words (for `doctor`); probes
        nothing (the backend is known once a command ran): says what the configuration asks for."""
        s = self.sandbox.settings
        if s.backend == "none":
            where = "not sandboxed (sandbox.backend = none): chromium runs on the host"
            confined = False
        else:
            where = f"sandboxed ({s.backend}{', required' if s.required else ', not required'})"
            confined = True
        if self.memory_bounded():
            memory = f"memory bounded to {config.memory_mb} MiB by its own cgroup (tools.browser.memory_mb)"
        else:
            memory = "NOT memory-bounded: no memory cgroup here (chromium cannot start under RLIMIT_AS)"
        return confined and self.memory_bounded(), f"{where}; {memory}; {config.max_processes} processes"

    async def spawn(
        self, config: BrowserConfig, argv: list[str], profile: Path, fds: tuple[int, ...], executable: str
    ) -> ChildProcess:
        """Start chromium's `argv` with `profile` as its only writable directory, handing it `fds` (its
        DevTools pipe); `executable`: the chromium in it, whose installation it must read."""
        from edgeclaw.errors import BackendError
        from edgeclaw.sandbox.base import DEFAULT_PATH
        from edgeclaw.sandbox.process import ChildProcess

        bounded = self.memory_bounded()
        if not bounded:
            log.warning(
                "no memory cgroup: the browser runs without a memory bound (tools.browser.memory_mb = %d "
                "is not enforced; RLIMIT_AS would stop chromium's JavaScript engine at start)",
                config.memory_mb,
            )
        env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
        env.update(PATH=DEFAULT_PATH, HOME=str(profile))
        installation = _installation(executable)
        try:
            try:
                launch = await self.sandbox.launch(
                    argv,
                    workspace=profile,
                    cwd=profile,
                    env=env,
                    network=True,  # to reach the guarded proxy on loopback; pages reach nothing else
                    timeout_s=config.idle_timeout_s,
                    hidden=[p for p in self.hidden if p.exists()],
                    keep_visible=installation,
                    memory_bytes=config.memory_mb * MIB,
                    max_processes=config.max_processes,
                    unix_sockets=True,  # chromium's processes talk over unix-domain sockets
                    etc_extra=CHROMIUM_ETC,
                    address_space_limit=False,
                    pass_fds=fds,
                )
            except BaseException:
                for fd in fds:  # ChildProcess.start closes them once the launch is made
                    with contextlib.suppress(OSError):
                        os.close(fd)
                raise
            return await ChildProcess.start(launch)
        except BackendError as e:
            raise ToolError(f"browser: cannot start chromium in the sandbox: {e}") from None


def _installation(executable: str) -> list[Path]:
    """chromium's own directory, where the system directories do not show it already (a chrome
    under /opt): it reads its libraries and resources from there."""
    real = Path(os.path.realpath(executable)).parent
    return [] if real.parts[1:2] in (("usr",), ("bin",), ("lib",)) else [real]


def default_browser_sandbox() -> BrowserSandbox:
    """The built-in sandbox settings (required, firejail or bubblewrap): for a tool built without a
    configuration's."""
    from edgeclaw.sandbox.manager import SandboxSettings

    return BrowserSandbox(SandboxSettings())


def browser_sandbox(config: Config, state_dir: Path, workspace: Path) -> BrowserSandbox:
    """The configuration's sandbox, hiding what exec's commands cannot see plus the state directory and
    the workspace (chromium needs neither: downloads are moved into the workspace by the daemon)."""
    from edgeclaw.tools.runtime.shell_setup import hidden_from_commands, shared_sandbox

    return BrowserSandbox(shared_sandbox(config), [*hidden_from_commands(config), state_dir, workspace])
