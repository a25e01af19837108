"""The config's checks across keys and against the policy's vocabulary, every problem in one pass.

The types are checked while the TOML is read (`config.typed`); what is left is what needs more than
one key: numeric ranges (the tables of `config.check_tables`), a table naming another, one source per
secret, names that become topic levels, and each section's own rules (the `[tools.*]` and `[mcp]`
sections' in `config.tool_checks`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from edgeclaw.config.callers import caller_problems
from edgeclaw.config.check_tables import (
    KNOWN_CHANNELS,
    PROVIDER_RANGES,
    RANGES,
    SERIAL_BAUD_RATES,
    Fail,
    check_ranges,
    plain,
    url_problem,
)
from edgeclaw.config.device_key_text import provisioned_key_problems
from edgeclaw.config.listener_checks import listener_problems
from edgeclaw.config.policy_rules import (
    PolicyNameError,
    PolicyRules,
    check_entry,
    rule_problems,
    rules_from_config,
)
from edgeclaw.config.schema import Config
from edgeclaw.config.secrets import both_named, secret_ref
from edgeclaw.config.tool_checks import (
    mcp_problems,
    media_problems,
    nodes_problems,
    search_problems,
    web_problems,
)
from edgeclaw.errors import ConfigError, ConfigErrors


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
    for check in _CHECKS:
        check(config, fail)
    for problems in _SECTION_CHECKS:
        for key, problem in problems(config):
            fail(key, problem)
    if config.board != "auto":
        from edgeclaw.board.load import load_profile

        try:
            load_profile(config.board, source)
        except ConfigErrors as e:
            errors.extend(e.errors)

    # Custom tools named in the same file are known names too (they are registered later, at start-up).
    custom = [c.name for c in config.tools.custom]
    for key, problem in rule_problems(rules_from_config(config), custom, mcp_servers=config.mcp.servers):
        fail(key, problem)
    return errors


def _check_providers(config: Config, fail: Fail) -> None:
    """[providers.NAME] and the names of them in [agent]."""
    for i, name in enumerate(config.agent.providers):
        if name not in config.providers:
            known = ", ".join(sorted(config.providers)) or "none defined"
            fail(f"agent.providers[{i}]", f"no [providers.{name}] table (defined: {known})")
    for name, provider in config.providers.items():
        if problem := both_named(provider, "api_key"):
            fail(f"providers.{name}", problem)
        check_ranges(provider, PROVIDER_RANGES, fail, f"providers.{name}.")
        if provider.base_url and (problem := url_problem(provider.base_url)):
            fail(f"providers.{name}.base_url", problem)
        if provider.keep_alive and provider.kind != "ollama":
            fail(f"providers.{name}.keep_alive", 'only a kind "ollama" provider keeps a model loaded')
        elif provider.keep_alive and not re.fullmatch(r"-1|\d+(\.\d+)?(ms|s|m|h)?", provider.keep_alive):
            fail(f"providers.{name}.keep_alive", 'expected a duration: "30s", "10m", "1h", "0" or "-1"')


def _check_gateway(config: Config, fail: Fail) -> None:
    """[gateway]: the update signing key, the networks updates may come from, the tools that defer them."""
    update_key = config.gateway.update_public_key
    if update_key and not re.fullmatch(r"[0-9a-fA-F]{64}", update_key):
        fail("gateway.update_public_key", "expected an Ed25519 public key: 64 hex digits (the raw 32 bytes)")
    for i, entry in enumerate(config.gateway.update_allow_networks):
        import ipaddress

        try:
            ipaddress.ip_network(entry.strip(), strict=True)
        except ValueError as e:
            fail(f"gateway.update_allow_networks[{i}]", f"expected a network such as 10.0.0.0/8 ({e})")
    custom = [c.name for c in config.tools.custom]
    for i, entry in enumerate(config.gateway.defer_updates_during):
        try:
            check_entry(entry, custom, mcp_servers=config.mcp.servers)
        except PolicyNameError as e:
            fail(f"gateway.defer_updates_during[{i}]", str(e))


def _check_device_id(config: Config, fail: Fail) -> None:
    if any(c in config.device_id for c in "/#+"):
        fail("device_id", "expected a name without '/', '#' or '+' (it becomes part of MQTT topics)")


def _check_tool_tables(config: Config, fail: Fail) -> None:
    """[tools.channels.NAME] and [tools.providers.NAME] name channels and providers that exist."""
    t = config.tools
    for name in t.channels:
        if name not in KNOWN_CHANNELS:
            fail(f"tools.channels.{name}", f"unknown channel (expected one of: {', '.join(KNOWN_CHANNELS)})")
    for name in t.providers:
        if name not in config.providers:
            fail(f"tools.providers.{name}", f"no [providers.{name}] table")


def _check_mqtt(config: Config, fail: Fail) -> None:
    """The [mqtt] keys that need more than a type or range check."""
    m = config.mqtt
    if problem := both_named(m, "password"):
        fail("mqtt", problem)
    if not m.topic_prefix or any(c in m.topic_prefix for c in "#+"):
        fail("mqtt.topic_prefix", "expected a non-empty topic without MQTT wildcards (# +)")
    if problem := both_named(m, "hmac_secret"):
        fail("mqtt", problem)
    if any(c in m.client_id for c in "#+"):
        fail("mqtt.client_id", "expected a name without MQTT wildcards (# +), or empty for the device id")
    if not m.discovery_prefix or any(c in m.discovery_prefix for c in "#+"):
        fail("mqtt.discovery_prefix", "expected a non-empty name without MQTT wildcards (# +)")
    if 0 < m.telemetry_interval_s < 0.1:
        fail("mqtt.telemetry_interval_s", "expected 0 (off) or at least 0.1 s")
    for name in ("approver_secret", "admin_secret"):
        if problem := both_named(m, name):
            fail("mqtt", problem)
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
            f"expected at least 2 x hmac_max_age_s ({plain(2 * m.hmac_max_age_s)} s) with signed commands, "
            "so the ledger remembers a signed command for as long as it could be accepted; raise it "
            "or lower hmac_max_age_s",
        )
    if m.tls is not None and bool(m.tls.cert_file) != bool(m.tls.key_file):
        fail("mqtt.tls", "set cert_file and key_file together (a client certificate needs its key)")


def _check_sparkplug(config: Config, fail: Fail) -> None:
    """[sparkplug]: its ids are topic levels, and it needs the [mqtt] broker."""
    sp = config.sparkplug
    for key in ("group_id", "edge_node_id", "primary_host_id"):
        value = getattr(sp, key)
        if key != "group_id" and not value:
            continue  # the device id (checked above); no primary host
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
            if problem := both_named(pushover, what):
                problems.append(("notify.pushover", problem))
            elif secret_ref(pushover, "notify.pushover", what) is None:
                problems.append(("notify.pushover", f"{what}_env or {what}_file is required"))
        if problem := url_problem(pushover.base_url):
            problems.append(("notify.pushover.base_url", problem))
        for i, device in enumerate(pushover.devices):
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,25}", device):
                problems.append(
                    (f"notify.pushover.devices[{i}]", "expected 1-25 letters, digits, '_' or '-'")
                )
        if pushover.timeout_s <= 0:
            problems.append(("notify.pushover.timeout_s", "expected a number > 0"))
    if ntfy is not None:
        if problem := both_named(ntfy, "token"):
            problems.append(("notify.ntfy", problem))
        if problem := url_problem(ntfy.server):
            problems.append(("notify.ntfy.server", problem))
        if not ntfy.topics:
            problems.append(("notify.ntfy.topics", "list at least one topic messages may go to"))
        for i, topic in enumerate(ntfy.topics):
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", topic):
                problems.append((f"notify.ntfy.topics[{i}]", "expected 1-64 letters, digits, '_' or '-'"))
        if ntfy.timeout_s <= 0:
            problems.append(("notify.ntfy.timeout_s", "expected a number > 0"))
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
        from edgeclaw.config.pin_hash import PinHashError, parse_pin_hash  # hashlib, secrets: only then

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
_SECTION_CHECKS: tuple[Callable[[Config], list[tuple[str, str]]], ...] = (
    _console_problems,
    _agent_problems,
    _notify_problems,
    search_problems,
    media_problems,
    _memory_problems,
    mcp_problems,
    nodes_problems,
    web_problems,
    caller_problems,
    listener_problems,
    provisioned_key_problems,
)
# The checks that report through `fail`, in the order their problems are reported.
_CHECKS: tuple[Callable[[Config, Fail], None], ...] = (
    _check_providers,
    _check_mqtt,
    _check_sparkplug,
    _check_gateway,
    _check_device_id,
    _check_tool_tables,
)
