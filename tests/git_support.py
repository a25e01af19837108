"""A git server for the tests: `git http-backend` as CGI behind a loopback HTTP server, and the repository
builders the hostile-repository tests share (real git, run on the host by the test itself)."""

from __future__ import annotations

import os
import subprocess
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from loopback import LoopbackServer

# The test's own git runs: no user or system config of the machine, a fixed identity.
GIT_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "tester",
    "GIT_AUTHOR_EMAIL": "tester@example.org",
    "GIT_COMMITTER_NAME": "tester",
    "GIT_COMMITTER_EMAIL": "tester@example.org",
    # The test's own setup may use file:// (a submodule); the tool's runs never may.
    "GIT_ALLOW_PROTOCOL": "file",
}


def git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=GIT_ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def bare_repo(root: Path, name: str, files: dict[str, str] | None = None) -> Path:
    """A bare repository `root/name`, with one commit of `files` on main when given."""
    bare = root / name
    git("init", "--bare", "--quiet", str(bare))
    git("config", "http.receivepack", "true", cwd=bare)
    if files:
        work = root / f"{name}-work"
        git("init", "--quiet", str(work))
        for rel, text in files.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text)
        git("add", "-A", cwd=work)
        git("commit", "--quiet", "-m", "first", cwd=work)
        git("push", "--quiet", str(bare), "main", cwd=work)
    return bare


class GitHttpServer(LoopbackServer):
    """Serves every repository under `root` over smart HTTP (`git http-backend`), pushes included.

    With `token`, every request must carry `Authorization: Basic` of `user:token` (else 401). The
    Authorization headers seen are kept in `authorizations`, the request paths in `paths`."""

    def __init__(self, root: Path, token: str | None = None, user: str = "x-access-token") -> None:
        self.root = root
        self.authorizations: list[str] = []
        self.paths: list[str] = []
        self.failures: list[
            str
        ] = []  # what http-backend said when it answered an error (for a test's message)
        server = self

        import base64

        expected = "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode() if token else None

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = b""
                    while True:
                        size = int(self.rfile.readline().strip() or b"0", 16)
                        if size == 0:
                            self.rfile.readline()
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _serve(self) -> None:
                auth = self.headers.get("Authorization", "")
                server.authorizations.append(auth)
                server.paths.append(self.path)
                body = self._body() if self.command == "POST" else b""
                if expected is not None and auth != expected:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                path, _, query = self.path.partition("?")
                env = {
                    **GIT_ENV,
                    "GIT_PROJECT_ROOT": str(server.root),
                    "GIT_HTTP_EXPORT_ALL": "1",
                    "REQUEST_METHOD": self.command,
                    "PATH_INFO": path,
                    "QUERY_STRING": query,
                    "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                    "CONTENT_LENGTH": str(len(body)),
                    "REMOTE_USER": "tester",
                    "REMOTE_ADDR": "127.0.0.1",
                    "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                    "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                }
                done = subprocess.run(
                    ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60, check=False
                )
                head, _, payload = done.stdout.partition(b"\r\n\r\n")
                status = 200
                headers: list[tuple[str, str]] = []
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.lower() == "status":
                        status = int(value.strip().split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                if status >= 400:
                    server.failures.append(
                        f"{self.command} {self.path}: {status} {done.stderr.decode()[-500:]}"
                    )
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _serve
            do_POST = _serve

        self._listen(Handler)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])
