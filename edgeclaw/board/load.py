"""Board profiles by name or by file: where they are looked up, read once per content, checked."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

from edgeclaw.board.checks import check_profile
from edgeclaw.board.schema import BoardProfile, ProfileSchema
from edgeclaw.config.typed import build_dataclass
from edgeclaw.errors import ConfigError, ConfigErrors


def profile_dirs() -> list[Path]:
    """Where profiles are looked up, first match wins: local overrides, then the ones shipped."""
    here = Path(__file__).resolve().parent.parent
    return [
        Path("/etc/edgeclaw/board_profiles"),
        here / "board_profiles",  # inside an installed wheel
        here.parent / "board_profiles",  # a source checkout / editable install
    ]


_READ: dict[str, tuple[bytes, BoardProfile]] = {}


def _read(path: Path) -> BoardProfile:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigErrors([ConfigError(str(path), "", f"cannot read board profile: {e.strerror}")]) from None
    key = str(path.resolve())
    known = _READ.get(key)
    if known is not None and known[0] == data:
        return known[1]
    profile = _parse(path, data.decode("utf-8"))
    _READ[key] = (data, profile)
    return profile


def _parse(path: Path, text: str) -> BoardProfile:
    source = str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigErrors([ConfigError(source, "", f"not valid TOML: {e}")]) from None
    spec, errors = build_dataclass(ProfileSchema, data, source)
    if spec is not None:
        errors = check_profile(spec, source)
    if errors or spec is None:
        raise ConfigErrors(errors)
    return BoardProfile(
        name=spec.board.name,
        description=spec.board.description,
        soc=spec.board.soc,
        path=path,
        models=tuple(spec.detect.models),
        compatible=tuple(spec.detect.compatible),
        raw=data,
        spec=spec,
    )


def read_profile(path: Path) -> BoardProfile:
    """Load and validate one profile file (ConfigErrors naming file, key and expectation)."""
    return _read(path)


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
