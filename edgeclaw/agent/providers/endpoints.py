"""Where each provider kind is reached when the config names no base_url.

Its own module, importing nothing: doctor, the memory embedder and the
providers read it without loading an HTTP client or the daemon.
"""

from __future__ import annotations

from edgeclaw.config.schema import ProviderConfig

OPENAI_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
OLLAMA_BASE_URL = "http://127.0.0.1:11434"  # Ollama's own default listen address


def provider_url(cfg: ProviderConfig) -> str:
    """The base URL a provider calls: the configured one, else its kind's public endpoint."""
    if cfg.base_url:
        return cfg.base_url
    return {"anthropic": ANTHROPIC_BASE_URL, "ollama": OLLAMA_BASE_URL}.get(cfg.kind, OPENAI_BASE_URL)
