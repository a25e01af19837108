"""Real HTTP servers on loopback for the web tools' tests: a scriptable site and a forward proxy.

`Site` answers each path from a route (a function of the request returning a `Page`), records
every request (method, path, headers, body) and counts TCP connections, so a test can prove a
server was never reached. It binds any loopback address (127.0.0.2 is a second "host"), and can
speak TLS with a certificate the test made (`make_cert`). `Proxy` is a forward proxy that
answers absolute-form requests itself and records them, without reaching anything.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.loopback import LoopbackServer


@dataclass
class Page:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    drip_s: float = 0.0  # sleep between body bytes (a slow server)
    hang_s: float = 0.0  # sleep before the status line


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes


Route = Callable[[Seen], Page]


def echo(seen: Seen) -> Page:
    """Answers with what it was sent (headers and body) as JSON: a server that echoes secrets."""
    body = json.dumps({"headers": seen.headers, "body": seen.body.decode("utf-8", "replace")}).encode()
    return Page(body=body, headers={"Content-Type": "application/json"})


class Site:
    def __init__(self, host: str = "127.0.0.1", *, tls: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Route] = {}
        self.seen: list[Seen] = []
        self.connections = 0
        self.sni: list[str | None] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                site.seen.append(seen)
                route = site.routes.get(self.path.split("?", 1)[0])
                page = route(seen) if route is not None else Page(404, b"not found")
                if page.hang_s:
                    time.sleep(page.hang_s)
                self.send_response(page.status)
                for name, value in page.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(page.body)))
                self.end_headers()
                try:
                    if page.drip_s:
                        for i in range(len(page.body)):
                            self.wfile.write(page.body[i : i + 1])
                            self.wfile.flush()
                            time.sleep(page.drip_s)
                    elif self.command != "HEAD":
                        self.wfile.write(page.body)
                except OSError:
                    pass  # the client went away (a cut body, a timeout)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _any

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that hung up mid-answer (a cut body, a timeout) is what tests do

            def get_request(self):  # type: ignore[override]
                sock, addr = super().get_request()
                site.connections += 1
                if tls is not None:
                    sock = tls.wrap_socket(sock, server_side=True)
                return sock, addr

        if tls is not None:
            tls.sni_callback = lambda _sock, name, _ctx: site.sni.append(name)  # type: ignore[assignment]
        self.server = Server((host, 0), Handler)
        self.host = host
        self.scheme = "https" if tls is not None else "http"
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/", host: str | None = None) -> str:
        name = host or (f"[{self.host}]" if ":" in self.host else self.host)
        return f"{self.scheme}://{name}:{self.port}{path}"

    def __enter__(self) -> Site:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class Proxy(LoopbackServer):
    """A forward proxy that answers every request itself ("via proxy") and records it."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str]] = []  # (method, request target, Host header)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                proxy.requests.append((self.command, self.path, self.headers.get("Host", "")))
                body = f"via proxy: {self.command} {self.path}".encode()
                self.send_response(200 if self.command != "CONNECT" else 403)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_CONNECT = _any

        self._listen(Handler)


def make_cert(directory: Path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A CA and a certificate for `name` signed by it (openssl): the server's and the client's contexts."""
    d = directory
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test CA",
        "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", str(d / "site.key"),
        "-out", str(d / "site.csr"))  # fmt: skip
    (d / "ext.cnf").write_text(f"subjectAltName=DNS:{name}\n")
    run("x509", "-req", "-in", str(d / "site.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
        "-CAcreateserial", "-days", "2", "-out", str(d / "site.pem"),
        "-extfile", str(d / "ext.cnf"))  # fmt: skip
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(d / "site.pem", d / "site.key")
    client = ssl.create_default_context(cafile=str(d / "ca.pem"))
    return server, client
