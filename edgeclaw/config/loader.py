"""Find, read and check the configuration file.

Search order: `--config`, then `$EDGECLAW_CONFIG`, then
/etc/edgeclaw/edgeclaw.toml, else built-in defaults. Every problem in a file
is reported at once, each naming the file, the dotted key and what was
expected.
"""

from __future__ import annotations

import operator
import os
import re
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from edgeclaw.config.callers import caller_problems
from edgeclaw.config.policy_rules import PolicyRules, rule_problems, rules_from_config
from edgeclaw.config.schema import SEARCH_PROVIDERS_KEYED, Config
from edgeclaw.config.secrets import search_chain
from edgeclaw.config.typed import build_lenient
from edgeclaw.errors import ConfigError, ConfigErrors

SYSTEM_CONFIG = Path("/etc/edgeclaw/edgeclaw.toml")
KNOWN_CHANNELS = ("cli", "mqtt", "mqtt-admin", "console", "agent", "mcp", "homeassistant", "sparkplug")

Fail = Callable[[str, str], None]

# The rates Linux serial drivers accept (the termios B* constants, as pyserial lists them).
SERIAL_BAUD_RATES = frozenset(
    (50, 75, 110, 134, 150, 200, 300, 600, 1200, 1800, 2400, 4800, 9600, 19200, 38400, 57600, 115200,
     230400, 460800, 500000, 576000, 921600, 1000000, 1152000, 1500000, 2000000, 2500000, 3000000,
     3500000, 4000000)
)  # fmt: skip


class Range(NamedTuple):
    """The numbers a key accepts: `low` (excluded when `above`) up to `high` (None = no limit)."""

    key: str  # dotted, also the attribute path into Config
    low: float
    high: float | None = None
    above: bool = False  # "> low" rather than ">= low"
    what: str = ""  # names the value in the message; default "an integer" / "a number" by its type
    note: str = ""  # appended to the expectation, e.g. " (0 = unlimited)"

    def problem(self, value: float) -> str | None:
        """What is wrong with `value`, or None when it is in range."""
        too_low = value <= self.low if self.above else value < self.low
        if not too_low and (self.high is None or value <= self.high):
            return None
        what = self.what or ("an integer" if isinstance(value, int) else "a number")
        low = _plain(self.low)
        if self.high is not None:
            return f"expected {what} {low}-{_plain(self.high)}, got {value}"
        return f"expected {what} {'>' if self.above else '>='} {low}{self.note}, got {value}"


def _plain(bound: float) -> str:
    """A bound as a person writes it: 1048576, 0.1 (never 1.04858e+06)."""
    return str(int(bound)) if float(bound).is_integer() else str(bound)


