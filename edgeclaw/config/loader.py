"""Find, read and check the configuration file.

Search order: `--config`, then `$EDGECLAW_CONFIG`, then
/etc/edgeclaw/edgeclaw.toml, else built-in defaults. Every problem in a file
is reported at once, each naming the file, the dotted key and what was
expected.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from edgeclaw.config.schema import Config
from edgeclaw.config.typed import build_dataclass
from edgeclaw.errors import ConfigError, ConfigErrors

SYSTEM_CONFIG = Path("/etc/edgeclaw/edgeclaw.toml")
KNOWN_CHANNELS = ("cli", "mqtt", "console", "agent")


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


def parse_toml(path: Path) -> dict[str, Any]:
    source = str(path)
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
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


def load_config(
    explicit: str | os.PathLike[str] | None = None, environ: dict[str, str] | None = None
) -> Config:
    """Load and check the configuration. Raises ConfigErrors listing every problem."""
    path = find_config_path(explicit, environ)
    if path is None:
        config = Config()
        check_config(config)
        return config
    return config_from_dict(parse_toml(path), str(path))


def config_from_dict(data: dict[str, Any], source: str) -> Config:
    config, errors = build_dataclass(Config, data, source)
    if errors:
        raise ConfigErrors(errors)
    assert config is not None
    config._source = source
    check_config(config)
    return config


def check_config(config: Config) -> None:
    """Checks that need more than one key, or the policy's vocabulary. Raises ConfigErrors."""
    from edgeclaw.tools.policy import PolicyEngine

    source = config._source
    errors: list[ConfigError] = []

    def fail(key: str, problem: str) -> None:
        errors.append(ConfigError(source, key, problem))

    for i, name in enumerate(config.agent.providers):
        if name not in config.providers:
            known = ", ".join(sorted(config.providers)) or "none defined"
            fail(f"agent.providers[{i}]", f"no [providers.{name}] table (defined: {known})")
    for key, value in (
        ("agent.max_iterations", config.agent.max_iterations),
        ("agent.history_budget_tokens", config.agent.history_budget_tokens),
        ("agent.history_max_messages", config.agent.history_max_messages),
        ("agent.provider_attempts", config.agent.provider_attempts),
    ):
        if value < 1:
            fail(key, f"expected an integer >= 1, got {value}")
    for name, provider in config.providers.items():
        if provider.api_key_env and provider.api_key_file:
            fail(f"providers.{name}", "set api_key_env or api_key_file, not both")
        if provider.timeout_s <= 0:
            fail(f"providers.{name}.timeout_s", "expected a number > 0")
    if not 1 <= config.mqtt.port <= 65535:
        fail("mqtt.port", f"expected a port number 1-65535, got {config.mqtt.port}")
    if config.mqtt.password_env and config.mqtt.password_file:
        fail("mqtt", "set password_env or password_file, not both")
    if not config.mqtt.topic_prefix or any(c in config.mqtt.topic_prefix for c in "#+"):
        fail("mqtt.topic_prefix", "expected a non-empty topic without MQTT wildcards (# +)")
    _check_mqtt(config, fail)
    if any(c in config.device_id for c in "/#+"):
        fail("device_id", "expected a name without '/', '#' or '+' (it becomes part of MQTT topics)")
    t = config.tools
    for key, value in (
        ("tools.timeout_s", t.timeout_s),
        ("tools.rate_window_s", t.rate_window_s),
        ("hardware.op_timeout_s", config.hardware.op_timeout_s),
        ("hardware.flash_timeout_s", config.hardware.flash_timeout_s),
        ("hardware.max_pulse_s", config.hardware.max_pulse_s),
    ):
        if value <= 0:
            fail(key, f"expected a number > 0, got {value}")
    for key, value in (
        ("tools.max_output_bytes", t.max_output_bytes),
        ("tools.max_file_bytes", t.max_file_bytes),
    ):
        if value < 1024:
            fail(key, f"expected at least 1024 bytes, got {value}")
    if not 1 <= config.hardware.max_read_bytes <= 1 << 20:
        fail("hardware.max_read_bytes", f"expected 1 to 1048576, got {config.hardware.max_read_bytes}")
    if t.rate_limit < 0:
        fail("tools.rate_limit", "expected an integer >= 0 (0 = unlimited)")
    if t.subagents.max_depth < 0:
        fail("tools.subagents.max_depth", "expected an integer >= 0")
    if config.shutdown_grace_s < 0:
        fail("shutdown_grace_s", "expected a number >= 0")
    for name in t.channels:
        if name not in KNOWN_CHANNELS:
            fail(f"tools.channels.{name}", f"unknown channel (expected one of: {', '.join(KNOWN_CHANNELS)})")
    for name in t.providers:
        if name not in config.providers:
            fail(f"tools.providers.{name}", f"no [providers.{name}] table")
    for key, problem in _console_problems(config):
        fail(key, problem)

    for key, problem in PolicyEngine(policy_rules(config)).validate():
        fail(key, problem)
    if errors:
        raise ConfigErrors(errors)


