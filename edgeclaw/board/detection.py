"""Which profile this machine is: its device tree matched against each profile's `[detect]` strings.

`board = "auto"` picks the best match; when nothing matches it uses `generic-linux`, which grants no
hardware, and says so in the log. The simulated board is used only when asked for (`board = "sim"`,
`--board sim`): served as a fallback, its fabricated readings would pass for real ones.
"""

from __future__ import annotations

import logging
from pathlib import Path

from edgeclaw.board.describe import describe_grants
from edgeclaw.board.load import iter_profiles, load_profile
from edgeclaw.board.schema import BoardProfile

log = logging.getLogger("edgeclaw.board")

# What `auto` picks when no profile matches: grants nothing, so nothing simulated passes for real.
FALLBACK_BOARD = "generic-linux"
DEVICE_TREE_MODEL = Path("/proc/device-tree/model")
DEVICE_TREE_COMPATIBLE = Path("/proc/device-tree/compatible")


def _read_dt(path: Path) -> list[str]:
    """A device-tree string property: NUL-separated strings (model has one, compatible several)."""
    try:
        return [s for s in path.read_bytes().decode("utf-8", "replace").split("\0") if s]
    except OSError:
        return []


def _match_score(profile: BoardProfile, models: list[str], compatible: list[str]) -> int:
    """How specifically `profile` matches; 0 = not at all.

    A longer model prefix beats a shorter one ("Raspberry Pi Zero 2 W" over
    "Raspberry Pi Zero"); a compatible string earlier in the device's list
    (the board's own, before the SoC's) beats a later one.
    """
    score = 0
    for pattern in profile.models:
        if pattern and any(m.startswith(pattern) for m in models):
            score = max(score, 10_000 + len(pattern))
    for pattern in profile.compatible:
        if pattern in compatible:
            score = max(score, 1_000 - compatible.index(pattern))
    return score


def detect(
    model_path: Path | None = None,
    compatible_path: Path | None = None,
    profiles: list[BoardProfile] | None = None,
) -> BoardProfile | None:
    """The profile whose detect strings best match this machine's device tree, if any.

    The paths default to /proc/device-tree; tests pass files of their own.
    """
    models = _read_dt(model_path or DEVICE_TREE_MODEL)
    compatible = _read_dt(compatible_path or DEVICE_TREE_COMPATIBLE)
    if not models and not compatible:
        return None
    best: BoardProfile | None = None
    best_score = 0
    for profile in profiles if profiles is not None else iter_profiles():
        score = _match_score(profile, models, compatible)
        if score > best_score:
            best, best_score = profile, score
    return best


def resolve(name: str, source: str = "board") -> BoardProfile:
    """Resolve the configured board: a name, a path, or "auto" (detect, else `generic-linux`)."""
    if name != "auto":
        return load_profile(name, source)
    found = detect()
    if found is not None:
        log.info("board detected: %s", found.name)
        return found
    fallback = load_profile(FALLBACK_BOARD, source)
    model = " / ".join(_read_dt(DEVICE_TREE_MODEL)) or "no device-tree model"
    log.warning(
        "no board profile matches this machine (%s); using %r, which grants %s. "
        'Set board = "NAME" (see edgeclaw board show NAME), or board = "sim" for the simulated board',
        model,
        fallback.name,
        "; ".join(describe_grants(fallback)),
    )
    return fallback
