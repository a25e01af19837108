"""`edgeclaw doctor`'s word on the tools that need something of the machine or the config to work: git
(the system's git), browser (chromium, and whether it runs sandboxed and memory-bounded), composio (a
key and its host allowed). Each says nothing when its tool is not registered; canvas and screenshot are
judged with the board's displays."""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgeclaw.daemon.runtime import Runtime

Said = tuple[str, str, str]  # (level, check, detail), as doctor's Finding


def seed_tool_findings(runtime: Runtime) -> list[Said]:
    found = (
        git_finding(runtime),
        browser_finding(runtime),
        browser_confinement_finding(runtime),
        composio_finding(runtime),
    )
    return [f for f in found if f is not None]


def browser_finding(runtime: Runtime) -> Said | None:
    """Whether the browser tool can start its chromium (`[tools.browser] executable`, else on PATH)."""
    if "browser" not in runtime.registry.names():
        return None
    from edgeclaw.backends.browser.chromium import find_chromium

    configured = runtime.config.tools.browser.executable
    found = shutil.which(configured) if configured else find_chromium()
    if found:
        return ("ok", "browser", f"chromium at {found}")
    if configured:
        return ("warn", "browser", f"tools.browser.executable {configured!r} is not found; browser refuses")
    return (
        "warn",
        "browser",
        "chromium is not installed: browser refuses every call (apt-get install chromium)",
    )


def browser_confinement_finding(runtime: Runtime) -> Said | None:
    """Whether the browser's chromium will run in the sandbox and under its memory bound."""
    if "browser" not in runtime.registry.names():
        return None
    from edgeclaw.sandbox.manager import make_backend
    from edgeclaw.tools.runtime.shell_setup import sandbox_settings
    from edgeclaw.tools.ui.browser_sandbox import BrowserSandbox

    settings = sandbox_settings(runtime.config)
    names = ("firejail", "bubblewrap") if settings.backend == "auto" else (settings.backend,)
    installed = [n for n in names if n == "none" or make_backend(n, settings).locate()]
    if not installed and settings.required:
        return ("FAIL", "browser sandbox", f"no sandbox ({', '.join(names)}) installed: browser refuses")
    ok, said = BrowserSandbox(settings).report(runtime.config.tools.browser)
    if not installed:
        said = "not sandboxed (no sandbox installed, sandbox.required = false): chromium runs on the host"
        ok = False
    return ("ok" if ok else "warn", "browser sandbox", said)


def composio_finding(runtime: Runtime) -> Said | None:
    """Whether the composio tool can reach the platform: a key configured, its host allowed."""
    if "composio" not in runtime.registry.names():
        return None
    from urllib.parse import urlsplit

    cfg = runtime.config.tools.composio
    if not cfg.api_key_secret:
        return ("ok", "composio", "not configured ([tools.composio] api_key_secret): the tool refuses")
    if cfg.api_key_secret not in runtime.config.tools.web.secrets:
        return ("FAIL", "composio", f"api_key_secret {cfg.api_key_secret!r} is no [tools.web.secrets] entry")
    host = urlsplit(cfg.base_url).hostname or ""
    allowed = runtime.config.tools.web.allowed_domains
    if not any(fnmatch.fnmatchcase(host, pattern) for pattern in allowed):
        return ("warn", "composio", f"{host} is not in tools.web.allowed_domains: every call is refused")
    return ("ok", "composio", f"{cfg.base_url} with the key {cfg.api_key_secret!r}")


def git_finding(runtime: Runtime) -> Said | None:
    """Whether the git tool has a git to run (it runs the system's, in the sandbox)."""
    if "git" not in runtime.registry.names():
        return None
    path = shutil.which("git")
    if path is None:
        return ("warn", "git", "git is not installed: the git tool refuses every call (apt install git)")
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return ("warn", "git", f"{path} does not run: {e}")
    return ("ok", "git", f"{done.stdout.strip() or 'git'} at {path}")