# Every plain numeric bound of the schema, checked by one loop (check_ranges).
RANGES: tuple[Range, ...] = (
    Range("shutdown_grace_s", 0),
    Range("agent.max_iterations", 1),
    Range("agent.history_budget_tokens", 1),
    Range("agent.history_max_messages", 1),
    Range("agent.provider_attempts", 1),
    Range("agent.max_retry_after_s", 0),
    Range("tools.timeout_s", 0, above=True),
    Range("tools.rate_limit", 0, note=" (0 = no rate limits)"),
    Range("tools.rate_per_minute", 0, above=True),
    Range("tools.channel_rate_limit", 0, note=" (0 = no ceiling per channel)"),
    Range("tools.channel_rate_per_minute", 0, above=True),
    Range("tools.max_output_bytes", 1024),
    Range("tools.max_file_bytes", 1024),
    Range("tools.subagents.max_depth", 0),
    Range("tools.subagents.max_concurrent", 1),
    Range("tools.subagents.max_children", 1),
    Range("tools.subagents.max_iterations", 1),
    Range("tools.subagents.timeout_s", 0, above=True),
    Range("tools.subagents.archive_after_s", 0),
    Range("tools.subagents.announce_debounce_s", 0, 60),
    Range("hardware.op_timeout_s", 0, above=True),
    Range("hardware.flash_timeout_s", 0, above=True),
    Range("hardware.max_pulse_s", 0, above=True),
    Range("hardware.max_read_bytes", 1, 1 << 20),
    Range("state.backup_interval_s", 0, note=" (0 = no backups)"),
    Range("state.reserve_bytes", 0, note=" (0 = no reserve)"),
    Range("mqtt.port", 1, 65535, what="a port number"),
    Range("mqtt.keepalive_s", 5),
    Range("mqtt.max_payload_bytes", 256),
    Range("mqtt.inbound_queue", 1),
    Range("mqtt.max_concurrent", 1),
    Range("mqtt.outbox_max", 10),
    Range("mqtt.session_expiry_s", 0),
    Range("mqtt.connect_timeout_s", 0, above=True),
    Range("mqtt.telemetry_interval_s", 0),
    Range("mqtt.dedup_window_s", 0),
    Range("mqtt.hmac_max_age_s", 0),
    Range("mqtt.homeassistant_poll_s", 0.1, 3600),
    Range("sparkplug.data_interval_s", 0.01, 86400),
    Range("sparkplug.poll_s", 0.01, 3600),
    Range("fleet_page.session_ttl_s", 1, 30 * 86400),
    Range("fleet_page.max_sessions", 1, 10000),
    Range("fleet_page.max_login_failures", 1),
    Range("fleet_page.lockout_s", 0),
    Range("fleet_page.history_s", 60, 7 * 86400),
    Range("fleet_page.max_devices", 1, 100000),
    Range("fleet_page.max_events", 10, 100000),
    Range("fleet_page.call_timeout_s", 1, 3600),
    Range("fleet_page.broadcast_wait_s", 0.1, 600),
    Range("console.max_login_failures", 1),
    Range("console.lockout_s", 0),
    Range("console.login_delay_s", 0),
    Range("console.idle_logout_s", 0),
    Range("console.page_lines", 0),
    Range("console.max_output_lines", 1),
    Range("console.reconnect_min_s", 0, above=True),
    Range("memory.embedding_batch", 1, 2048),
    Range("memory.embedding_timeout_s", 0, above=True),
    Range("memory.embedding_attempts", 1),
    Range("memory.embedding_cooldown_s", 0),
    Range("memory.chunk_tokens", 16, 4096),
    Range("memory.chunk_overlap_tokens", 0),
    Range("memory.max_document_bytes", 1024),
    Range("memory.daily_half_life_days", 0, note=" (0 = no fading)"),
    Range("memory.mmr_lambda", 0, 1),
    Range("memory.bootstrap_max_turns", 0, note=" (0 = only when the model empties it)"),
    Range("memory.prompt_chars", 0),
    Range("memory.prompt_memory_chars", 0),
    Range("skills.prompt_max", 0),
    Range("gateway.health_deadline_s", 5),
    Range("gateway.update_max_bytes", 1024),
    Range("gateway.update_chunk_bytes", 1024),
    Range("gateway.update_slots", 2),
)
# The same for each [providers.NAME] table.
PROVIDER_RANGES = (
    Range("timeout_s", 0, above=True),
    Range("idle_timeout_s", 0, above=True),
    Range("max_tokens", 1),
    Range("context_tokens", 0, note=" (0 = ask the server)"),
)


def check_ranges(obj: Any, ranges: Iterable[Range], fail: Fail, prefix: str = "") -> None:
    """Report every value out of its range; `prefix` is prepended to keys for messages only."""
    for r in ranges:
        problem = r.problem(operator.attrgetter(r.key)(obj))
        if problem is not None:
            fail(prefix + r.key, problem)


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


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_ASSIGN = re.compile(rf"^\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=")


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
        header = _HEADER.match(line)
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
        assign = _ASSIGN.match(line)
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


def check_config(config: Config) -> None:
    """Checks that need more than one key, or the policy's vocabulary. Raises ConfigErrors."""
    errors = config_problems(config)
    if errors:
        raise ConfigErrors(errors)