def _check_mqtt(config: Config, fail) -> None:
    """The [mqtt] keys that need more than a type check."""
    m = config.mqtt
    if m.hmac_secret_env and m.hmac_secret_file:
        fail("mqtt", "set hmac_secret_env or hmac_secret_file, not both")
    for key, value in (
        ("mqtt.client_id", m.client_id),
        ("mqtt.discovery_prefix", m.discovery_prefix),
    ):
        if any(c in value for c in "#+") or (key == "mqtt.discovery_prefix" and not value):
            fail(key, "expected a non-empty name without MQTT wildcards (# +)")
    for key, value, low in (
        ("mqtt.keepalive_s", m.keepalive_s, 5),
        ("mqtt.max_payload_bytes", m.max_payload_bytes, 256),
        ("mqtt.inbound_queue", m.inbound_queue, 1),
        ("mqtt.max_concurrent", m.max_concurrent, 1),
        ("mqtt.outbox_max", m.outbox_max, 10),
        ("mqtt.session_expiry_s", m.session_expiry_s, 0),
    ):
        if value < low:
            fail(key, f"expected an integer >= {low}, got {value}")
    if m.connect_timeout_s <= 0:
        fail("mqtt.connect_timeout_s", f"expected a number > 0, got {m.connect_timeout_s}")
    for key, number in (
        ("mqtt.telemetry_interval_s", m.telemetry_interval_s),
        ("mqtt.dedup_window_s", m.dedup_window_s),
        ("mqtt.hmac_max_age_s", m.hmac_max_age_s),
    ):
        if number < 0:
            fail(key, f"expected a number >= 0, got {number}")
    if 0 < m.telemetry_interval_s < 0.1:
        fail("mqtt.telemetry_interval_s", "expected 0 (off) or at least 0.1 s")
    if m.hmac_max_age_s and not (m.hmac_secret_env or m.hmac_secret_file):
        fail("mqtt.hmac_max_age_s", "needs hmac_secret_env or hmac_secret_file")
    if m.tls is not None and bool(m.tls.cert_file) != bool(m.tls.key_file):
        fail("mqtt.tls", "set cert_file and key_file together (a client certificate needs its key)")


def policy_rules(config: Config):  # -> PolicyRules, imported lazily to keep config import light
    from edgeclaw.tools.policy import AgentLayer, PolicyLayer, PolicyRules

    t = config.tools

    def layer(o) -> PolicyLayer:
        return PolicyLayer(profile=o.profile, allow=tuple(o.allow))

    return PolicyRules(
        profile=t.profile,
        allow=tuple(t.allow),
        deny=tuple(t.deny),
        also_allow=tuple(t.also_allow),
        providers={k: layer(v) for k, v in t.providers.items()},
        channels={k: layer(v) for k, v in t.channels.items()},
        agents={
            k: AgentLayer(
                allow=tuple(a.allow),
                deny=tuple(a.deny),
                also_allow=tuple(a.also_allow),
                providers={p: layer(v) for p, v in a.providers.items()},
            )
            for k, v in t.agents.items()
            for a in (v,)
        },
        subagent_max_depth=t.subagents.max_depth,
        subagent_deny=tuple(t.subagents.deny),
        subagent_leaf_deny=tuple(t.subagents.leaf_deny),
    )


def _console_problems(config: Config) -> list[tuple[str, str]]:
    """[console] checks; the hash file itself is read when the console starts."""
    from edgeclaw.channels.console.login import PinHashError, parse_pin_hash

    c = config.console
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, port in enumerate(c.ports):
        if not port.strip():
            problems.append((f"console.ports[{i}]", "expected a device path, got an empty string"))
        elif port in seen:
            problems.append((f"console.ports[{i}]", f"{port} is listed twice"))
        seen.add(port)
    if c.baud <= 0:
        problems.append(("console.baud", f"expected a positive baud rate, got {c.baud}"))
    if c.login_hash and c.login_hash_file:
        problems.append(("console", "set login_hash or login_hash_file, not both"))
    if c.login_hash:
        try:
            parse_pin_hash(c.login_hash)
        except PinHashError as e:
            problems.append(("console.login_hash", str(e)))
    if c.login == "on" and not (c.login_hash or c.login_hash_file):
        problems.append(("console.login", '"on" needs login_hash or login_hash_file'))
    if c.max_login_failures < 1:
        problems.append(("console.max_login_failures", "expected an integer >= 1"))
    for key, value in (
        ("console.lockout_s", c.lockout_s),
        ("console.login_delay_s", c.login_delay_s),
        ("console.idle_logout_s", c.idle_logout_s),
        ("console.page_lines", c.page_lines),
    ):
        if value < 0:
            problems.append((key, f"expected a number >= 0, got {value}"))
    if c.width and c.width < 20:
        problems.append(("console.width", f"expected 0 (no wrapping) or at least 20 columns, got {c.width}"))
    if c.max_output_lines < 1:
        problems.append(("console.max_output_lines", "expected an integer >= 1"))
    if c.reconnect_min_s <= 0:
        problems.append(("console.reconnect_min_s", "expected a number > 0"))
    if c.reconnect_max_s < c.reconnect_min_s:
        problems.append(("console.reconnect_max_s", "expected a number >= reconnect_min_s"))
    return problems
