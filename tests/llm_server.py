"""A real HTTP server on loopback that speaks the providers' wire protocols with scripted replies.

Tests queue replies (`ScriptedLLM.reply(...)`); each POST takes the next
one. Requests that run concurrently (subagents) can have scripts of their own:
`route(match, ...)` answers the requests `match(body)` picks from its own
queue, before the shared one. A queued item may be a function of the request
body returning the reply (a model that quotes what it was sent). Besides
well-formed answers it can answer with an HTTP error (with Retry-After), a
body cut off mid-JSON, or never answer at all. Every request body is recorded
so tests can check what the client sent.

Embedding requests (`POST .../embeddings`, OpenAI-compatible, and Ollama's
`POST /api/embed`) never take a scripted reply: they are answered with
deterministic vectors (`embed_text`), recorded in `embed_requests`, and can
be made to fail (`embed_failures`, `embeddings_down`).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Scripted:
    status: int = 200
    body: Any = None  # a JSON-able object
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # sent as-is instead of `body`
    hang_s: float = 0.0  # sleep before answering (longer than the client's timeout = never answers)


def openai_text(text: str) -> Scripted:
    return Scripted(
        body={
            "id": "chatcmpl-1",
            "model": "scripted",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }
    )


def openai_tools(*calls: tuple[str, str | dict[str, Any]], text: str | None = None) -> Scripted:
    tool_calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
        }
        for i, (name, args) in enumerate(calls)
    ]
    return Scripted(
        body={
            "id": "chatcmpl-2",
            "model": "scripted",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "tool_calls": tool_calls},
                    "finish_reason": "tool_calls",
                }
            ],
        }
    )


def anthropic_text(text: str) -> Scripted:
    return Scripted(
        body={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "scripted",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )


def anthropic_tools(*calls: tuple[str, dict[str, Any]], text: str = "") -> Scripted:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [
        {"type": "tool_use", "id": f"toolu_{i}", "name": n, "input": a} for i, (n, a) in enumerate(calls)
    ]
    return Scripted(
        body={
            "id": "msg_2",
            "type": "message",
            "role": "assistant",
            "model": "scripted",
            "content": content,
            "stop_reason": "tool_use",
        }
    )


EMBED_DIM = 384
_STOP_WORDS = frozenset(
    ["a", "an", "and", "are", "at", "be", "by", "for", "from", "in", "is", "it", "of", "on", "or", "the",
     "to", "with", "which", "what", "where"]
)  # fmt: skip
# A little "meaning" for the fake model: these words land where their synonym does.
SYNONYMS = {"ventilator": "fan", "blower": "fan", "pin": "gpio", "wired": "gpio", "hot": "temperature"}


def embed_text(text: str, dim: int = EMBED_DIM) -> list[float]:
    """A deterministic embedding: each content word (after SYNONYMS) adds +-1 at a hashed dimension.

    Texts sharing words (or synonyms) point the same way, so nearest-neighbour search behaves like a
    real model's on them, and any test can compute the vector the server answers with.
    """
    vector = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        if word in _STOP_WORDS:
            continue
        word = SYNONYMS.get(word, word)
        digest = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "big")
        for k in range(3):  # three dimensions a word: fewer accidental collisions between words
            vector[(digest >> (16 * k)) % dim] += 1.0 if (digest >> (48 + k)) & 1 else -1.0
    if not any(vector):
        vector[0] = 1.0  # no content words: a fixed direction rather than a zero vector
    return vector


class _Server(ThreadingHTTPServer):
    # Many clients connecting at once (fifty subagents) must not overflow the listen backlog.
    request_queue_size = 256


# A reply computed from the request body.
Reply = Callable[[dict[str, Any]], Scripted]


class ScriptedLLM:
    def __init__(self) -> None:
        self.queue: deque[Scripted | Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.embed_requests: list[dict[str, Any]] = []
        self.embed_paths: list[str] = []
        self.embed_failures = 0  # the next N embedding requests are answered 503
        self.embeddings_down = False  # every embedding request is answered 503
        self.embed_dim = EMBED_DIM
        self.record = True  # False: keep no request bodies (a long benchmark's memory is not ours)
        self.routes: list[tuple[Callable[[dict[str, Any]], bool], deque[Scripted | Reply]]] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def reply(self, *items: Scripted | Reply) -> ScriptedLLM:
        self.queue.extend(items)
        return self

    def route(self, match: Callable[[dict[str, Any]], bool], *items: Scripted | Reply) -> ScriptedLLM:
        """Requests `match` picks take these replies, in order (then the shared queue's)."""
        self.routes.append((match, deque(items)))
        return self

    def _next(self, body: dict[str, Any]) -> Scripted:
        with self._lock:
            item: Scripted | Reply | None = None
            for match, queue in self.routes:
                if queue and match(body):
                    item = queue.popleft()
                    break
            else:
                item = self.queue.popleft() if self.queue else Scripted(500, {"error": "script exhausted"})
        return item if isinstance(item, Scripted) else item(body)

    def __enter__(self) -> ScriptedLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        llm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.endswith("/embeddings") or self.path.endswith("/api/embed"):
                    self._embeddings(body)
                    return
                if llm.record:
                    llm.requests.append(body)
                    llm.headers.append({k.lower(): v for k, v in self.headers.items()})
                    llm.paths.append(self.path)
                item = llm._next(body)
                if item.hang_s:
                    time.sleep(item.hang_s)
                data = item.raw if item.raw is not None else json.dumps(item.body).encode()
                try:
                    self.send_response(item.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in item.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _embeddings(self, body: dict[str, Any]) -> None:
                llm.embed_requests.append(body)
                llm.embed_paths.append(self.path)
                if llm.embeddings_down or llm.embed_failures > 0:
                    llm.embed_failures = max(0, llm.embed_failures - 1)
                    self._answer(503, {"error": "embeddings unavailable"})
                    return
                texts = body.get("input")
                texts = [texts] if isinstance(texts, str) else texts
                vectors = [embed_text(str(t), llm.embed_dim) for t in texts or []]
                if self.path.endswith("/api/embed"):
                    self._answer(200, {"model": body.get("model"), "embeddings": vectors})
                    return
                # Answered in reverse order, as some servers do: clients must follow `index`.
                data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
                self._answer(200, {"object": "list", "model": body.get("model"), "data": data[::-1]})

            def _answer(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


def first_user_text(body: dict[str, Any]) -> str:
    """The first user message of a request (a subagent's task), in either wire format."""
    for m in body.get("messages", ()):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):  # Anthropic blocks
                return "".join(b.get("text", "") for b in content if isinstance(b, dict))
            return str(content or "")
    return ""


def system_text(body: dict[str, Any]) -> str:
    system = body.get("system")
    if system is not None:
        return system if isinstance(system, str) else json.dumps(system)
    messages = body.get("messages") or [{}]
    return str(messages[0].get("content", "")) if messages[0].get("role") == "system" else ""


def task_is(task: str) -> Callable[[dict[str, Any]], bool]:
    """A route for the subagent whose task (first user message) starts with `task`."""
    return lambda body: "## Subagent" in system_text(body) and first_user_text(body).startswith(task)
