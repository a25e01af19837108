"""Secrets named by the config: read from the environment or from a file, never inline.

Every value read here is also handed to the scrubber, so it is redacted from
tool output whatever its shape.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from edgeclaw.config.schema import Config, SearchProviderName, WebSearchConfig
from edgeclaw.errors import ConfigError


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


# An MCP server's secrets: (kind in the secret's name, the key naming variables, the key naming files).
_MCP_SECRET_KEYS = (("env", "env_from", "env_files"), ("header", "headers_from", "header_files"))


def secret_refs(config: Config) -> dict[str, SecretRef]:
    """Every secret the config names, keyed by what it is for."""
    refs: dict[str, SecretRef] = {}
    for name, p in config.providers.items():
        if p.api_key_env:
            refs[f"providers.{name}"] = SecretRef(f"providers.{name}.api_key_env", env=p.api_key_env)
        elif p.api_key_file:
            refs[f"providers.{name}"] = SecretRef(f"providers.{name}.api_key_file", file=p.api_key_file)
    m = config.mqtt
    if m.password_env:
        refs["mqtt"] = SecretRef("mqtt.password_env", env=m.password_env)
    elif m.password_file:
        refs["mqtt"] = SecretRef("mqtt.password_file", file=m.password_file)
    if m.hmac_secret_env:
        refs["mqtt.hmac"] = SecretRef("mqtt.hmac_secret_env", env=m.hmac_secret_env)
    elif m.hmac_secret_file:
        refs["mqtt.hmac"] = SecretRef("mqtt.hmac_secret_file", file=m.hmac_secret_file)
    if m.approver_secret_env:
        refs["mqtt.approver"] = SecretRef("mqtt.approver_secret_env", env=m.approver_secret_env)
    elif m.approver_secret_file:
        refs["mqtt.approver"] = SecretRef("mqtt.approver_secret_file", file=m.approver_secret_file)
    if m.admin_secret_env:
        refs["mqtt.admin"] = SecretRef("mqtt.admin_secret_env", env=m.admin_secret_env)
    elif m.admin_secret_file:
        refs["mqtt.admin"] = SecretRef("mqtt.admin_secret_file", file=m.admin_secret_file)
    for name, caller in config.callers.items():  # [callers.NAME]: each its own HMAC key
        if caller.secret_env:
            refs[f"callers.{name}"] = SecretRef(f"callers.{name}.secret_env", env=caller.secret_env)
        elif caller.secret_file:
            refs[f"callers.{name}"] = SecretRef(f"callers.{name}.secret_file", file=caller.secret_file)
    notify = config.notify
    for what, table, names in (
        ("pushover", notify.pushover, ("token", "user")),
        ("ntfy", notify.ntfy, ("token",)),
    ):
        for name in names if table is not None else ():
            env, file = getattr(table, f"{name}_env"), getattr(table, f"{name}_file")
            if env:
                refs[f"notify.{what}.{name}"] = SecretRef(f"notify.{what}.{name}_env", env=env)
            elif file:
                refs[f"notify.{what}.{name}"] = SecretRef(f"notify.{what}.{name}_file", file=file)
    # web_search's keys: only the providers in its chain (a table kept for later costs no start).
    search = config.tools.web.search
    for kind in search_chain(search):
        table = getattr(search, kind)
        where = f"tools.web.search.{kind}"
        if table.api_key_env:
            refs[where] = SecretRef(f"{where}.api_key_env", env=table.api_key_env)
        elif table.api_key_file:
            refs[where] = SecretRef(f"{where}.api_key_file", file=table.api_key_file)
    # http_request's secrets by name ({{secret:NAME}} in a header value or the body).
    for name, secret in config.tools.web.secrets.items():
        key = f"tools.web.secrets.{name}"
        if secret.env:
            refs[key] = SecretRef(f"{key}.env", env=secret.env)
        elif secret.file:
            refs[key] = SecretRef(f"{key}.file", file=secret.file)
    # The media tools' services: speech providers in the chain, the images service when enabled.
    media = config.tools.media
    keyed = [
        (f"tools.media.tts.providers.{n}", media.tts.providers[n])
        for n in media.tts.chain
        if n in media.tts.providers
    ]
    if media.image.enabled:
        keyed.append(("tools.media.image", media.image))
    for where, table in keyed:
        if table.api_key_env:
            refs[where] = SecretRef(f"{where}.api_key_env", env=table.api_key_env)
        elif table.api_key_file:
            refs[where] = SecretRef(f"{where}.api_key_file", file=table.api_key_file)
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