def config_problems(config: Config) -> list[ConfigError]:
    """Every problem that needs more than one key, or the policy's vocabulary."""
    source = config._source
    errors: list[ConfigError] = []

    def fail(key: str, problem: str) -> None:
        errors.append(ConfigError(source, key, problem))

    check_ranges(config, RANGES, fail)
    for i, name in enumerate(config.agent.providers):
        if name not in config.providers:
            known = ", ".join(sorted(config.providers)) or "none defined"
            fail(f"agent.providers[{i}]", f"no [providers.{name}] table (defined: {known})")
    for name, provider in config.providers.items():
        if provider.api_key_env and provider.api_key_file:
            fail(f"providers.{name}", "set api_key_env or api_key_file, not both")
        check_ranges(provider, PROVIDER_RANGES, fail, f"providers.{name}.")
        if provider.base_url and (problem := _url_problem(provider.base_url)):
            fail(f"providers.{name}.base_url", problem)
        if provider.keep_alive and provider.kind != "ollama":
            fail(f"providers.{name}.keep_alive", 'only a kind "ollama" provider keeps a model loaded')
        elif provider.keep_alive and not re.fullmatch(r"-1|\d+(\.\d+)?(ms|s|m|h)?", provider.keep_alive):
            fail(f"providers.{name}.keep_alive", 'expected a duration: "30s", "10m", "1h", "0" or "-1"')
    if config.mqtt.password_env and config.mqtt.password_file:
        fail("mqtt", "set password_env or password_file, not both")
    if not config.mqtt.topic_prefix or any(c in config.mqtt.topic_prefix for c in "#+"):
        fail("mqtt.topic_prefix", "expected a non-empty topic without MQTT wildcards (# +)")
    _check_mqtt(config, fail)
    _check_sparkplug(config, fail)
    update_key = config.gateway.update_public_key
    if update_key and not re.fullmatch(r"[0-9a-fA-F]{64}", update_key):
        fail("gateway.update_public_key", "expected an Ed25519 public key: 64 hex digits (the raw 32 bytes)")
    for i, entry in enumerate(config.gateway.update_allow_networks):
        import ipaddress

        try:
            ipaddress.ip_network(entry.strip(), strict=True)
        except ValueError as e:
            fail(f"gateway.update_allow_networks[{i}]", f"expected a network such as 10.0.0.0/8 ({e})")
    if any(c in config.device_id for c in "/#+"):
        fail("device_id", "expected a name without '/', '#' or '+' (it becomes part of MQTT topics)")
    t = config.tools
    for name in t.channels:
        if name not in KNOWN_CHANNELS:
            fail(f"tools.channels.{name}", f"unknown channel (expected one of: {', '.join(KNOWN_CHANNELS)})")
    for name in t.providers:
        if name not in config.providers:
            fail(f"tools.providers.{name}", f"no [providers.{name}] table")
    for problems in _SECTION_CHECKS:
        for key, problem in problems(config):
            fail(key, problem)
    if config.board != "auto":
        from edgeclaw.board import load_profile

        try:
            load_profile(config.board, source)
        except ConfigErrors as e:
            errors.extend(e.errors)

    # Custom tools named in the same file are known names too (they are registered later, at start-up).
    custom = [c.name for c in config.tools.custom]
    for key, problem in rule_problems(rules_from_config(config), custom, mcp_servers=config.mcp.servers):
        fail(key, problem)
    return errors


def _url_problem(url: str) -> str | None:
    """Why `url` cannot be a provider's base_url, or None. Caught here rather than mid-turn."""
    expected = "expected an http:// or https:// URL such as http://127.0.0.1:8080/v1"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0-65535
    except ValueError as e:
        return f"{expected}, got {url!r} ({e})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{expected}, got {url!r}"
    return None


def _check_mqtt(config: Config, fail: Fail) -> None:
    """The [mqtt] keys that need more than a type or range check."""
    m = config.mqtt
    if m.hmac_secret_env and m.hmac_secret_file:
        fail("mqtt", "set hmac_secret_env or hmac_secret_file, not both")
    if any(c in m.client_id for c in "#+"):
        fail("mqtt.client_id", "expected a name without MQTT wildcards (# +), or empty for the device id")
    if not m.discovery_prefix or any(c in m.discovery_prefix for c in "#+"):
        fail("mqtt.discovery_prefix", "expected a non-empty name without MQTT wildcards (# +)")
    if 0 < m.telemetry_interval_s < 0.1:
        fail("mqtt.telemetry_interval_s", "expected 0 (off) or at least 0.1 s")
    if m.approver_secret_env and m.approver_secret_file:
        fail("mqtt", "set approver_secret_env or approver_secret_file, not both")
    if m.admin_secret_env and m.admin_secret_file:
        fail("mqtt", "set admin_secret_env or admin_secret_file, not both")
    if m.admin_key_name in (m.hmac_key_name, m.approver_key_name):
        fail("mqtt.admin_key_name", "expected a name other than hmac_key_name and approver_key_name")
    for key in ("hmac_key_name", "approver_key_name", "admin_key_name"):
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", getattr(m, key)):
            fail(f"mqtt.{key}", "expected 1-64 letters, digits, '_', '.' or '-' (it names the key in events)")
    if m.hmac_key_name == m.approver_key_name:
        fail("mqtt.approver_key_name", "expected a name other than hmac_key_name (they are different keys)")
    if m.hmac_max_age_s <= 0:
        fail(
            "mqtt.hmac_max_age_s",
            "expected more than 0 s: without an age limit a signed message could be "
            "replayed once the request ledger has forgotten it",
        )
    elif (m.hmac_secret_env or m.hmac_secret_file) and m.dedup_window_s < 2 * m.hmac_max_age_s:
        # A message is accepted while |now - ts| <= max age, so up to 2 x max age after it first
        # arrived; the ledger must remember it that long for a replay to be caught.
        fail(
            "mqtt.dedup_window_s",
            f"expected at least 2 x hmac_max_age_s ({_plain(2 * m.hmac_max_age_s)} s) with signed commands, "
            "so the ledger remembers a signed command for as long as it could be accepted; raise it "
            "or lower hmac_max_age_s",
        )
    if m.tls is not None and bool(m.tls.cert_file) != bool(m.tls.key_file):
        fail("mqtt.tls", "set cert_file and key_file together (a client certificate needs its key)")


