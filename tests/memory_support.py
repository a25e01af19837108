"""Shared pieces of the memory tests: a store on a real SQLite file, embedders on a loopback server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeclaw.agent.providers.chain import RetryPolicy
from edgeclaw.agent.providers.http import SharedClient, post_json
from edgeclaw.backends.embeddings import HttpEmbedder, embeddings_url
from edgeclaw.store.db import Database
from edgeclaw.store.memory import MemorySettings, MemoryStore
from tests.llm_server import ScriptedLLM


class LoopbackEmbedder(HttpEmbedder):
    """The real HttpEmbedder and request path, against a ScriptedLLM; fast retries."""

    def __init__(self, server: ScriptedLLM, *, api: str = "openai", batch_size: int = 32, **kw: Any) -> None:
        self.client = SharedClient()

        def post(url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float) -> Any:
            return post_json(self.client.get(), "test embeddings", url, body, headers, timeout_s)

        kw.setdefault("retry", RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.02))
        super().__init__(
            "local",
            api=api,  # type: ignore[arg-type]
            url=embeddings_url(api, server.url + "/v1"),  # type: ignore[arg-type]
            model="fake-embed",
            post=post,
            batch_size=batch_size,
            timeout_s=5.0,
            **kw,
        )

    async def aclose(self) -> None:
        await self.client.aclose()


def open_store(path: Path, embedder: Any = None, **settings: Any) -> MemoryStore:
    return MemoryStore(Database(path), settings=MemorySettings(**settings), embedder=embedder)
