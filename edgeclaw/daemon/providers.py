"""A chat provider built from `[providers.NAME]`: its wire protocol, key and limits.

Shared by the agent's chains and the tools that ask a model one question of their own (`image
describe`), so both send what the config says the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgeclaw.agent.providers.base import Provider
    from edgeclaw.agent.providers.http import SharedClient
    from edgeclaw.config.schema import Config


def provider_from_config(
    name: str, config: Config, secrets: Mapping[str, str], scrub: Callable[[str], str], client: SharedClient
) -> Provider:
    """`scrub` keeps every configured secret out of request bodies."""
    cfg = config.providers[name]
    api_key = secrets.get(f"providers.{name}", "")
    kwargs = {
        "model": cfg.model,
        "base_url": cfg.base_url,
        "api_key": api_key,
        "timeout_s": cfg.timeout_s,
        "idle_timeout_s": cfg.idle_timeout_s,
        "stream": cfg.stream,
        "max_tokens": cfg.max_tokens,
        "scrub": scrub,
    }
    if cfg.kind == "ollama":
        from edgeclaw.agent.providers.ollama import OllamaProvider

        ollama = {"keep_alive": cfg.keep_alive, "num_ctx": cfg.context_tokens}
        return OllamaProvider(name, client, **kwargs, **ollama)  # type: ignore[arg-type]
    if cfg.kind == "anthropic":
        from edgeclaw.agent.providers.anthropic import AnthropicProvider

        return AnthropicProvider(name, client, **kwargs)  # type: ignore[arg-type]
    from edgeclaw.agent.providers.openai import OpenAIProvider

    return OpenAIProvider(name, client, **kwargs)  # type: ignore[arg-type]
