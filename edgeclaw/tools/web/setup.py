"""Builds the web tools from `[tools.web]`: one `WebSettings` (per-agent guard policies) shared by all."""

from __future__ import annotations

from collections.abc import Mapping

from edgeclaw.backends.web.guard import Resolver, system_resolver
from edgeclaw.config.schema import Config
from edgeclaw.tools.base import Tool
from edgeclaw.tools.web.settings import WebSettings


def web_settings(
    config: Config,
    secrets: Mapping[str, str],
    *,
    resolver: Resolver = system_resolver,
    environ: Mapping[str, str] | None = None,
) -> WebSettings:
    return WebSettings(config.tools.web, config.tools.agents, secrets, resolver=resolver, environ=environ)


def web_tools(settings: WebSettings, max_output_bytes: int = 32 * 1024) -> list[Tool]:
    """Every web tool, sharing `settings` (each asks it for the calling agent's policy);
    `max_output_bytes` is the registry's output cap, which web_fetch fits its results in."""
    from edgeclaw.tools.web.fetch import fetch_tool
    from edgeclaw.tools.web.http_request import HttpRequestTool
    from edgeclaw.tools.web.search import search_tool

    tools: list[Tool] = [
        fetch_tool(settings.web, settings.policy_for, max_output_bytes),
        HttpRequestTool(settings),
    ]
    search = search_tool(settings.web.search, settings.search_keys, settings.policy_for)
    if search is not None:  # no provider configured: no web_search
        tools.append(search)
    return tools
