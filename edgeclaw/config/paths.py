"""Where state lives, what this device is called and who runs us, when the config leaves it to us."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

SYSTEM_STATE_DIR = Path("/var/lib/edgeclaw")


def _writable_dir(path: Path) -> bool:
    if path.is_dir():
        return os.access(path, os.W_OK | os.X_OK)
    parent = path.parent
    return parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)


def state_dir(configured: str = "", environ: Mapping[str, str] | None = None) -> Path:
    """The config's state_dir, else $EDGECLAW_STATE_DIR, else /var/lib/edgeclaw when writable,
    else ~/.local/state/edgeclaw.

    The last step is the fixed path of the CLI contract, not $XDG_STATE_HOME: scripts and fleet
    tooling look for the database there whatever the login session sets.
    """
    env = os.environ if environ is None else environ
    if configured:
        return Path(configured)
    if env.get("EDGECLAW_STATE_DIR"):
        return Path(env["EDGECLAW_STATE_DIR"])
    if _writable_dir(SYSTEM_STATE_DIR):
        return SYSTEM_STATE_DIR
    return Path.home() / ".local" / "state" / "edgeclaw"


def device_id(configured: str = "") -> str:
    """The configured id, else the hostname (MQTT-unsafe characters replaced)."""
    name = configured or socket.gethostname() or "edgeclaw"
    return "".join("-" if c in "/#+ " else c for c in name)


def current_user() -> str:
    """The login name of this process's user (its uid when it has no passwd entry)."""
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        return str(os.getuid())