def _check_sparkplug(config: Config, fail: Fail) -> None:
    """[sparkplug]: its ids are topic levels, and it needs the [mqtt] broker."""
    sp = config.sparkplug
    for key in ("group_id", "edge_node_id"):
        value = getattr(sp, key)
        if key == "edge_node_id" and not value:
            continue  # the device id, checked above
        if not value or not value.isprintable() or any(c in value for c in "/+#"):
            fail(f"sparkplug.{key}", f"expected one MQTT topic level (no '/', '+' or '#'), got {value!r}")
    if sp.enabled and not config.mqtt.enabled:
        fail("sparkplug.enabled", "Sparkplug B needs the broker of [mqtt]: set mqtt.enabled = true too")


def policy_rules(config: Config) -> PolicyRules:
    """The policy rules a configuration sets (see edgeclaw.config.policy_rules)."""
    return rules_from_config(config)


AGENT_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")


def _agent_problems(config: Config) -> list[tuple[str, str]]:
    """[agents.NAME] and [[agent.routes]]: names, providers, types, and routes to agents that exist."""
    problems: list[tuple[str, str]] = []
    known_providers = ", ".join(sorted(config.providers)) or "none defined"
    for name, agent in config.agents.items():
        key = f"agents.{name}"
        if not AGENT_NAME.fullmatch(name):
            problems.append((key, "expected a name of 1-32 letters, digits, '_' or '-'"))
        for i, provider in enumerate(agent.providers or ()):
            if provider not in config.providers:
                problems.append(
                    (f"{key}.providers[{i}]", f"no [providers.{provider}] table ({known_providers})")
                )
        if agent.max_iterations is not None and agent.max_iterations < 1:
            problems.append(
                (f"{key}.max_iterations", f"expected an integer >= 1, got {agent.max_iterations}")
            )
        listed = config.memory.agent_types.get(name)
        if agent.type is not None and listed is not None and listed != agent.type:
            problems.append(
                (
                    f"memory.agent_types.{name}",
                    f'says "{listed}" but [agents.{name}] type says "{agent.type}"; '
                    "keep one of them (agents.NAME.type is the place)",
                )
            )
    agents = {"main", *config.agents}
    for i, route in enumerate(config.agent.routes):
        key = f"agent.routes[{i}]"
        if route.agent not in agents:
            problems.append(
                (f"{key}.agent", f"no agent {route.agent!r} (defined: {', '.join(sorted(agents))})")
            )
        if bool(route.channel) == bool(route.session):
            problems.append((key, "set channel or session (a glob of session keys), one of them"))
        if route.channel and route.channel not in KNOWN_CHANNELS:
            problems.append(
                (f"{key}.channel", f"unknown channel (expected one of: {', '.join(KNOWN_CHANNELS)})")
            )
    return problems


