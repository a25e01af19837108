"""A real HTTP server on loopback that answers as the search providers do, recording every request.

Each path has a queue of replies (`reply(path, ...)`); a path with an empty queue answers
404. A reply can be a JSON body, raw bytes (a body that is not JSON), an HTTP error, or a
delay longer than the client waits. Requests are recorded whole (method, path, query,
headers, body) so tests can check what the client sent and what it did not.

The bodies in `documented_*` follow each provider's documented answer shape, trimmed to the
fields that matter plus a few that do not (which the client must ignore).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.loopback import LoopbackServer


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-able
    raw: bytes | None = None  # sent as is instead of `body`
    hang_s: float = 0.0
    content_type: str = "application/json"


@dataclass
class Seen:
    method: str
    path: str
    target: str  # the request target as sent: path and query string
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class SearchServer(LoopbackServer):
    replies: dict[str, deque[Reply]] = field(default_factory=lambda: defaultdict(deque))
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._listen(self._handler())

    def reply(self, path: str, *items: Reply) -> SearchServer:
        self.replies[path].extend(items)
        return self

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                server.seen.append(
                    Seen(
                        self.command,
                        parts.path,
                        self.path,
                        parse_qs(parts.query),
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                    )
                )
                queue = server.replies.get(parts.path)
                item = queue.popleft() if queue else Reply(404, {"error": "no such path"})
                if item.hang_s:
                    time.sleep(item.hang_s)
                data = item.raw if item.raw is not None else json.dumps(item.body).encode()
                try:
                    self.send_response(item.status)
                    self.send_header("Content-Type", item.content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting, as it should

            do_GET = _serve
            do_POST = _serve

        return Handler


# --- the providers' documented answers -----------------------------------------------------------


def documented_searxng(n: int = 3) -> dict[str, Any]:
    return {
        "query": "rust embedded",
        "number_of_results": 0,
        "results": [
            {
                "url": f"https://example.org/page{i}",
                "title": f"Page {i} &amp; more",
                "content": f"Snippet   number {i}.",
                "engine": "duckduckgo",
                "parsed_url": ["https", "example.org", f"/page{i}", "", "", ""],
                "template": "default.html",
                "engines": ["duckduckgo", "brave"],
                "positions": [i],
                "score": 1.0 / i,
                "category": "general",
            }
            for i in range(1, n + 1)
        ],
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": ["rust embedded hal"],
        "unresponsive_engines": [],
    }


def documented_brave() -> dict[str, Any]:
    return {
        "type": "search",
        "query": {"original": "raspberry pi i2c", "more_results_available": True},
        "mixed": {"type": "mixed", "main": [{"type": "web", "index": 0, "all": False}]},
        "web": {
            "type": "search",
            "results": [
                {
                    "title": "Configuring <strong>I2C</strong> on the Pi",
                    "url": "https://www.raspberrypi.com/documentation/i2c.html",
                    "is_source_local": False,
                    "description": "How to enable the <strong>I2C</strong> bus &amp; find devices.",
                    "profile": {"name": "Raspberry Pi"},
                    "language": "en",
                    "family_friendly": True,
                    "type": "search_result",
                },
                {
                    "title": "i2c-tools",
                    "url": "https://git.kernel.org/pub/scm/utils/i2c-tools/i2c-tools.git/",
                    "description": "The i2cdetect, i2cget and i2cset programs.",
                    "type": "search_result",
                },
                # Not a web address: a client must never pass it on to a model that will fetch it.
                {"title": "Local file", "url": "file:///etc/passwd", "description": "nope"},
            ],
            "family_friendly": True,
        },
    }


def documented_tavily() -> dict[str, Any]:
    return {
        "query": "BME280 datasheet",
        "follow_up_questions": None,
        "answer": None,
        "images": [],
        "results": [
            {
                "title": "BME280 - Bosch Sensortec",
                "url": "https://www.bosch-sensortec.com/products/environmental-sensors/humidity-sensors-bme280/",
                "content": "The BME280 is a humidity sensor especially developed for mobile applications.",
                "score": 0.98,
                "raw_content": None,
            },
            {
                "title": "BME280 datasheet (PDF)",
                "url": "https://www.bosch-sensortec.com/media/bst-bme280-ds002.pdf",
                "content": "Combined humidity and pressure sensor.",
                "score": 0.91,
                "raw_content": None,
            },
        ],
        "response_time": 1.09,
    }


def documented_jina() -> dict[str, Any]:
    return {
        "code": 200,
        "status": 20000,
        "data": [
            {
                "title": "MicroPython on the ESP32",
                "url": "https://docs.micropython.org/en/latest/esp32/quickref.html",
                "description": "Quick reference for the ESP32.",
                "usage": {"tokens": 1000},
            },
            {
                "title": "ESP-IDF Programming Guide",
                "url": "https://docs.espressif.com/projects/esp-idf/en/latest/",
                "description": "",
                "content": "The ESP-IDF guide.",
                "usage": {"tokens": 1000},
            },
        ],
        "meta": {"usage": {"tokens": 10000}},
    }


def documented_exa() -> dict[str, Any]:
    return {
        "requestId": "b5947044c4b78efa9552a7c89b306d95",
        "resolvedSearchType": "neural",
        "results": [
            {
                "title": "A guide to SPI",
                "url": "https://example.com/spi-guide",
                "publishedDate": "2023-11-16T01:36:32.547Z",
                "author": "Someone",
                "id": "https://example.com/spi-guide",
                "highlights": ["SPI is a synchronous serial bus.", "It uses four wires."],
                "highlightScores": [0.46, 0.41],
            },
            {
                "title": "SPI modes",
                "url": "https://example.com/spi-modes",
                "id": "https://example.com/spi-modes",
                "text": "CPOL and CPHA decide the mode.",
            },
        ],
        "searchType": "neural",
        "costDollars": {"total": 0.005},
    }


def documented_perplexity() -> dict[str, Any]:
    return {
        "id": "3c90c3cc-0d44-4b50-8888-8dd25736052a",
        "model": "sonar",
        "created": 1724369245,
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": "The TMP102 answers at 0x48 by default [1].",
                },
            }
        ],
        "usage": {"prompt_tokens": 8, "completion_tokens": 12, "total_tokens": 20},
        "citations": ["https://www.ti.com/product/TMP102"],
        "search_results": [
            {
                "title": "TMP102 data sheet",
                "url": "https://www.ti.com/product/TMP102",
                "date": "2023-12-25",
                "last_updated": "2024-01-02",
                "snippet": "Low-power digital temperature sensor with I2C.",
                "source": "web",
            }
        ],
    }
