"""Which board profile the daemon runs with: by name, by file, or detected.

A profile names the board and grants what the hardware tools may touch;
anything it does not grant, they refuse. `board = "auto"` matches the
device-tree model against each profile's `[detect]` strings and falls back to
`sim` off-board, saying so in the log.
"""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeclaw.errors import ConfigError, ConfigErrors

log = logging.getLogger("edgeclaw.board")

FALLBACK_BOARD = "sim"
DEVICE_TREE_MODEL = Path("/proc/device-tree/model")
DEVICE_TREE_COMPATIBLE = Path("/proc/device-tree/compatible")


def profile_dirs() -> list[Path]:
    """Where profiles are looked up, first match wins: local overrides, then the ones shipped."""
    here = Path(__file__).resolve().parent
    return [
        Path("/etc/edgeclaw/board_profiles"),
        here / "board_profiles",  # inside an installed wheel
        here.parent / "board_profiles",  # a source checkout / editable install
    ]


@dataclass(frozen=True)
class BoardProfile:
    name: str
    description: str
    soc: str
    path: Path
    models: tuple[str, ...] = ()
    compatible: tuple[str, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False)


def _read(path: Path) -> BoardProfile:
    source = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigErrors([ConfigError(source, "", f"cannot read board profile: {e.strerror}")]) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigErrors([ConfigError(source, "", f"not valid TOML: {e}")]) from None
    board = data.get("board")
    if not isinstance(board, dict) or not isinstance(board.get("name"), str) or not board["name"]:
        raise ConfigErrors([ConfigError(source, "board.name", "required key is missing (expected a string)")])
    detect = data.get("detect", {})
    return BoardProfile(
        name=board["name"],
        description=str(board.get("description", "")),
        soc=str(board.get("soc", "")),
        path=path,
        models=tuple(detect.get("models", ())),
        compatible=tuple(detect.get("compatible", ())),
        raw=data,
    )


def iter_profiles() -> Iterator[BoardProfile]:
    seen: set[str] = set()
    for directory in profile_dirs():
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.toml")):
            if path.stem not in seen:
                seen.add(path.stem)
                yield _read(path)


def known_names() -> list[str]:
    return sorted({p.name for p in iter_profiles()})


def load_profile(name: str, source: str = "board") -> BoardProfile:
    """A profile by name or by path. Unknown names are an error: we never guess what a board grants."""
    if "/" in name or name.endswith(".toml"):
        return _read(Path(name))
    for directory in profile_dirs():
        path = directory / f"{name}.toml"
        if path.is_file():
            return _read(path)
    raise ConfigErrors(
        [ConfigError(source, "board", f"unknown board profile {name!r} (known: {', '.join(known_names())})")]
    )


def _read_dt(path: Path) -> list[str]:
    try:
        return [s for s in path.read_bytes().decode("utf-8", "replace").split("\0") if s]
    except OSError:
        return []


def detect() -> BoardProfile | None:
    """The profile whose detect strings match this machine's device tree, if any."""
    models = _read_dt(DEVICE_TREE_MODEL)
    compatible = _read_dt(DEVICE_TREE_COMPATIBLE)
    for profile in iter_profiles():
        if any(m.startswith(pat) for m in models for pat in profile.models if pat):
            return profile
        if any(c == pat for c in compatible for pat in profile.compatible if pat):
            return profile
    return None


def resolve(name: str, source: str = "board") -> BoardProfile:
    """Resolve the configured board: a name, a path, or "auto" (detect, else the sim board)."""
    if name != "auto":
        return load_profile(name, source)
    found = detect()
    if found is not None:
        log.info("board detected: %s", found.name)
        return found
    log.info("no board profile matches this machine; using the %r board", FALLBACK_BOARD)
    return load_profile(FALLBACK_BOARD, source)
