"""The tool families the daemon builds on first use name, from the start, exactly the tools and
groups they build: policies checked at start-up and `tools list` agree with what then runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import build_runtime

CONFIGS = {
    "sim board": {"board": "sim"},
    "generic Linux board": {"board": "generic-linux"},
    "web search with a fallback": {
        "board": "sim",
        "tools": {
            "web": {
                "search": {
                    "provider": "searxng",
                    "fallback_providers": ["jina"],
                    "searxng": {"url": "http://127.0.0.1:8888"},
                    "jina": {"api_key_env": "JINA_KEY"},
                }
            }
        },
    },
}


@pytest.mark.parametrize("name", CONFIGS)
def test_every_deferred_family_builds_the_tools_it_named(tmp_path: Path, name: str) -> None:
    data = {"state_dir": str(tmp_path / "state"), **CONFIGS[name]}
    runtime = build_runtime(config_from_dict(data, "test.toml"), environ={"JINA_KEY": "k" * 24})
    registry = runtime.registry
    named = registry.names()
    deferred = set(registry._deferred)
    assert {"i2c", "tts", "web_fetch", "spawn", "message"} <= deferred  # the families are deferred
    assert ("web_search" in named) == ("search" in CONFIGS[name].get("tools", {}).get("web", {}))
    groups = dict(registry.policy._tool_groups)
    built = registry.infos()  # builds every family; RuntimeError if one built other tools
    assert [i.name for i in built] == named
    assert {i.name: i.group for i in built} == groups
    assert not registry._deferred
