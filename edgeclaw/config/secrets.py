"""Secrets named by the config: read from the environment or from a file, never inline.

Every value read here is also handed to the scrubber, so it is redacted from
tool output whatever its shape.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import get_args

from edgeclaw.config.schema import Config, SearchProviderName, WebSearchConfig
from edgeclaw.errors import ConfigError
from edgeclaw.records import dataclass


@dataclass(frozen=True)
class SecretRef:
    """Where one secret comes from: an environment variable or a file, named by a config key."""

    key: str  # the config key that names it, e.g. "providers.cloud.api_key_env"
    env: str = ""
    file: str = ""

    def resolve(self, source: str, environ: Mapping[str, str] | None = None) -> str:
        env = os.environ if environ is None else environ
        if self.env:
            value = env.get(self.env)
            if not value:
                raise ConfigError(source, self.key, f"environment variable {self.env} is not set")
            return value
        try:
            # Strip only the trailing newline editors add; inner whitespace may be part of the secret.
            value = Path(self.file).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as e:
            raise ConfigError(
                source, self.key, f"cannot read secret file {self.file}: {e.strerror}"
            ) from None
        except UnicodeDecodeError:
            raise ConfigError(source, self.key, f"secret file {self.file} is not UTF-8 text") from None
        if not value:
            # Same rule as an empty variable: sending no key would only show up later as a 401.
            raise ConfigError(source, self.key, f"secret file {self.file} is empty")
        return value


def secret_ref(table: object, where: str, name: str = "") -> SecretRef | None:
    """The secret `name` of the config table at `where`, if one is named: `NAME_env` wins over `NAME_file`.

    Every secret is named the same way, by a variable (`api_key_env`) or a file (`api_key_file`);
    a table that holds one secret only names it `env` / `file` (`name` empty).
    """
    env_key, file_key = (f"{name}_env", f"{name}_file") if name else ("env", "file")
    env, file = getattr(table, env_key), getattr(table, file_key)
    if env:
        return SecretRef(f"{where}.{env_key}", env=env)
    if file:
        return SecretRef(f"{where}.{file_key}", file=file)
    return None


def both_named(table: object, name: str) -> str | None:
    """The problem when the secret `name` is named both ways (the loader refuses it), else None."""
    if getattr(table, f"{name}_env") and getattr(table, f"{name}_file"):
        return f"set {name}_env or {name}_file, not both"
    return None


# The [mqtt] secrets: (what each is for, its name in the table).
MQTT_SECRETS = (
    ("mqtt", "password"),
    ("mqtt.hmac", "hmac_secret"),
    ("mqtt.approver", "approver_secret"),
    ("mqtt.admin", "admin_secret"),
)
# The [notify.*] services' secrets: (service, the names of its secrets).
NOTIFY_SECRETS = (("pushover", ("token", "user")), ("ntfy", ("token",)))


def _secret_places(config: Config) -> Iterator[tuple[str, object, str, str]]:
    """Every place the config names a secret: (what it is for, the table, where it is, its name)."""
    for name, p in config.providers.items():
        yield f"providers.{name}", p, f"providers.{name}", "api_key"
    for what, name in MQTT_SECRETS:
        yield what, config.mqtt, "mqtt", name
    for name, caller in config.callers.items():  # [callers.NAME]: each its own HMAC key
        yield f"callers.{name}", caller, f"callers.{name}", "secret"
    for service, names in NOTIFY_SECRETS:
        table = getattr(config.notify, service)
        for name in names if table is not None else ():
            yield f"notify.{service}.{name}", table, f"notify.{service}", name
    # web_search's keys: only the providers in its chain (a table kept for later costs no start).
    search = config.tools.web.search
    for kind in search_chain(search):
        where = f"tools.web.search.{kind}"
        yield where, getattr(search, kind), where, "api_key"
    # http_request's secrets by name ({{secret:NAME}} in a header value or the body).
    for name, secret in config.tools.web.secrets.items():
        where = f"tools.web.secrets.{name}"
        yield where, secret, where, ""
    # The media tools' services: speech providers in the chain, the images service when enabled.
    media = config.tools.media
    for n in media.tts.chain:
        if n in media.tts.providers:
            where = f"tools.media.tts.providers.{n}"
            yield where, media.tts.providers[n], where, "api_key"
    if media.image.enabled:
        yield "tools.media.image", media.image, "tools.media.image", "api_key"


# An MCP server's secrets: (kind in the secret's name, the key naming variables, the key naming files).
_MCP_SECRET_KEYS = (("env", "env_from", "env_files"), ("header", "headers_from", "header_files"))


def secret_refs(config: Config) -> dict[str, SecretRef]:
    """Every secret the config names, keyed by what it is for."""
    refs: dict[str, SecretRef] = {}
    for what, table, where, name in _secret_places(config):
        if (ref := secret_ref(table, where, name)) is not None:
            refs[what] = ref
    # MCP servers' secrets: environment values of a stdio program, header values of an HTTP one.
    for name, server in config.mcp.servers.items():
        for kind, env_key, file_key in _MCP_SECRET_KEYS:
            at = f"mcp.servers.{name}"
            for var, source in getattr(server, env_key).items():
                refs[f"mcp.{name}.{kind}.{var}"] = SecretRef(f"{at}.{env_key}.{var}", env=source)
            for var, path in getattr(server, file_key).items():
                refs[f"mcp.{name}.{kind}.{var}"] = SecretRef(f"{at}.{file_key}.{var}", file=path)
    return refs


def search_chain(search: WebSearchConfig) -> list[str]:
    """web_search's providers in the order they are tried: the provider, then its fallbacks."""
    known = get_args(SearchProviderName)  # an unknown name is the loader's error, never a lookup here
    if search.provider not in known:
        return []
    chain = [search.provider]
    for name in search.fallback_providers:
        if name in known and name not in chain:  # the loader refuses repeats too
            chain.append(name)
    return chain


def resolve_secrets(
    config: Config, environ: Mapping[str, str] | None = None
) -> tuple[dict[str, str], list[ConfigError]]:
    """Read every secret; returns the values found and the problems (missing variable, unreadable file)."""
    values: dict[str, str] = {}
    problems: list[ConfigError] = []
    for what, ref in secret_refs(config).items():
        try:
            values[what] = ref.resolve(config._source, environ)
        except ConfigError as e:
            problems.append(e)
    return values, problems
