"""[callers.NAME]: the MQTT callers a device knows, each with its own key, roles and tools profile.

A caller is who it can prove it is: its identity is "mqtt:NAME", and only a message signed with its
secret is taken as from it (edgeclaw.channels.mqtt.keys). The legacy single keys of [mqtt]
(`hmac_secret_*`, `approver_secret_*`, `admin_secret_*`) are callers too, with one role each
(`legacy_callers`). What each role may do is in docs/security.md.

The checks here need only the config; that no two callers share a secret is checked where the
secrets are read (Keys), since only then are they known.
"""

from __future__ import annotations

import re
from typing import get_args

from edgeclaw.config.policy_rules import PROFILES
from edgeclaw.config.schema import CallerConfig, CallerRole, Config, MqttConfig
from edgeclaw.records import dataclass

ROLES: tuple[str, ...] = get_args(CallerRole)
NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
# Not a caller's name: it is the identity of every unsigned caller.
RESERVED = ("anonymous",)


@dataclass(frozen=True, slots=True)
class LegacyCaller:
    """One of [mqtt]'s single keys as a caller: its name, its one role, the secret's key in
    resolve_secrets, and the config key that names its secret (for messages)."""

    name: str
    role: str
    secret: str  # e.g. "mqtt.hmac"
    config_key: str  # e.g. "mqtt.hmac_secret_env"


def legacy_callers(m: MqttConfig) -> list[LegacyCaller]:
    """The legacy keys the config sets, as callers with one role each."""
    out: list[LegacyCaller] = []
    for prefix, secret, role, name in (
        ("hmac", "mqtt.hmac", "operate", m.hmac_key_name),
        ("approver", "mqtt.approver", "approve", m.approver_key_name),
        ("admin", "mqtt.admin", "admin", m.admin_key_name),
    ):
        env, file = getattr(m, f"{prefix}_secret_env"), getattr(m, f"{prefix}_secret_file")
        if env or file:
            out.append(LegacyCaller(name, role, secret, f"mqtt.{prefix}_secret_{'env' if env else 'file'}"))
    return out


def caller_secret_key(name: str) -> str:
    """Where resolve_secrets keeps the secret of [callers.NAME]."""
    return f"callers.{name}"


def caller_problems(config: Config) -> list[tuple[str, str]]:
    """[callers.NAME]: a usable name, a secret by reference, known roles and profile; no name twice
    (a legacy key is a caller by its name too)."""
    problems: list[tuple[str, str]] = []
    legacy = {c.name: c for c in legacy_callers(config.mqtt)}
    for c in legacy.values():
        if c.name in RESERVED:
            problems.append((c.config_key.rsplit("_secret_", 1)[0] + "_key_name", _reserved(c.name)))
    for name, caller in config.callers.items():
        key = f"callers.{name}"
        problems.extend(_caller_problems(key, name, caller))
        if name in legacy:
            problems.append(
                (key, f"the name {name!r} is already the caller of {legacy[name].config_key}: choose another")
            )
    return problems


def _caller_problems(key: str, name: str, caller: CallerConfig) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if not NAME.fullmatch(name):
        problems.append(
            (key, "expected a name of 1-64 lowercase letters, digits, '_', '.' or '-' (starting with a "
                  "letter or digit): it is the caller's identity mqtt:NAME")
        )  # fmt: skip
    elif name in RESERVED:
        problems.append((key, _reserved(name)))
    if bool(caller.secret_env) == bool(caller.secret_file):
        problems.append((key, "set secret_env or secret_file (one of them): secrets are never inline"))
    if not caller.roles:
        problems.append((f"{key}.roles", f"expected at least one role: {', '.join(ROLES)}"))
    seen: set[str] = set()
    for i, role in enumerate(caller.roles):
        if role in seen:
            problems.append((f"{key}.roles[{i}]", f"{role!r} is listed twice"))
        seen.add(role)
    if caller.profile and caller.profile not in PROFILES:
        problems.append((f"{key}.profile", f"unknown profile (expected one of: {', '.join(PROFILES)})"))
    return problems


def _reserved(name: str) -> str:
    return f"{name!r} is reserved: mqtt:{name} is the identity of every unsigned caller"