def _notify_problems(config: Config) -> list[tuple[str, str]]:
    """[notify.*]: one source per credential, the URLs, and topics and devices a URL can carry."""
    problems: list[tuple[str, str]] = []
    pushover, ntfy = config.notify.pushover, config.notify.ntfy
    if pushover is not None:
        for what in ("token", "user"):
            env, file = getattr(pushover, f"{what}_env"), getattr(pushover, f"{what}_file")
            if env and file:
                problems.append(("notify.pushover", f"set {what}_env or {what}_file, not both"))
            elif not (env or file):
                problems.append(("notify.pushover", f"{what}_env or {what}_file is required"))
        if problem := _url_problem(pushover.base_url):
            problems.append(("notify.pushover.base_url", problem))
        for i, device in enumerate(pushover.devices):
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,25}", device):
                problems.append(
                    (f"notify.pushover.devices[{i}]", "expected 1-25 letters, digits, '_' or '-'")
                )
        if pushover.timeout_s <= 0:
            problems.append(("notify.pushover.timeout_s", "expected a number > 0"))
    if ntfy is not None:
        if ntfy.token_env and ntfy.token_file:
            problems.append(("notify.ntfy", "set token_env or token_file, not both"))
        if problem := _url_problem(ntfy.server):
            problems.append(("notify.ntfy.server", problem))
        if not ntfy.topics:
            problems.append(("notify.ntfy.topics", "list at least one topic messages may go to"))
        for i, topic in enumerate(ntfy.topics):
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", topic):
                problems.append((f"notify.ntfy.topics[{i}]", "expected 1-64 letters, digits, '_' or '-'"))
        if ntfy.timeout_s <= 0:
            problems.append(("notify.ntfy.timeout_s", "expected a number > 0"))
    return problems


# [tools.nodes] patterns: device ids / tool names with shell-style wildcards, never MQTT's (+ #) or '/'.
_NODES_PATTERN = re.compile(r"[A-Za-z0-9_.*?\[\]!-]{1,64}")


def _nodes_problems(config: Config) -> list[tuple[str, str]]:
    """[tools.nodes]: which peers and tools the `nodes` tool may call, and its timeout."""
    n = config.tools.nodes
    problems: list[tuple[str, str]] = []
    for key, entries in (("peers", n.peers), ("tools", n.tools)):
        for i, entry in enumerate(entries):
            if not isinstance(entry, str) or not _NODES_PATTERN.fullmatch(entry):
                problems.append((
                    f"tools.nodes.{key}[{i}]",
                    f"{entry!r}: expected a name or a pattern such as \"greenhouse-*\" (1-64 letters, "
                    "digits, '_', '.', '-' and the wildcards * ? [ ]; no '/', '+' or '#')",
                ))  # fmt: skip
    if not 0 < n.timeout_s <= 300:
        problems.append(("tools.nodes.timeout_s", f"expected a number > 0 and <= 300, got {n.timeout_s}"))
    if n.peers and n.tools and config.mqtt.protocol != "5":
        problems.append((
            "tools.nodes.peers",
            'calling peers needs MQTT 5 (mqtt.protocol = "5": the answer comes on a Response Topic); '
            "leave peers empty to only list them",
        ))  # fmt: skip
    return problems


_WEB_SECRET_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _web_problems(config: Config) -> list[tuple[str, str]]:
    """[tools.web] and each [tools.agents.ID.web]: networks, ports, bounds, secrets by name."""
    import ipaddress

    w = config.tools.web
    problems: list[tuple[str, str]] = []

    def networks(key: str, entries: list[str]) -> None:
        for i, entry in enumerate(entries):
            try:
                ipaddress.ip_network(entry.strip(), strict=True)
            except ValueError as e:
                problems.append((f"{key}[{i}]", f"expected a network such as 192.168.1.0/24 ({e})"))

    def ports(key: str, entries: list[int]) -> None:
        if not entries:
            problems.append((key, "expected at least one port (no port = no web tool could reach anything)"))
        for i, port in enumerate(entries):
            if not 1 <= port <= 65535:
                problems.append((f"{key}[{i}]", f"expected a port number 1-65535, got {port}"))

    def globs(key: str, entries: list[str]) -> None:
        for i, entry in enumerate(entries):
            if not entry.strip() or any(c in entry for c in "/:@ "):
                problems.append((f"{key}[{i}]", f"expected a host name or a glob (*.lan), got {entry!r}"))

    networks("tools.web.allow_networks", w.allow_networks)
    ports("tools.web.ports", w.ports)
    globs("tools.web.allow_hosts", w.allow_hosts)
    globs("tools.web.allowed_domains", w.allowed_domains)
    for key, value, low, high in (
        ("max_redirects", w.max_redirects, 0, 20),
        ("max_response_bytes", w.max_response_bytes, 1, None),
        ("max_response_size", w.max_response_size, 1, None),
    ):
        if value < low or (high is not None and value > high):
            bound = f"{low}-{high}" if high is not None else f">= {low}"
            problems.append((f"tools.web.{key}", f"expected an integer {bound}, got {value}"))
    if not w.timeout_s > 0:
        problems.append(("tools.web.timeout_s", f"expected a number > 0, got {w.timeout_s}"))
    if w.extractor not in ("auto", "builtin", "trafilatura"):
        problems.append(("tools.web.extractor", f"expected auto, builtin or trafilatura: {w.extractor!r}"))
    elif w.extractor == "trafilatura":
        import importlib.util

        if importlib.util.find_spec("trafilatura") is None:
            problems.append(("tools.web.extractor", "trafilatura is not installed (the web-extract extra)"))
    for name, secret in w.secrets.items():
        key = f"tools.web.secrets.{name}"
        if not _WEB_SECRET_NAME.fullmatch(name):
            problems.append((key, "expected a name of 1-64 letters, digits, '_', '.' or '-'"))
        if bool(secret.env) == bool(secret.file):
            problems.append((key, "set env or file (one of them): secrets are never inline"))
    for agent_id, agent in config.tools.agents.items():
        over = agent.web
        key = f"tools.agents.{agent_id}.web"
        if over.allow_networks is not None:
            networks(f"{key}.allow_networks", over.allow_networks)
        if over.ports is not None:
            ports(f"{key}.ports", over.ports)
        if over.allow_hosts is not None:
            globs(f"{key}.allow_hosts", over.allow_hosts)
        if over.allowed_domains is not None:
            globs(f"{key}.allowed_domains", over.allowed_domains)
        for i, name in enumerate(over.secrets or ()):
            if name not in w.secrets:
                known = ", ".join(sorted(w.secrets)) or "none defined"
                problems.append((f"{key}.secrets[{i}]", f"no [tools.web.secrets.{name}] ({known})"))
    return problems


