"""A chat provider built from `[providers.NAME]`: its wire protocol, key and limits.

Shared by the agent's chains and the tools that ask a model one question of their own (`image
describe`), so both send what the config says the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgeclaw.agent.providers.base import Provider
    from edgeclaw.agent.providers.http import SharedClient
    from edgeclaw.daemon.runtime import Runtime


def provider_from_config(name: str, runtime: Runtime, client: SharedClient) -> Provider:
    cfg = runtime.config.providers[name]
    api_key = runtime.secrets.get(f"providers.{name}", "")
    kwargs = {
        "model": cfg.model,
        "base_url": cfg.base_url,
        "api_key": api_key,
        "timeout_s": cfg.timeout_s,
        "idle_timeout_s": cfg.idle_timeout_s,
        "stream": cfg.stream,
        "max_tokens": cfg.max_tokens,
        "scrub": runtime.registry.scrubber.scrub,  # every configured secret stays out of request bodies
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
