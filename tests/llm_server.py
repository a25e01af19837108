"""A real HTTP server on loopback that speaks the providers' wire protocols with scripted replies.

Tests queue replies (`ScriptedLLM.reply(...)`); each POST takes the next
one. Requests that run concurrently (subagents) can have scripts of their own:
`route(match, ...)` answers the requests `match(body)` picks from its own
queue, before the shared one. A queued item may be a function of the request
body returning the reply (a model that quotes what it was sent). Besides
well-formed answers it can answer with an HTTP error (with Retry-After), a
body cut off mid-JSON, or never answer at all. Every request body is recorded
so tests can check what the client sent.

Streaming: a request that asks for a stream (`"stream": true`) is answered with a whole JSON body,
as a server that does not stream would, unless the reply is a stream (`Scripted.chunks`, made by
`openai_stream`, `anthropic_stream`, `ollama_stream`) or the server streams every reply
(`stream_replies = True`: each whole reply is cut into the wire's events, text a few characters a
chunk). `chunk_gap_s` waits between chunks; `stall_after` stops sending after that many chunks
and keeps the connection open (a server that stalls mid-answer).

Ollama's `POST /api/show` and llama.cpp's `GET /props` never take a scripted reply either: they are
answered from `show` and `props` (None: 404), and recorded in `info_paths`.

`context_tokens` makes it a server with that context, as llama-server is: a chat request whose prompt
(`prompt_tokens(body)`: its messages and tools as JSON, 3 characters a token) does not fit is
answered 400 "the request exceeds the available context size", taking no scripted reply.

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

from tests.loopback import LoopbackServer


@dataclass
class Scripted:
    status: int = 200
    body: Any = None  # a JSON-able object
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # sent as-is instead of `body`
    hang_s: float = 0.0  # sleep before answering (longer than the client's timeout = never answers)
    chunks: list[bytes] | None = None  # a streamed answer: these pieces, each flushed on its own
    content_type: str = "application/json"
    chunk_gap_s: float = 0.0  # sleep between chunks
    stall_after: int | None = None  # send this many chunks, then nothing more (the connection stays open)


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


def _sse(events: list[dict[str, Any]], done: bool = False) -> list[bytes]:
    out = [f"data: {json.dumps(e)}\n\n".encode() for e in events]
    return out + ([b"data: [DONE]\n\n"] if done else [])


def _pieces(text: str, size: int = 4) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def openai_stream(
    text: str = "",
    calls: tuple[tuple[str, str | dict[str, Any]], ...] = (),
    finish_reason: str | None = None,
    *,
    arg_piece: int = 7,
    usage: dict[str, Any] | None = None,
) -> Scripted:
    """A chat-completion stream: text a few characters a chunk, then each call's arguments in pieces
    (`arg_piece` characters), the finish reason ("stop", "tool_calls"; None: no closing chunk)."""
    base = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "scripted"}
    events = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}]
    for piece in _pieces(text):
        events.append({**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
    for i, (name, args) in enumerate(calls):
        raw = args if isinstance(args, str) else json.dumps(args)
        head = {
            "index": i,
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        events.append(
            {**base, "choices": [{"index": 0, "delta": {"tool_calls": [head]}, "finish_reason": None}]}
        )
        for j in range(0, len(raw), arg_piece):
            part = {"index": i, "function": {"arguments": raw[j : j + arg_piece]}}
            events.append(
                {**base, "choices": [{"index": 0, "delta": {"tool_calls": [part]}, "finish_reason": None}]}
            )
    done = finish_reason is not None
    if done:
        events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]})
        events.append(
            {**base, "choices": [], "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5}}
        )
    return Scripted(chunks=_sse(events, done), content_type="text/event-stream")


def anthropic_stream(
    text: str = "",
    calls: tuple[tuple[str, str | dict[str, Any]], ...] = (),
    stop_reason: str | None = None,
    *,
    arg_piece: int = 7,
) -> Scripted:
    """A Messages-API event stream (stop_reason None: it ends before message_stop)."""
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_s", "model": "scripted", "content": [],
                                              "usage": {"input_tokens": 10, "output_tokens": 1}}},
    ]  # fmt: skip
    index = 0
    if text:
        events.append(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        )
        for piece in _pieces(text):
            events.append(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
            )
        events.append({"type": "content_block_stop", "index": 0})
        index = 1
    for i, (name, args) in enumerate(calls, start=index):
        raw = args if isinstance(args, str) else json.dumps(args)
        block = {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": {}}
        events.append({"type": "content_block_start", "index": i, "content_block": block})
        for j in range(0, len(raw), arg_piece):
            delta = {"type": "input_json_delta", "partial_json": raw[j : j + arg_piece]}
            events.append({"type": "content_block_delta", "index": i, "delta": delta})
        events.append({"type": "content_block_stop", "index": i})
    if stop_reason is not None:
        events.append(
            {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 5}}
        )
        events.append({"type": "message_stop"})
    chunks = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]
    return Scripted(chunks=chunks, content_type="text/event-stream")


def ollama_text(text: str, done_reason: str = "stop") -> Scripted:
    return Scripted(
        body={"model": "scripted", "message": {"role": "assistant", "content": text}, "done": True,
              "done_reason": done_reason, "prompt_eval_count": 10, "eval_count": 5}
    )  # fmt: skip


def ollama_tools(
    *calls: tuple[str, str | dict[str, Any]], text: str = "", done_reason: str = "stop"
) -> Scripted:
    """Tool calls as Ollama sends them: arguments an object (or, given as text, a JSON string)."""
    tool_calls = [{"function": {"name": n, "arguments": a}} for n, a in calls]
    message = {"role": "assistant", "content": text, "tool_calls": tool_calls}
    return Scripted(
        body={"model": "scripted", "message": message, "done": True, "done_reason": done_reason,
              "prompt_eval_count": 10, "eval_count": 5}
    )  # fmt: skip


def ollama_stream(
    text: str = "", calls: tuple[tuple[str, str | dict[str, Any]], ...] = (), done_reason: str | None = "stop"
) -> Scripted:
    """`/api/chat` JSON lines: text a few characters a line, the calls in one line, the done line."""
    lines: list[dict[str, Any]] = [
        {"model": "scripted", "message": {"role": "assistant", "content": p}, "done": False}
        for p in _pieces(text)
    ]
    if calls:
        tool_calls = [{"function": {"name": n, "arguments": a}} for n, a in calls]
        message = {"role": "assistant", "content": "", "tool_calls": tool_calls}
        lines.append({"model": "scripted", "message": message, "done": False})
    if done_reason is not None:
        lines.append({"model": "scripted", "message": {"role": "assistant", "content": ""}, "done": True,
                      "done_reason": done_reason, "prompt_eval_count": 10, "eval_count": 5})  # fmt: skip
    return Scripted(
        chunks=[(json.dumps(line) + "\n").encode() for line in lines], content_type="application/x-ndjson"
    )


def as_stream(item: Scripted) -> Scripted:
    """A whole scripted reply as the same answer streamed in its wire's events (others unchanged)."""
    body = item.body
    if item.status != 200 or item.chunks is not None or item.raw is not None or not isinstance(body, dict):
        return item
    if "choices" in body:
        choice = body["choices"][0]
        message = choice["message"]
        calls = tuple(
            (c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or ()
        )
        return openai_stream(message.get("content") or "", calls, choice.get("finish_reason") or "stop")
    if body.get("type") == "message":
        text = "".join(b["text"] for b in body["content"] if b["type"] == "text")
        calls = tuple((b["name"], b["input"]) for b in body["content"] if b["type"] == "tool_use")
        return anthropic_stream(text, calls, body.get("stop_reason") or "end_turn")
    if "message" in body and "done" in body:
        message = body["message"]
        calls = tuple(
            (c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or ()
        )
        return ollama_stream(message.get("content") or "", calls, body.get("done_reason") or "stop")
    return item


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


class ScriptedLLM(LoopbackServer):
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
        self.stream_replies = False  # True: a request asking for a stream gets every reply streamed
        self.show: dict[str, Any] | None = None  # Ollama's /api/show answer; None = 404
        self.props: dict[str, Any] | None = None  # llama.cpp's /props answer; None = 404
        self.info_paths: list[str] = []
        self.context_tokens: int | None = None  # refuse prompts longer than this (None: any length)
        self.routes: list[tuple[Callable[[dict[str, Any]], bool], deque[Scripted | Reply]]] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._listen(self._handler(), _Server)

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

    def __exit__(self, *exc: object) -> None:
        self._closed.set()  # a reply stalled on purpose ends now
        super().__exit__(*exc)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        llm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                if self.path.endswith("/props"):
                    llm.info_paths.append(self.path)
                    self._answer(200, llm.props) if llm.props is not None else self._answer(
                        404, {"error": "no"}
                    )
                    return
                self._answer(404, {"error": f"no GET {self.path}"})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.endswith("/embeddings") or self.path.endswith("/api/embed"):
                    self._embeddings(body)
                    return
                if self.path.endswith("/api/show"):
                    llm.info_paths.append(self.path)
                    if llm.show is None:
                        self._answer(404, {"error": f"model '{body.get('model')}' not found"})
                    else:
                        self._answer(200, llm.show)
                    return
                if llm.record:
                    llm.requests.append(body)
                    llm.headers.append({k.lower(): v for k, v in self.headers.items()})
                    llm.paths.append(self.path)
                if llm.context_tokens is not None and prompt_tokens(body) >= llm.context_tokens:
                    self._answer(400, context_exceeded(prompt_tokens(body), llm.context_tokens))
                    return
                item = llm._next(body)
                if llm.stream_replies and body.get("stream"):
                    item = as_stream(item)
                if item.hang_s:
                    time.sleep(item.hang_s)
                if item.chunks is not None:
                    self._stream(item)
                    return
                data = item.raw if item.raw is not None else json.dumps(item.body).encode()
                try:
                    self.send_response(item.status)
                    self.send_header("content-type", item.content_type)
                    self.send_header("content-length", str(len(data)))
                    for k, v in item.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _stream(self, item: Scripted) -> None:
                """Each piece written and flushed on its own, as a server writing tokens does; the body
                ends when the connection closes (HTTP/1.0, no length)."""
                try:
                    self.send_response(item.status)
                    self.send_header("content-type", item.content_type)
                    for k, v in item.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    for i, chunk in enumerate(item.chunks or ()):
                        if item.stall_after is not None and i >= item.stall_after:
                            llm._closed.wait(3600)  # a stalled server: the client's idle timeout ends it
                            return
                        if i and item.chunk_gap_s:
                            time.sleep(item.chunk_gap_s)
                        self.wfile.write(chunk)
                        self.wfile.flush()
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


def prompt_tokens(body: dict[str, Any]) -> int:
    """A request's prompt size as the scripted server counts it: its JSON, 3 characters a token."""
    parts = [body.get("system"), body.get("messages"), body.get("tools")]
    return len(json.dumps([p for p in parts if p])) // 3


def context_exceeded(n_prompt: int, n_ctx: int) -> dict[str, Any]:
    """llama-server's answer to a prompt longer than its context."""
    return {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": n_prompt,
            "n_ctx": n_ctx,
        }
    }


# The agent loop ends the newest user message with the current time (agent.prompt.volatile_note).
_VOLATILE_NOTE = re.compile(r"\n\n\[current time \(UTC\): [0-9T:-]+Z\]\Z")


def without_note(text: str) -> str:
    """A user message as the person wrote it: without the time the loop adds to the newest one."""
    return _VOLATILE_NOTE.sub("", text)


def user_texts(body: dict[str, Any]) -> list[str]:
    """Every user message's text in a request (either wire format), as the person wrote it."""
    out = []
    for m in body.get("messages", ()):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):  # Anthropic blocks
                blocks = [b for b in content if isinstance(b, dict) and b.get("type") == "text"]
                texts = [str(b.get("text", "")) for b in blocks]
                if not texts:
                    continue  # tool results only
                content = "".join(texts)
            out.append(without_note(str(content or "")))
    return out


def first_user_text(body: dict[str, Any]) -> str:
    """The first user message of a request (a subagent's task), in either wire format."""
    for m in body.get("messages", ()):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):  # Anthropic blocks
                return without_note("".join(b.get("text", "") for b in content if isinstance(b, dict)))
            return without_note(str(content or ""))
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
