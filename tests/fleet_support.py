"""A fleet on this machine: a real mosquitto and several real `edgeclaw run` daemons on the sim board,
and the fleet page (`edgeclaw fleet serve`) in a child process.

Each daemon has its own device id, config, state directory and log; all share one broker. Used by
tests/test_fleet.py, tests/test_fleet_page*.py and bench/bench_fleet.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.config.pin_hash import hash_pin
from edgeclaw.net.device_key import DeviceKey
from tests.mqtt_support import daemon_env, free_port, run_daemon

PREFIX = "edgeclaw"


def toml_value(value: Any) -> str:
    return json.dumps(value)


class FleetDaemon:
    """`edgeclaw run --board sim` as device `device`, MQTT to `port`. `supervised`: started again
    whenever it exits non-zero, as systemd's Restart=on-failure does (an update that dies at its
    first start is rolled back by the next one), and told so (EDGECLAW_SUPERVISED=1)."""

    def __init__(
        self, workdir: Path, device: str, port: int, *, extra: str = "", supervised: bool = False, **mqtt: Any
    ) -> None:
        self.device = device
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.state = workdir / "state"
        self.log = workdir / "daemon.log"
        self.config = workdir / "edgeclaw.toml"
        settings = {"telemetry_interval_s": 1.0, **mqtt}
        lines = [
            'board = "sim"',
            f'device_id = "{device}"',
            "[tools]",
            "rate_limit = 0",
            "[mqtt]",
            "enabled = true",
            f"port = {port}",
            "discovery = false",
            *(f"{k} = {toml_value(v)}" for k, v in settings.items()),
        ]
        self.config.write_text("\n".join(lines) + "\n" + extra)  # `extra`: more tables
        self.env = daemon_env(self.state, self.config)
        self.proc: subprocess.Popen[bytes] | None = None
        self.supervised = supervised
        self.exits: list[int] = []  # the exit codes the supervisor saw
        self._stopping = False
        self._supervisor: threading.Thread | None = None

    def start(self) -> FleetDaemon:
        if not self.supervised:
            self.proc = run_daemon(self.env, self.log, "--board", "sim")
            return self
        self.env["EDGECLAW_SUPERVISED"] = "1"
        self._stopping, self.proc = False, None
        self._supervisor = threading.Thread(target=self._supervise, daemon=True)
        self._supervisor.start()
        while self.proc is None:
            time.sleep(0.01)
        return self

    def _supervise(self) -> None:
        while True:
            proc = self.proc = run_daemon(self.env, self.log, "--board", "sim")
            code = proc.wait()
            self.exits.append(code)
            if code == 0 or self._stopping:
                return
            time.sleep(0.3)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self) -> None:
        self._stopping = True  # the supervisor, if any, lets it stop
        if self.running:
            assert self.proc is not None
            self.proc.terminate()

    def wait(self, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self._supervisor is not None:
            self._supervisor.join(5)

    def stop(self) -> None:
        self.terminate()
        self.wait()


class Fleet:
    """N daemons named `{name}-00` ... on one broker; `groups` maps a device index to its groups."""

    def __init__(
        self,
        root: Path,
        port: int,
        count: int,
        *,
        name: str = "dev",
        groups: dict[int, list[str]] | None = None,
        supervised: bool = False,
        **mqtt: Any,
    ) -> None:
        groups = groups or {}
        self.daemons = [
            FleetDaemon(
                root / f"{name}-{i:02d}",
                f"{name}-{i:02d}",
                port,
                supervised=supervised,
                groups=groups.get(i, []),
                **mqtt,
            )
            for i in range(count)
        ]

    @property
    def devices(self) -> list[str]:
        return [d.device for d in self.daemons]

    def start(self) -> Fleet:
        for d in self.daemons:
            d.start()
        return self

    def stop(self) -> None:
        for d in self.daemons:  # all at once: each takes its own time to stop
            d.terminate()
        for d in self.daemons:
            d.wait()

    def until(self, condition: Callable[[], Any], what: str, within: float) -> Any:
        """Poll `condition` until it is truthy (its value); past `within`, fail with the daemons' logs."""
        deadline = time.monotonic() + within
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {within:g} s\n{self.logs()[-8000:]}")
            time.sleep(0.25)

    def logs(self) -> str:
        out = []
        for d in self.daemons:
            text = d.log.read_text(errors="replace") if d.log.exists() else ""
            out.append(f"--- {d.device} ---\n{text[-3000:]}")
        return "\n".join(out)


class SignedDevice:
    """A device's key on the test side: messages in `device`'s name, signed as the daemon signs them
    (net/device_key.py), for a page's window or a broker."""

    def __init__(self, state: Path, device: str, prefix: str = PREFIX) -> None:
        self.device = device
        self.prefix = prefix
        self.key = DeviceKey.in_state_dir(state / device)

    def topic(self, what: str) -> str:
        return f"{self.prefix}/{self.device}/{what}"

    def message(
        self, what: str, body: dict[str, Any], correlation: bytes | None = None
    ) -> tuple[str, bytes, str]:
        """(topic, payload, sig) of `body` published on `what` (`status` announces the key)."""
        if what == "status":
            body = {"device_key": self.key.public, **body}
        topic, payload = self.topic(what), json.dumps(body).encode()
        return topic, payload, self.key.sign(topic, payload, correlation)


