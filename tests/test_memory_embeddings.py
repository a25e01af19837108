"""The embeddings client against a real HTTP server on loopback: batches, both APIs, retries, failures."""

from __future__ import annotations

import json

import pytest

from edgeclaw.backends.embeddings import EmbeddingsUnavailable, embeddings_url
from edgeclaw.tools.scrub import Scrubber
from tests.llm_server import Scripted, ScriptedLLM, embed_text
from tests.memory_support import LoopbackEmbedder


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


def test_the_endpoint_follows_the_api():
    assert embeddings_url("openai", "http://h:8080/v1/") == "http://h:8080/v1/embeddings"
    assert embeddings_url("ollama", "http://h:11434/v1") == "http://h:11434/api/embed"
    assert embeddings_url("ollama", "http://h:11434") == "http://h:11434/api/embed"


@pytest.mark.parametrize("api", ["openai", "ollama"])
async def test_texts_are_sent_in_batches_and_vectors_come_back_in_order(llm, api):
    embedder = LoopbackEmbedder(llm, api=api, batch_size=2)
    texts = [f"text number {i}" for i in range(5)]
    try:
        vectors = await embedder.embed(texts)
    finally:
        await embedder.aclose()
    # The openai answers come back reversed (as some servers do): `index` puts them in order.
    assert vectors == [embed_text(t) for t in texts]
    assert [len(r["input"]) for r in llm.embed_requests] == [2, 2, 1]
    assert llm.embed_paths[0] == ("/v1/embeddings" if api == "openai" else "/api/embed")
    assert all(r["model"] == "fake-embed" for r in llm.embed_requests)


async def test_a_server_error_is_retried_then_the_answer_is_used(llm):
    embedder = LoopbackEmbedder(llm)
    llm.embed_failures = 2
    try:
        assert await embedder.embed(["fan"]) == [embed_text("fan")]
    finally:
        await embedder.aclose()
    assert len(llm.embed_requests) == 3 and embedder.health.ok


async def test_a_dead_server_fails_fast_afterwards_and_says_why(llm):
    embedder = LoopbackEmbedder(llm, cooldown_s=60)
    llm.embeddings_down = True
    try:
        with pytest.raises(EmbeddingsUnavailable, match="HTTP 503"):
            await embedder.embed(["fan"])
        tries = len(llm.embed_requests)
        assert tries == 3  # every attempt of the retry policy
        with pytest.raises(EmbeddingsUnavailable, match="not asked again"):
            await embedder.embed(["fan"])
        assert len(llm.embed_requests) == tries
        assert "not asked again" in (embedder.unavailable_reason() or "")
    finally:
        await embedder.aclose()


async def test_an_unreachable_server_is_unavailable_not_a_crash():
    server = ScriptedLLM()  # never started: nothing listens on its port
    server._server.server_close()
    embedder = LoopbackEmbedder(server)
    try:
        with pytest.raises(EmbeddingsUnavailable, match="cannot reach"):
            await embedder.embed(["fan"])
    finally:
        await embedder.aclose()


@pytest.mark.parametrize(
    "answer, problem",
    [
        ({"data": [{"index": 0, "embedding": [0.1, 0.2]}]}, "1 vectors for 2 texts"),
        ({"data": [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": [0.1, 0.2]}]}, "dimensions"),
        ({"data": [{"index": 0, "embedding": ["x"]}, {"index": 1, "embedding": [1]}]}, "list of numbers"),
        ({"nothing": True}, "no 'data' list"),
    ],
)
async def test_malformed_answers_are_refused_by_what_is_wrong(llm, monkeypatch, answer, problem):
    embedder = LoopbackEmbedder(llm)

    async def post(url, body, headers, timeout_s):
        return answer

    monkeypatch.setattr(embedder, "_post", post)
    with pytest.raises(EmbeddingsUnavailable, match=problem):
        await embedder.embed(["a", "b"])
    await embedder.aclose()


async def test_the_daemons_secrets_never_leave_in_an_embeddings_request(llm):
    secret = "sk-proj-" + "A1b2C3d4" * 6
    scrubber = Scrubber([secret])
    embedder = LoopbackEmbedder(llm, scrub=scrubber.scrub, api_key="sk-embed-key-0123456789abcdef")
    try:
        await embedder.embed([f"the key is {secret}"])
    finally:
        await embedder.aclose()
    assert secret not in json.dumps(llm.embed_requests)
    assert "[REDACTED]" in llm.embed_requests[0]["input"][0]


async def test_chat_replies_still_come_from_the_script_beside_embeddings(llm):
    """The loopback server answers embeddings itself, leaving the scripted chat replies in order."""
    import httpx

    llm.reply(Scripted(body={"ok": 1}))
    embedder = LoopbackEmbedder(llm)
    try:
        await embedder.embed(["x"])
        async with httpx.AsyncClient() as client:
            answer = await client.post(llm.url + "/v1/chat/completions", json={})
    finally:
        await embedder.aclose()
    assert answer.json() == {"ok": 1} and len(llm.requests) == 1
