"""Find and read the configuration file, and turn it into the typed, checked `Config`.

Search order: `--config`, then `$EDGECLAW_CONFIG`, then
/etc/edgeclaw/edgeclaw.toml, else built-in defaults. Every problem in a file
is reported at once, each naming the file, the dotted key, its line and what was
expected; the checks across keys are `config.checks`.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from edgeclaw.config.checks import check_config, config_problems
from edgeclaw.config.schema import Config
from edgeclaw.config.typed import build_lenient
from edgeclaw.errors import ConfigError, ConfigErrors

SYSTEM_CONFIG = Path("/etc/edgeclaw/edgeclaw.toml")


def find_config_path(
    explicit: str | os.PathLike[str] | None = None, environ: dict[str, str] | None = None
) -> Path | None:
    """The config file to use, or None for built-in defaults.

    An explicitly named file (argument or $EDGECLAW_CONFIG) must exist: a typo
    there would otherwise silently run the daemon with defaults.
    """
    env = os.environ if environ is None else environ
    if explicit:
        return Path(explicit)
    if env.get("EDGECLAW_CONFIG"):
        return Path(env["EDGECLAW_CONFIG"])
    if SYSTEM_CONFIG.is_file():
        return SYSTEM_CONFIG
    return None


def read_toml(path: Path) -> tuple[dict[str, Any], str]:
    """The parsed table and the file's text (for the line numbers of errors)."""
    source = str(path)
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
        return tomllib.loads(text), text
    except FileNotFoundError:
        raise ConfigErrors([ConfigError(source, "", "file not found")]) from None
    except PermissionError:
        raise ConfigErrors([ConfigError(source, "", "permission denied")]) from None
    except IsADirectoryError:
        raise ConfigErrors([ConfigError(source, "", "is a directory, expected a TOML file")]) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigErrors([ConfigError(source, "", f"not valid TOML: {e}")]) from None
    except UnicodeDecodeError as e:
        raise ConfigErrors([ConfigError(source, "", f"not UTF-8 text: {e}")]) from None


def parse_toml(path: Path) -> dict[str, Any]:
    return read_toml(path)[0]


def load_config(
    explicit: str | os.PathLike[str] | None = None, environ: dict[str, str] | None = None
) -> Config:
    """Load and check the configuration. Raises ConfigErrors listing every problem."""
    path = find_config_path(explicit, environ)
    if path is None:
        config = Config()
        check_config(config)
        return config
    data, text = read_toml(path)
    return config_from_dict(data, str(path), text)


def config_from_dict(data: dict[str, Any], source: str, text: str = "") -> Config:
    """Build and check a config; raises ConfigErrors with every problem in the file at once.

    The type checks and the checks across keys run in the same pass: a wrong type leaves that key
    at its default so the rest can still be checked, and a value check is not repeated for a key
    whose type was already wrong.
    """
    config, errors = build_lenient(Config, data, source)
    config._source = source
    wrong = [e.key for e in errors]
    for problem in config_problems(config):
        if not any(_overlaps(problem.key, key) for key in wrong):
            errors.append(problem)
    if errors:
        lines = key_lines(text) if text else {}
        # Errors from another file (a board profile the config names) keep their own place.
        placed = [e.at_line(line_of(e.key, lines)) if e.source == source else e for e in errors]
        # In file order, as a person works through them; problems with no line (defaults) last.
        placed.sort(key=lambda e: e.line if e.line is not None else 1 << 30)
        raise ConfigErrors(placed)
    return config


def _overlaps(a: str, b: str) -> bool:
    """One key is the other, or inside it (`mqtt` and `mqtt.port`; `x[0]` and `x`)."""
    return a == b or a.startswith((b + ".", b + "[")) or b.startswith((a + ".", a + "["))


# Patterns as text: `re` compiles them (and caches them) on the first error placed, not at every start.
_HEADER = r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$"
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_ASSIGN = rf"^\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*="


def _dotted(raw: str) -> str:
    parts = [p.strip().strip("\"'") for p in re.split(r"\.(?=(?:[^\"']*[\"'][^\"']*[\"'])*[^\"']*$)", raw)]
    return ".".join(p.replace("-", "_") for p in parts)


def key_lines(text: str) -> dict[str, int]:
    """Where each dotted key (and table) is written in a TOML text, as the checks name them.

    A line scanner rather than a second parser: tomllib does not report positions, and a
    person fixing a file on a board wants the line. Arrays of tables count as `name[i]`.
    """
    lines: dict[str, int] = {}
    table = ""
    counts: dict[str, int] = {}
    in_string = False
    for number, line in enumerate(text.splitlines(), 1):
        if in_string:
            if line.count('"""') % 2 or line.count("'''") % 2:
                in_string = False
            continue
        header = re.match(_HEADER, line)
        if header:
            name = _dotted(header.group(2))
            if header.group(1) == "[[":
                index = counts.get(name, 0)
                counts[name] = index + 1
                name = f"{name}[{index}]"
            else:
                # A table inside the latest element of an array of tables: [tools.custom.x] is rare,
                # but [[a]] then [a.b] means a[last].b.
                for array, n in counts.items():
                    if name.startswith(array + "."):
                        name = f"{array}[{n - 1}]{name[len(array) :]}"
            table = name
            lines.setdefault(table, number)
            continue
        assign = re.match(_ASSIGN, line)
        if assign:
            key = _dotted(assign.group(1))
            lines.setdefault(f"{table}.{key}" if table else key, number)
            rest = line[assign.end() :]
            if rest.count('"""') % 2 or rest.count("'''") % 2:
                in_string = True
    return lines


def line_of(key: str, lines: dict[str, int]) -> int | None:
    """The line of `key`, else of the nearest enclosing key or table that is written in the file."""
    key = key.replace("-", "_")
    while key:
        if key in lines:
            return lines[key]
        trimmed = re.sub(r"(\[\d+\]|\.[^.\[]+)$", "", key)
        if trimmed == key:
            return None
        key = trimmed
    return None
