"""The fleet page as its users run it: `edgeclaw fleet serve` in a child process, logged into over HTTP."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

from edgeclaw.config.pin_hash import hash_pin
from tests.mqtt_support import free_port

PASSWORD = "correct horse battery"
TOKEN = "fleet-token-5b1f0c2e9a"
COMMAND_KEY = "command-key-for-the-fleet"
APPROVER_KEY = "approver-key-for-the-fleet"
KEYS = {"EC_HMAC": COMMAND_KEY, "EC_APPROVER": APPROVER_KEY}
WAIT_S = 30.0  # generous: the machine may be busy


class PageServer:
    """`edgeclaw fleet serve` in a child process, on a free loopback port."""

    def __init__(self, workdir: Path, broker_port: int, *, login: bool = True, **page: Any) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log = workdir / "fleet-page.log"
        token_file = workdir / "token"
        token_file.write_text(TOKEN + "\n")
        settings: dict[str, Any] = {"max_login_failures": 50, **page}
        if login:  # else the run makes a token of its own
            settings.update(login_hash=hash_pin(PASSWORD, "pbkdf2-sha256"), token_file=str(token_file))
        config = workdir / "page.toml"
        config.write_text(
            "[mqtt]\n"
            f"port = {broker_port}\n"
            'hmac_secret_env = "EC_HMAC"\n'
            'approver_secret_env = "EC_APPROVER"\n'
            "[fleet_page]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("EDGECLAW_")}
        env.update(KEYS, EDGECLAW_STATE_DIR=str(workdir / "state"))  # the device keys it pins, its own
        listen = f"127.0.0.1:{self.port}"
        command = ["fleet", "serve", "--config", str(config), "--listen", listen, "--log-level", "info"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edgeclaw", *command],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
        )
        deadline = time.monotonic() + WAIT_S
        while "fleet page on" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the fleet page did not start:\n{self.log.read_text()}")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def status_of_login(self, secret: str) -> int:
        return self.request(
            "POST",
            "/login",
            urllib.parse.urlencode({"secret": secret}),
            {"Content-Type": "application/x-www-form-urlencoded"},
        )[0]

    def request(
        self, method: str, path: str, body: bytes | str = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT_S)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def login(self, secret: str = PASSWORD) -> tuple[str, str]:
        """(the session cookie, its CSRF token)."""
        status, headers, _ = self.request(
            "POST",
            "/login",
            urllib.parse.urlencode({"secret": secret}),
            {"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert status == 303, status
        cookie = headers["set-cookie"].split(";")[0]
        _, _, body = self.request("GET", "/api/session", headers={"Cookie": cookie})
        return cookie, json.loads(body)["csrf"]