def _installed(module: str) -> bool:
    """Whether an optional package can be imported, without importing it (start-up stays fast)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # in sys.modules without a spec: it is there, however it got there
        return True


def _search_problems(config: Config) -> list[tuple[str, str]]:
    """[tools.web.search]: the chain (no repeats), and each provider in it usable as configured."""
    problems: list[tuple[str, str]] = []
    s = config.tools.web.search
    where = "tools.web.search"
    if s.fallback_providers and not s.provider:
        problems.append((f"{where}.fallback_providers", "set tools.web.search.provider first"))
    for i, name in enumerate(s.fallback_providers):
        if name == s.provider:
            problems.append((f"{where}.fallback_providers[{i}]", f"{name} is the provider itself"))
        elif name in s.fallback_providers[:i]:
            problems.append((f"{where}.fallback_providers[{i}]", f"{name} is listed twice"))
    if not 1 <= s.num_results <= 20:
        problems.append((f"{where}.num_results", f"expected 1 to 20, got {s.num_results}"))
    for kind in search_chain(s):
        table = getattr(s, kind)
        key = f"{where}.{kind}"
        if table.api_key_env and table.api_key_file:
            problems.append((key, "set api_key_env or api_key_file, not both"))
        elif kind in SEARCH_PROVIDERS_KEYED and not (table.api_key_env or table.api_key_file):
            problems.append((key, f"api_key_env or api_key_file is required ({kind} needs a key)"))
        if kind == "searxng" and not table.url:
            problems.append((f"{key}.url", "required: the URL of your SearXNG instance"))
        elif kind == "duckduckgo" and table.url:
            problems.append((f"{key}.url", "not used: ddgs finds DuckDuckGo itself"))
        elif table.url and (problem := _url_problem(table.url)):
            problems.append((f"{key}.url", problem))
        if kind == "duckduckgo" and not _installed("ddgs"):
            problems.append((key, "needs the ddgs package, not installed (pip install 'edgeclaw[ddg]')"))
        if table.model and kind != "perplexity":
            problems.append((f"{key}.model", "only perplexity takes a model"))
        if table.timeout_s <= 0:
            problems.append((f"{key}.timeout_s", "expected a number > 0"))
    return problems


_MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _mcp_problems(config: Config) -> list[tuple[str, str]]:
    """[mcp]: server names, what each transport needs, secrets named once, sane timings."""
    m = config.mcp
    problems: list[tuple[str, str]] = []
    for key in ("health_interval_s", "reconnect_first_s", "reconnect_max_s"):
        if not getattr(m, key) > 0:
            problems.append((f"mcp.{key}", "expected a number > 0"))
    if m.reconnect_max_s < m.reconnect_first_s:
        problems.append(("mcp.reconnect_max_s", "expected at least mcp.reconnect_first_s"))
    if m.reconnect_attempts < 0:
        problems.append(("mcp.reconnect_attempts", "expected an integer >= 0"))
    for name, s in m.servers.items():
        at = f"mcp.servers.{name}"
        if not _MCP_SERVER_NAME.fullmatch(name):
            problems.append((at, "expected a server name of 1-32 letters, digits, '_' or '-'"))
        if s.transport == "stdio" and not s.command:
            problems.append((f"{at}.command", "a stdio server needs the program to start"))
        if s.transport in ("sse", "http"):
            if not s.url:
                problems.append((f"{at}.url", f"a {s.transport} server needs its URL"))
            elif problem := _url_problem(s.url):
                problems.append((f"{at}.url", problem.replace("such as http://127.0.0.1:8080/v1", "")))
        if not s.timeout_s > 0:
            problems.append((f"{at}.timeout_s", "expected a number > 0"))
        for key, names, pattern in (
            ("env", [*s.env, *s.env_from, *s.env_files], _ENV_NAME),
            ("headers", [*s.headers, *s.headers_from, *s.header_files], _HEADER_NAME),
        ):
            for var in names:
                if not pattern.fullmatch(var):
                    problems.append((f"{at}.{key}", f"{var!r} is not a valid name"))
                elif names.count(var) > 1:
                    problems.append((f"{at}.{key}", f"{var} is set more than once (plain, env, file)"))
        for header, value in s.headers.items():
            if "\r" in value or "\n" in value:
                problems.append((f"{at}.headers.{header}", "a header value cannot hold a line break"))
        for key in ("tool_allow", "tool_deny"):
            if any(not t for t in getattr(s, key)):
                problems.append((f"{at}.{key}", "expected tool names, got an empty one"))
    problems += _mcp_serve_problems(config)
    return problems


def _mcp_serve_problems(config: Config) -> list[tuple[str, str]]:
    """[mcp.server]: what the HTTP endpoint and MCP over MQTT need."""
    srv = config.mcp.server
    at = "mcp.server"
    problems: list[tuple[str, str]] = []
    if srv.listen:
        host, sep, port = srv.listen.rpartition(":")
        if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
            problems.append((f"{at}.listen", 'expected "HOST:PORT", e.g. "127.0.0.1:8765"'))
        if not srv.token_file:
            problems.append(
                (f"{at}.token_file", "required with mcp.server.listen: a file holding the bearer token")
            )
    if not srv.path.startswith("/") or any(c in srv.path for c in "?# "):
        problems.append((f"{at}.path", 'expected a path such as "/mcp"'))
    if srv.tls_key_file and not srv.tls_cert_file:
        problems.append((f"{at}.tls_cert_file", "required with tls_key_file"))
    if srv.mqtt and not config.mqtt.enabled:
        problems.append(
            (f"{at}.mqtt", "MCP over MQTT uses the daemon's broker connection: set [mqtt] enabled = true")
        )
    if srv.mqtt and config.mqtt.protocol != "5":
        problems.append((f"{at}.mqtt", 'MCP over MQTT needs MQTT 5 (mqtt.protocol = "5")'))
    if srv.mqtt_server_name and (
        any(c in srv.mqtt_server_name for c in "+#") or "" in srv.mqtt_server_name.split("/")
    ):
        problems.append(
            (f"{at}.mqtt_server_name", "expected topic levels separated by '/', none empty, no '+' or '#'")
        )
    if srv.max_sessions < 1:
        problems.append((f"{at}.max_sessions", "expected an integer >= 1"))
    for key in ("session_idle_s", "approval_timeout_s"):
        if not getattr(srv, key) > 0:
            problems.append((f"{at}.{key}", "expected a number > 0"))
    if srv.mqtt_presence_expiry_s < 0:
        problems.append((f"{at}.mqtt_presence_expiry_s", "expected an integer >= 0 (0 = no expiry)"))
    return problems


def _memory_problems(config: Config) -> list[tuple[str, str]]:
    """[memory] and [skills] checks across keys: the embedder's provider, chunk sizes, channels."""
    m = config.memory
    problems: list[tuple[str, str]] = []
    if m.embedder:
        provider = config.providers.get(m.embedder)
        if provider is None:
            known = ", ".join(sorted(config.providers)) or "none defined"
            problems.append(("memory.embedder", f"no [providers.{m.embedder}] table (defined: {known})"))
        elif provider.kind == "ollama" and m.embedding_api != "ollama":
            why = f'[providers.{m.embedder}] is kind "ollama": set embedding_api = "ollama"'
            problems.append(("memory.embedding_api", why))
        elif provider.kind not in ("openai", "ollama"):
            problems.append(
                (
                    "memory.embedder",
                    f'[providers.{m.embedder}] is kind "{provider.kind}", which has no embeddings endpoint; '
                    'name a kind "openai" or "ollama" provider (llama.cpp, Ollama, the hosted APIs)',
                )
            )
        if not m.embedding_model.strip():
            problems.append(("memory.embedding_model", "required with memory.embedder: the embeddings model"))
    if m.chunk_overlap_tokens * 2 >= m.chunk_tokens:
        problems.append(
            ("memory.chunk_overlap_tokens", f"expected less than half of chunk_tokens ({m.chunk_tokens})")
        )
    channels = ", ".join(KNOWN_CHANNELS)
    for i, channel in enumerate(m.shared_writers):
        if channel not in KNOWN_CHANNELS:
            problems.append((f"memory.shared_writers[{i}]", f"unknown channel (expected one of: {channels})"))
    for i, directory in enumerate(config.skills.dirs):
        if not directory.strip():
            problems.append((f"skills.dirs[{i}]", "expected a directory, got an empty string"))
    return problems


