"""A real llama.cpp server for tests and benches, and a recording proxy in front of it.

`scripts/llama-server build` builds the server and fetches the small model into a cache outside the
clone; `llama_paths()` asks the script where they are (without building). `LlamaServer` runs the
binary on a free loopback port. `RecordingProxy` forwards every request to it unchanged (streamed
answers are passed on as they arrive) and keeps each request body and answer, so a test sees what
edgeclaw sent and what the server said about it (its `timings`: how many prompt tokens came from
its cache, how long the rest took) even when edgeclaw itself runs in another process.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.loopback import LoopbackServer

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "llama-server"
CONTEXT = 2048  # the context the tests run the server with: what a small board affords


def llama_paths() -> dict[str, str]:
    """Where the cached build, template, model and the reason file are (nothing is built)."""
    out = subprocess.run([str(SCRIPT), "paths"], capture_output=True, text=True, check=True, timeout=30)
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


class NotBuilt(Exception):
    """The server binary or the model is missing; `impossible` when the build said it cannot be done."""

    def __init__(self, message: str, *, impossible: bool) -> None:
        super().__init__(message)
        self.impossible = impossible


def check_built(paths: dict[str, str]) -> None:
    server, model = Path(paths["EDGECLAW_LLAMA_SERVER"]), Path(paths["EDGECLAW_LLAMA_MODEL"])
    if os.access(server, os.X_OK) and model.is_file():
        return
    reason = Path(paths["EDGECLAW_LLAMA_UNAVAILABLE"])
    if reason.is_file():
        raise NotBuilt(f"llama-server could not be built: {reason.read_text().strip()}", impossible=True)
    missing = server if not os.access(server, os.X_OK) else model
    raise NotBuilt(
        f"{missing} is missing: run scripts/llama-server build (scripts/test runs it)", impossible=False
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LlamaServer:
    """llama-server on a free loopback port with the small model, the Qwen2.5 tool-call template and
    one slot (so consecutive requests share its prompt cache)."""

    paths: dict[str, str]
    context: int = CONTEXT
    extra: list[str] = field(default_factory=list)
    log_path: Path | None = None
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 180.0) -> LlamaServer:
        check_built(self.paths)
        self.port = free_port()
        log = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        command = [
            self.paths["EDGECLAW_LLAMA_SERVER"],
            "-m", self.paths["EDGECLAW_LLAMA_MODEL"],
            "--jinja", "--chat-template-file", self.paths["EDGECLAW_LLAMA_TEMPLATE"],
            "--host", "127.0.0.1", "--port", str(self.port),
            "-c", str(self.context), "-np", "1",
            *self.extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}: {self._log_tail()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                if r.status == 200:
                    return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"llama-server did not become ready within {timeout_s:g} s: {self._log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return "(no log)"
        return self.log_path.read_text(errors="replace")[-2000:]

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class Exchange:
    """One request through the proxy and what the server answered."""

    path: str
    body: dict[str, Any]
    status: int = 0
    answer: bytes = b""
    canned: bool = False  # answered by the proxy itself, not the server

    @property
    def events(self) -> list[dict[str, Any]]:
        """The answer as JSON objects: the whole body, or each `data:` event of a streamed answer."""
        text = self.answer.decode("utf-8", "replace")
        if not self.streamed:
            try:
                return [json.loads(text)]
            except ValueError:
                return []
        out = []
        for line in text.split("\n"):  # not splitlines: U+2028 and the like may stand in a JSON string
            payload = line.removeprefix("data:").strip(" \r")
            if line.startswith("data:") and payload and payload != "[DONE]":
                with contextlib.suppress(ValueError):
                    out.append(json.loads(payload))
        return out

    @property
    def streamed(self) -> bool:
        """Server-sent events (a comment or an event name may come before the first data line)."""
        return b"\ndata:" in b"\n" + self.answer

    @property
    def timings(self) -> dict[str, Any]:
        """llama-server's `timings` of this answer (the last event that has them when streamed)."""
        for event in reversed(self.events):
            if isinstance(event.get("timings"), dict):
                return event["timings"]
        return {}

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens the server took from its cache instead of evaluating them."""
        if "cache_n" in self.timings:
            return int(self.timings["cache_n"])
        for event in reversed(self.events):
            details = (event.get("usage") or {}).get("prompt_tokens_details") or {}
            if "cached_tokens" in details:
                return int(details["cached_tokens"])
        return 0


@dataclass
class Canned:
    """A chat answer in OpenAI's format: `message` (content, tool_calls) and its finish reason."""

    message: dict[str, Any]
    finish_reason: str = "stop"

    def render(self, stream: bool) -> bytes:
        if not stream:
            choice = {"index": 0, "message": {"role": "assistant", **self.message}}
            return json.dumps(
                {
                    "id": "canned",
                    "object": "chat.completion",
                    "model": "canned",
                    "choices": [{**choice, "finish_reason": self.finish_reason}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            ).encode()
        delta: dict[str, Any] = {"role": "assistant", "content": self.message.get("content") or ""}
        calls = self.message.get("tool_calls") or []
        if calls:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
        chunks = [
            {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": self.finish_reason}]},
        ]
        events = [f"data: {json.dumps({'id': 'canned', 'model': 'canned', **c})}\n\n" for c in chunks]
        return ("".join(events) + "data: [DONE]\n\n").encode()


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class RecordingProxy(LoopbackServer):
    """Forwards loopback HTTP to `upstream`, recording each exchange (see the module docstring)."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port.rstrip("/")))
        self.exchanges: list[Exchange] = []
        # Answers the proxy gives itself, in order, instead of asking the server: a model's reply the
        # test decides (a tool call, a call cut off by the token limit); what follows goes to the server.
        self.canned: deque[Canned] = deque()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._forward(b"")

            def do_POST(self) -> None:
                self._forward(self.rfile.read(int(self.headers.get("content-length") or 0)))

            def _forward(self, body: bytes) -> None:
                try:
                    parsed = json.loads(body) if body else {}
                except ValueError:
                    parsed = {"_raw": body.decode("utf-8", "replace")}
                exchange = Exchange(self.path, parsed)
                proxy.exchanges.append(exchange)
                if self.path.endswith("/chat/completions") and proxy.canned:
                    self._answer_canned(exchange, proxy.canned.popleft())
                    return
                upstream = http.client.HTTPConnection(*proxy.upstream, timeout=600)
                headers = {"Content-Type": self.headers.get("content-type", "application/json")}
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                response = upstream.getresponse()
                exchange.status = response.status
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Connection", "close")
                self.end_headers()
                # Passed on as it arrives: a streamed answer must reach the client token by token. A
                # client may hang up after the last token; the server's answer is still read to its
                # end, since its closing event holds the timings.
                listening = True
                while chunk := response.read1(65536):
                    exchange.answer += chunk
                    if listening:
                        try:
                            self.wfile.write(chunk)
                            self.wfile.flush()
                        except OSError:
                            listening = False
                upstream.close()

            def _answer_canned(self, exchange: Exchange, canned: Canned) -> None:
                exchange.status, exchange.canned = 200, True
                stream = bool(exchange.body.get("stream"))
                exchange.answer = canned.render(stream)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(exchange.answer)

        self._listen(Handler)

    def chats(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.path.endswith("/chat/completions")]
