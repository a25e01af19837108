"""`edgeclaw doctor`'s impersonation check: every way the running config lets one caller act as another,
or as the administrator.

Each finding names the config key that opens the way and what to do instead (docs/security.md). It
needs only the config and the files it names, never the network: unsigned commands (every caller is
`mqtt:anonymous`), unsigned admin commands, one caller holding roles that should be apart, legacy keys
shared by whole groups of callers, secrets in files others may read, a broker without TLS or login
while commands are unsigned, unsigned updates, HTTP listeners reachable without TLS or login, and
approvals answered where no signature covers them. And whether this device signs what it publishes
(its device key), without which a page or a peer cannot tell its messages from forged ones.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from edgeclaw.config.callers import legacy_callers
from edgeclaw.config.schema import Config

CHECK = "impersonation"
# Roles one caller should not hold together: who asks for a call must not approve it, and the everyday
# key must not be the one that updates the firmware.
APART = (("operate", "approve"), ("operate", "admin"))
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def caller_roles(config: Config) -> dict[str, set[str]]:
    """Every MQTT caller the config defines -- [callers.NAME] and the legacy [mqtt] keys -- and its roles."""
    roles = {name: set(c.roles) for name, c in config.callers.items()}
    for legacy in legacy_callers(config.mqtt):
        roles.setdefault(legacy.name, set()).add(legacy.role)
    return roles


def commands_signed(config: Config) -> bool:
    """Whether the device refuses unsigned commands: as soon as one caller may observe or operate."""
    return any(r & {"observe", "operate"} for r in caller_roles(config).values())


def identity_problems(config: Config) -> list[str]:
    """Each way one caller can act as another or as admin, one sentence each (empty: none found)."""
    return [*_mqtt_problems(config), *_secret_file_problems(config), *_listener_problems(config)]


def _mqtt_problems(config: Config) -> Iterator[str]:
    m = config.mqtt
    if m.enabled and not commands_signed(config):
        yield (
            "unsigned commands are accepted: every MQTT caller is the one identity mqtt:anonymous, so "
            "anyone who can publish to the broker shares its sessions, processes and memory; configure a "
            '[callers.NAME] with roles = ["operate"] (or mqtt.hmac_secret_env)'
        )
        if m.tls is None or not m.username:
            missing = " and ".join(
                w for w, off in (("TLS", m.tls is None), ("a login", not m.username)) if off
            )
            yield (
                f"mqtt broker {m.host}:{m.port} without {missing} while commands are unsigned: anyone who "
                "reaches it can command this device (set [mqtt.tls] and mqtt.username, or sign commands)"
            )
    if m.enabled and m.admin_unsigned:
        yield (
            "mqtt.admin_unsigned = true: unsigned admin commands (update, config_apply, restart, custom "
            "tools) are taken from anyone who can write the admin topics; give one caller the admin role"
        )
    for name, roles in sorted(caller_roles(config).items()):
        for a, b in APART:
            if a in roles and b in roles:
                why = "can approve its own calls" if b == "approve" else "is also the administrator"
                yield f"caller mqtt:{name} holds both {a} and {b}: whoever holds its key {why}; split it"
    for legacy in legacy_callers(m):
        yield (
            f"legacy key {legacy.config_key} in use (caller mqtt:{legacy.name}, role {legacy.role}): "
            "every holder is the same caller; give each its own [callers.NAME] key"
        )
    g = config.gateway
    if g.allow_unsigned_updates and not g.update_public_key:
        yield (
            "gateway.allow_unsigned_updates = true without gateway.update_public_key: whoever can send an "
            "update chooses the code this device runs"
        )
    if m.enabled and config.mcp.server.mqtt:
        yield (
            "mcp.server.mqtt = true: MCP-over-MQTT calls and the approvals asked of MCP clients are answered "
            "without a signature; only the broker's ACL binds a client to its $mcp-rpc/{client}/ topic"
        )


def _secret_files(config: Config) -> Iterator[tuple[str, str]]:
    m = config.mqtt
    for key in ("hmac_secret_file", "approver_secret_file", "admin_secret_file", "password_file"):
        yield f"mqtt.{key}", getattr(m, key)
    for name, caller in sorted(config.callers.items()):
        yield f"callers.{name}.secret_file", caller.secret_file
    yield "mcp.server.token_file", config.mcp.server.token_file
    yield "fleet_page.token_file", config.fleet_page.token_file
    yield "fleet_page.login_hash_file", config.fleet_page.login_hash_file


def _secret_file_problems(config: Config) -> Iterator[str]:
    for key, path in _secret_files(config):
        if not path:
            continue
        try:
            mode = stat.S_IMODE(os.stat(Path(path).expanduser()).st_mode)
        except OSError:
            continue  # missing or unreadable: the secrets check names it
        if mode & 0o077:
            yield (
                f"{key} {path} is readable by others than its owner (mode {mode:o}): anyone who can read "
                f"it can sign as its caller; chmod 600 {path}"
            )


def _listener_problems(config: Config) -> Iterator[str]:
    page = config.fleet_page
    host = page.listen.rsplit(":", 1)[0].strip("[]")
    if host not in LOOPBACK:
        if not (page.login_hash or page.login_hash_file or page.token_file):
            yield (
                f"fleet_page.listen = {page.listen!r} without a login (login_hash or token_file): anyone "
                "who reaches it commands the fleet with the page's keys"
            )
        yield (
            f"fleet_page.listen = {page.listen!r} serves plain HTTP beyond loopback: its login and session "
            "cross the network in clear; put TLS in front and listen on 127.0.0.1"
        )


def device_signing_problem(config: Config, state_dir: Path) -> str | None:
    """Why this device would sign nothing it publishes, or None. Reads the key file's mode, never makes
    the key (the daemon does, as its own user)."""
    if not config.mqtt.enabled:
        return None
    from edgeclaw.net.device_key import KEY_FILENAME, signing_problem

    fix = "a fleet page shows it unverifiable and takes no approval from it, peers do not call it"
    if config.mqtt.protocol != "5":
        return f'this device signs nothing it publishes: signatures need MQTT 5 (mqtt.protocol = "5"); {fix}'
    if problem := signing_problem():
        return f"this device signs nothing it publishes: {problem}; {fix}"
    path = state_dir / KEY_FILENAME
    try:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None  # made at the daemon's first start
    except OSError as e:
        return f"cannot read the device key {path}: {e.strerror}"
    if mode & 0o077:
        return (
            f"the device key {path} has mode {mode:04o}: the daemon refuses it and signs nothing; "
            f"chmod 600 it ({fix})"
        )
    return None