def _console_problems(config: Config) -> list[tuple[str, str]]:
    """[console] checks; the hash file itself is read when the console starts."""
    from edgeclaw.config.pin_hash import PinHashError, parse_pin_hash

    c = config.console
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, port in enumerate(c.ports):
        if not port.strip():
            problems.append((f"console.ports[{i}]", "expected a device path, got an empty string"))
        elif port in seen:
            problems.append((f"console.ports[{i}]", f"{port} is listed twice"))
        seen.add(port)
    if c.login_hash and c.login_hash_file:
        problems.append(("console", "set login_hash or login_hash_file, not both"))
    if c.login_hash:
        try:
            parse_pin_hash(c.login_hash)
        except PinHashError as e:
            problems.append(("console.login_hash", str(e)))
    if c.login == "on" and not (c.login_hash or c.login_hash_file):
        problems.append(("console.login", '"on" needs login_hash or login_hash_file'))
    if c.baud not in SERIAL_BAUD_RATES:
        problems.append(
            ("console.baud", f"expected a rate a serial port can be set to (e.g. 9600, 115200), got {c.baud}")
        )
    if c.width and c.width < 20:
        problems.append(("console.width", f"expected 0 (no wrapping) or at least 20 columns, got {c.width}"))
    if c.reconnect_max_s < c.reconnect_min_s:
        problems.append(("console.reconnect_max_s", "expected a number >= reconnect_min_s"))
    return problems