def fleet_size(default: int) -> int:
    """How many daemons the big fleet tests start: EDGECLAW_FLEET_SIZE, else `default`."""
    value = os.environ.get("EDGECLAW_FLEET_SIZE", "")
    return int(value) if value.isdigit() and int(value) > 0 else default


def monotonic_ms(start: float) -> float:
    return round((time.monotonic() - start) * 1000, 1)


@contextlib.asynccontextmanager
async def page_on_a_broker(tmp_path: Path, window: Any, client_id: str, **keys: str) -> AsyncIterator[Any]:
    """A fleet page's broker side (FleetBroker) on a mosquitto of its own, connected; (broker, page)."""
    from edgeclaw.fleetpage.broker import FleetBroker
    from edgeclaw.net.mqtt_connection import ConnectionSettings
    from tests.mqtt_support import MOSQUITTO, Mosquitto

    if MOSQUITTO is None:
        pytest.skip("mosquitto is not installed")
    broker = Mosquitto(tmp_path / "broker").start()
    settings = ConnectionSettings(host="127.0.0.1", port=broker.port, client_id=client_id)
    page = FleetBroker(settings, window, server_id="srv1", **keys)
    runner = asyncio.create_task(page.run())
    try:
        assert await page.connection.wait_connected(20)
        yield broker, page
    finally:
        await page.connection.stop(runner)
        broker.stop()


# -- the fleet page ----------------------------------------------------------------------------
PASSWORD = "correct horse battery"
TOKEN = "fleet-token-5b1f0c2e9a"
COMMAND_KEY = "command-key-for-the-fleet"
APPROVER_KEY = "approver-key-for-the-fleet"
ADMIN_KEY = "admin-key-for-the-fleet"  # taken only where a config names EC_ADMIN
KEYS = {"EC_HMAC": COMMAND_KEY, "EC_APPROVER": APPROVER_KEY, "EC_ADMIN": ADMIN_KEY}
WAIT_S = 30.0  # generous: the machine may be busy
FULL_OVER_MQTT = '[tools.channels.mqtt]\nprofile = "full"\n'


@pytest.fixture(scope="module", name="broker")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One mosquitto for a test module's fleet and page: `from tests.fleet_support import
    module_broker` makes it the module's `broker` fixture."""
    from tests.mqtt_support import Mosquitto

    b = Mosquitto(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.stop()


def page_fleet(
    root: Path,
    port: int,
    size: int,
    *,
    groups: dict[int, list[str]] | None = None,
    extra: str = FULL_OVER_MQTT,
    prepare: Callable[[FleetDaemon], None] = lambda daemon: None,
    supervised: bool = False,
    **mqtt: Any,
) -> Fleet:
    """A fleet the page commands, started: each daemon takes the page's command and approver keys
    (KEYS), has `extra` config tables (by default every tool over MQTT) and `mqtt` settings, and is
    handed to `prepare` before it starts."""
    fleet = Fleet(
        root,
        port,
        size,
        groups=groups,
        supervised=supervised,
        hmac_secret_env="EC_HMAC",
        approver_secret_env="EC_APPROVER",
        **mqtt,
    )
    for daemon in fleet.daemons:
        daemon.config.write_text(daemon.config.read_text() + extra)
        daemon.env.update(KEYS)
        prepare(daemon)
    return fleet.start()


def release_file_except(broken: str) -> Callable[[FleetDaemon], None]:
    """`prepare` for `page_fleet`: every workspace but `broken`'s holds release.txt, so a call that
    reads it fails on that one device only (a device made to fail, for rollouts)."""

    def prepare(daemon: FleetDaemon) -> None:
        if daemon.device != broken:
            (daemon.state / "workspace").mkdir(parents=True, exist_ok=True)
            (daemon.state / "workspace" / "release.txt").write_text("release 2\n")

    return prepare


# -- the fleet and the page ------------------------------------------------------------------
class PageServer:
    """`edgeclaw fleet serve` in a child process, on a free loopback port."""

    def __init__(
        self, workdir: Path, broker_port: int, *, login: bool = True, admin: bool = False, **page: Any
    ) -> None:
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
            + ('admin_secret_env = "EC_ADMIN"\n' if admin else "")  # for update rollouts
            + "[fleet_page]\n"
            + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
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

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        """A JSON request as a script sends it (the bearer token): (status, the JSON answer)."""
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        status, _, raw = self.request(method, path, json.dumps(body) if body is not None else b"", headers)
        return status, json.loads(raw)

    def rows(self, state: str = "") -> dict[str, dict[str, Any]]:
        """The device list's rows (in `state`, when given: online, offline, ...), by device."""
        status, body = self.api("GET", f"/api/devices?state={state}&limit=1000")
        assert status == 200, body
        return {row["device"]: row for row in body["rows"]}

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
