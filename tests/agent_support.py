"""Agent loops for tests: a sim-board config naming its LLM providers, built on runtimes closed at the end.

The providers usually point at a `tests.llm_server.ScriptedLLM` on loopback.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgeclaw.agent.loop import AgentLoop
from edgeclaw.config.loader import config_from_dict
from edgeclaw.config.schema import Config
from edgeclaw.daemon.agent import build_agent
from edgeclaw.daemon.runtime import Runtime, build_runtime

TEST_KEY = "sk-test-key-0123456789abcdefghij"  # what `api_key_env = "LLM_KEY"` reads


def provider_config(tmp_path: Path, providers: dict[str, Any], /, **agent: Any) -> Config:
    """A sim-board config whose agent tries `providers` in the order given (unless `agent` names one)."""
    return config_from_dict(
        {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            "agent": {"providers": list(providers), **agent},
            "providers": providers,
        },
        "test.toml",
    )


class Agents:
    """Builds runtimes and agent loops on them; `aclose` closes every runtime built."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = dict(environ or {})
        self._runtimes: list[Runtime] = []

    def runtime(self, config: Config) -> Runtime:
        runtime = build_runtime(config, environ=self._environ)
        self._runtimes.append(runtime)
        return runtime

    def loop(self, config: Config, *, fast_retry: bool = True) -> AgentLoop:
        loop = build_agent(self.runtime(config))
        if fast_retry:
            # Backoff is not what these tests measure: keep waits short.
            loop.chain.retry.base_delay_s = 0.01
            loop.chain.retry.max_delay_s = 0.02
        return loop

    async def aclose(self) -> None:
        for runtime in self._runtimes:
            await runtime.aclose()