# The sections whose checks list their problems as (key, why) pairs, in the order they are reported.
def _media_problems(config: Config) -> list[tuple[str, str]]:
    """[tools.media]: the speech chain names configured providers once each, keys set once, a
    provider for describe that exists."""
    problems: list[tuple[str, str]] = []
    m = config.tools.media
    where = "tools.media.tts"
    for i, name in enumerate(m.tts.chain):
        if name not in m.tts.providers:
            problems.append((f"{where}.chain[{i}]", f"no [{where}.providers.{name}] table"))
        elif name in m.tts.chain[:i]:
            problems.append((f"{where}.chain[{i}]", f"{name} is listed twice"))
    for name, p in m.tts.providers.items():
        key = f"{where}.providers.{name}"
        if p.api_key_env and p.api_key_file:
            problems.append((key, "set api_key_env or api_key_file, not both"))
        if p.base_url and (problem := _url_problem(p.base_url)):
            problems.append((f"{key}.base_url", problem))
        if p.timeout_s <= 0:
            problems.append((f"{key}.timeout_s", f"expected seconds > 0, got {p.timeout_s}"))
    if not 1 <= m.tts.max_chars <= 20000:
        problems.append((f"{where}.max_chars", f"expected 1 to 20000, got {m.tts.max_chars}"))
    image = m.image
    if image.api_key_env and image.api_key_file:
        problems.append(("tools.media.image", "set api_key_env or api_key_file, not both"))
    if image.base_url and (problem := _url_problem(image.base_url)):
        problems.append(("tools.media.image.base_url", problem))
    if m.describe_provider and m.describe_provider not in config.providers:
        problems.append(("tools.media.describe_provider", f"no [providers.{m.describe_provider}] table"))
    return problems


_SECTION_CHECKS: tuple[Callable[[Config], list[tuple[str, str]]], ...] = (
    _console_problems,
    _agent_problems,
    _notify_problems,
    _search_problems,
    _media_problems,
    _memory_problems,
    _mcp_problems,
    _nodes_problems,
    _web_problems,
    caller_problems,
)
