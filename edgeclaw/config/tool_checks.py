"""The checks of the `[tools.*]` sections and `[mcp]`: web access, search, media, nodes, MCP servers.

Each lists its problems as (dotted key, what was expected); `config.checks` reports them.
"""

from __future__ import annotations

import re

from edgeclaw.config.check_tables import url_problem
from edgeclaw.config.schema import SEARCH_PROVIDERS_KEYED, Config
from edgeclaw.config.secrets import both_named, search_chain, secret_ref

# [tools.nodes] patterns: device ids / tool names with shell-style wildcards, never MQTT's (+ #) or '/'.
_NODES_PATTERN = re.compile(r"[A-Za-z0-9_.*?\[\]!-]{1,64}")


def nodes_problems(config: Config) -> list[tuple[str, str]]:
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


def web_problems(config: Config) -> list[tuple[str, str]]:
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


# Refused here as well as at run time: its only way in was the ddgs package, whose own HTTP client
# connects outside the web guard (no vetted, pinned address, no allow_networks, no proxy rule).
DUCKDUCKGO_DISABLED = (
    "duckduckgo is disabled: the ddgs package it searched through connects outside the web guard; "
    "use searxng (which can query DuckDuckGo itself) or a keyed provider "
    "(brave, tavily, jina, exa, perplexity)"
)


def search_problems(config: Config) -> list[tuple[str, str]]:
    """[tools.web.search]: the chain (no repeats), and each provider in it usable as configured."""
    problems: list[tuple[str, str]] = []
    s = config.tools.web.search
    where = "tools.web.search"
    if s.fallback_providers and not s.provider:
        problems.append((f"{where}.fallback_providers", "set tools.web.search.provider first"))
    if s.provider == "duckduckgo":
        problems.append((f"{where}.provider", DUCKDUCKGO_DISABLED))
    for i, name in enumerate(s.fallback_providers):
        if name == "duckduckgo":
            problems.append((f"{where}.fallback_providers[{i}]", DUCKDUCKGO_DISABLED))
        elif name == s.provider:
            problems.append((f"{where}.fallback_providers[{i}]", f"{name} is the provider itself"))
        elif name in s.fallback_providers[:i]:
            problems.append((f"{where}.fallback_providers[{i}]", f"{name} is listed twice"))
    if not 1 <= s.num_results <= 20:
        problems.append((f"{where}.num_results", f"expected 1 to 20, got {s.num_results}"))
    for kind in search_chain(s):
        table = getattr(s, kind)
        key = f"{where}.{kind}"
        if problem := both_named(table, "api_key"):
            problems.append((key, problem))
        elif kind in SEARCH_PROVIDERS_KEYED and secret_ref(table, key, "api_key") is None:
            problems.append((key, f"api_key_env or api_key_file is required ({kind} needs a key)"))
        if kind == "searxng" and not table.url:
            problems.append((f"{key}.url", "required: the URL of your SearXNG instance"))
        elif kind != "duckduckgo" and table.url and (problem := url_problem(table.url)):
            problems.append((f"{key}.url", problem))
        if table.model and kind != "perplexity":
            problems.append((f"{key}.model", "only perplexity takes a model"))
        if table.timeout_s <= 0:
            problems.append((f"{key}.timeout_s", "expected a number > 0"))
    return problems


_MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def mcp_problems(config: Config) -> list[tuple[str, str]]:
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
            elif problem := url_problem(s.url):
                problems.append((f"{at}.url", problem.replace("such as http://127.0.0.1:8080/v1", "")))
        if not s.timeout_s > 0:
            problems.append((f"{at}.timeout_s", "expected a number > 0"))
        if s.max_memory_mb < 16:
            problems.append(
                (f"{at}.max_memory_mb", f"expected an integer >= 16 (MiB), got {s.max_memory_mb}")
            )
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
            (f"{at}.mqtt", "MCP over MQTT uses the daemon's broker settings: set [mqtt] enabled = true")
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


def media_problems(config: Config) -> list[tuple[str, str]]:
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
        if problem := both_named(p, "api_key"):
            problems.append((key, problem))
        if p.base_url and (problem := url_problem(p.base_url)):
            problems.append((f"{key}.base_url", problem))
        if p.timeout_s <= 0:
            problems.append((f"{key}.timeout_s", f"expected seconds > 0, got {p.timeout_s}"))
    if not 1 <= m.tts.max_chars <= 20000:
        problems.append((f"{where}.max_chars", f"expected 1 to 20000, got {m.tts.max_chars}"))
    image = m.image
    if problem := both_named(image, "api_key"):
        problems.append(("tools.media.image", problem))
    if image.base_url and (problem := url_problem(image.base_url)):
        problems.append(("tools.media.image.base_url", problem))
    if m.describe_provider and m.describe_provider not in config.providers:
        problems.append(("tools.media.describe_provider", f"no [providers.{m.describe_provider}] table"))
    return problems
