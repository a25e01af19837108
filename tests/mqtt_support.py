"""A real mosquitto on a free loopback port, and a test-side MQTT 5 caller.

`Mosquitto` writes its own config in a temporary directory, so tests can kill
it (SIGKILL), restart it on the same port and find it empty again (no
persistence) -- or with persistence, when a test asks. `Caller` is what a
fleet backend would be: it publishes commands with a Response Topic and
Correlation Data, collects everything it receives, and reconnects by itself
when the broker comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

MOSQUITTO = shutil.which("mosquitto") or (
    "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None
)

needs_mosquitto = pytest.mark.skipif(
    MOSQUITTO is None, reason="mosquitto is not installed (scripts/bootstrap --system installs it)"
)


# What a daemon a test starts must not inherit from whoever runs the tests: their config and state,
# and a service manager's socket, watchdog and unit it would answer to.
NOT_INHERITED = ("EDGECLAW_", "NOTIFY_SOCKET", "WATCHDOG_", "INVOCATION_ID")


def daemon_env(state: Path, config: Path, **extra: str) -> dict[str, str]:
    """The environment of an `edgeclaw run` that keeps its state in `state` and reads `config`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(NOT_INHERITED)}
    env.update(EDGECLAW_STATE_DIR=str(state), EDGECLAW_CONFIG=str(config), **extra)
    return env


