"""A real HTTP server on loopback that speaks the providers' wire protocols with scripted replies.

Tests queue replies (`ScriptedLLM.reply(...)`); each POST takes the next
one. Besides well-formed answers it can answer with an HTTP error (with
Retry-After), a body cut off mid-JSON, or never answer at all. Every request
body is recorded so tests can check what the client sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
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


class ScriptedLLM:
    def __init__(self) -> None:
        self.queue: deque[Scripted] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def reply(self, *items: Scripted) -> ScriptedLLM:
        self.queue.extend(items)
        return self

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
                llm.requests.append(json.loads(self.rfile.read(length) or b"{}"))
                llm.headers.append({k.lower(): v for k, v in self.headers.items()})
                llm.paths.append(self.path)
                item = llm.queue.popleft() if llm.queue else Scripted(500, {"error": "script exhausted"})
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

        return Handler