def run_daemon(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    """`edgeclaw run ARGS` in the background, its log appended to `log`."""
    return subprocess.Popen(
        [sys.executable, "-m", "edgeclaw", "run", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )


def stop_daemon(proc: subprocess.Popen[bytes] | None, within_s: float = 20.0) -> None:
    """SIGTERM, and SIGKILL when it has not exited within `within_s`."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(within_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_password_file(path: Path, users: dict[str, str]) -> Path:
    """A mosquitto password file made by `mosquitto_passwd` (salted hashes), one line per user."""
    tool = shutil.which("mosquitto_passwd")
    if tool is None:
        pytest.skip("mosquitto_passwd is not installed")
    path.unlink(missing_ok=True)
    for user, password in users.items():
        subprocess.run(
            [tool, "-b", *(() if path.exists() else ("-c",)), str(path), user, password], check=True
        )
    return path


class Mosquitto:
    def __init__(
        self,
        workdir: Path,
        *,
        extra_conf: str = "",
        persistent: bool = False,
        password_file: Path | None = None,
        acl_file: Path | None = None,
    ) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        # With a password file nobody gets in without logging in (the later allow_anonymous wins);
        # with an ACL file each user reads and writes only what it grants.
        logins = f"allow_anonymous false\npassword_file {password_file}\n" if password_file else ""
        logins += f"acl_file {acl_file}\n" if acl_file else ""
        self.extra_conf = extra_conf + logins
        # With persistence the broker keeps sessions and queued messages across a SIGKILL, as far
        # as it saved them: after every change (autosave_on_changes with an interval of 1), which
        # leaves only what it took in during its last loop turn to lose.
        self.persistent = persistent
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> str:
        path = self.workdir / "mosquitto.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self) -> Mosquitto:
        conf = self.workdir / "mosquitto.conf"
        conf.write_text(
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous true\n"
            + (
                f"persistence true\npersistence_location {self.workdir}/\n"
                "autosave_on_changes true\nautosave_interval 1\n"
                if self.persistent
                else "persistence false\n"
            )
            + f"log_dest file {self.workdir / 'mosquitto.log'}\n"
            "log_type error\nlog_type warning\nlog_type notice\n"
            "max_queued_messages 10000\n" + ("user root\n" if os.geteuid() == 0 else "") + self.extra_conf
            # Started as root, mosquitto switches to its own user, which cannot read pytest's
            # private tmp dirs (the log, test certificates): stay root there.
        )
        assert MOSQUITTO is not None
        self.proc = subprocess.Popen(
            [MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"mosquitto exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                return self
            time.sleep(0.02)
        raise RuntimeError("mosquitto did not start listening")

    def kill(self) -> None:
        """SIGKILL: no goodbye to anyone, every session and retained message gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


@dataclass
class Received:
    topic: str
    payload: bytes
    correlation: bytes | None
    retain: bool
    at: float
    user: list[tuple[str, str]] = field(default_factory=list)  # the MQTT 5 user properties
    response_topic: str | None = None

    @property
    def json(self) -> Any:
        return json.loads(self.payload)


def request_properties(
    response_topic: str | None = None,
    correlation: bytes | None = None,
    user: Iterable[tuple[str, str]] = (),
    expiry_s: int | None = None,
) -> Properties | None:
    props = Properties(PacketTypes.PUBLISH)
    used = False
    if response_topic is not None:
        props.ResponseTopic = response_topic
        used = True
    if correlation is not None:
        props.CorrelationData = correlation
        used = True
    for name, value in user:
        props.UserProperty = (name, value)
        used = True
    if expiry_s is not None:
        props.MessageExpiryInterval = expiry_s
        used = True
    return props if used else None


class Caller:
    """A test-side client that survives broker restarts. Use as `async with Caller(port, [topics])`."""

    def __init__(
        self,
        port: int,
        subscriptions: list[str],
        *,
        client_id: str = "",
        v5: bool = True,
        tls: aiomqtt.TLSParameters | None = None,
        session_expiry_s: int = 0,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        self.port = port
        self.username = username
        self.password = password
        self.tls = tls
        # > 0: a persistent session (MQTT 5), so the broker queues answers while we are away.
        self.session_expiry_s = session_expiry_s
        self.subscriptions = subscriptions
        self.client_id = client_id or f"caller-{os.getpid()}-{id(self)}"
        self.v5 = v5
        self.received: list[Received] = []
        self.connected = asyncio.Event()
        self._client: aiomqtt.Client | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Caller:
        self._client = aiomqtt.Client(
            "127.0.0.1",
            self.port,
            identifier=self.client_id,
            protocol=aiomqtt.ProtocolVersion.V5 if self.v5 else aiomqtt.ProtocolVersion.V311,
            timeout=30,
            tls_params=self.tls,
            username=self.username,
            password=self.password,
            properties=self._connect_properties(),
        )
        self._client.pending_calls_threshold = 1 << 30
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(self.connected.wait(), 10)
        return self

    def _connect_properties(self) -> Properties | None:
        if not (self.v5 and self.session_expiry_s):
            return None
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = self.session_expiry_s
        return props

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.wait((self._task,))

    async def _run(self) -> None:
        assert self._client is not None
        while True:
            try:
                async with self._client as client:
                    for topic in self.subscriptions:
                        await client.subscribe(topic, qos=1)
                    self.connected.set()
                    async for m in client.messages:
                        props = m.properties
                        corr = getattr(props, "CorrelationData", None) if props is not None else None
                        payload = m.payload if isinstance(m.payload, bytes) else str(m.payload).encode()
                        user = list(getattr(props, "UserProperty", None) or []) if props is not None else []
                        reply = getattr(props, "ResponseTopic", None) if props is not None else None
                        self.received.append(
                            Received(m.topic.value, payload, corr, m.retain, time.monotonic(), user, reply)
                        )
            except aiomqtt.MqttError:
                pass
            self.connected.clear()
            await asyncio.sleep(0.2)

    async def publish(
        self,
        topic: str,
        payload: bytes | str | dict[str, Any],
        *,
        response_topic: str | None = None,
        correlation: bytes | None = None,
        user: Iterable[tuple[str, str]] = (),
        retain: bool = False,
        qos: int = 1,
        expiry_s: int | None = None,
    ) -> None:
        assert self._client is not None
        if isinstance(payload, dict):
            payload = json.dumps(payload)
        props = request_properties(response_topic, correlation, user, expiry_s) if self.v5 else None
        await self._client.publish(topic, payload, qos=qos, retain=retain, properties=props)

    def on(self, topic: str) -> list[Received]:
        return [r for r in self.received if r.topic == topic]

    async def wait_for(
        self, condition: Callable[[], Any], within: float = 20.0, what: str = "a condition"
    ) -> Any:
        """`poll`, as a method so a test reads `await c.wait_for(...)` beside `c.answers(...)`."""
        return await poll(condition, within, what)

    async def answers(self, topic: str, count: int, within: float = 20.0) -> list[Received]:
        return await self.wait_for(
            lambda: self.on(topic) if len(self.on(topic)) >= count else None,
            within,
            f"{count} message(s) on {topic}",
        )


async def poll(condition: Callable[[], Any], within: float = 20.0, what: str = "a condition") -> Any:
    """Poll until `condition()` is truthy; returns its value."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:g} s waiting for {what}")
        await asyncio.sleep(0.02)


OPENSSL = shutil.which("openssl")


def make_certificates(directory: Path) -> dict[str, Path]:
    """A throw-away CA, a server certificate for 127.0.0.1 and a client certificate (EC keys: fast)."""
    assert OPENSSL is not None
    directory.mkdir(parents=True, exist_ok=True)
    d = directory

    def run(*args: str) -> None:
        subprocess.run([OPENSSL, *args], check=True, capture_output=True, cwd=d)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=edgeclaw-test-ca",
    )
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        extra = ["-extfile", "server.ext"] if name == "server" else []
        run(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.crt",
            "-days",
            "2",
            *extra,
        )
    return {n: d / n for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}
