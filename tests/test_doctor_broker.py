"""`edgeclaw doctor`'s broker check -- a real MQTT CONNECT with the configured credentials,
reporting the broker's CONNACK reason code -- against a mosquitto with a password file, a TCP port
that is not MQTT, and a password variable that is not set; and the reason code the daemon's own
connection keeps."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeclaw.net.mqtt_connection import BrokerError, Connection, ConnectionSettings, ReconnectBackoff
from tests.mqtt_support import Mosquitto, needs_mosquitto, poll

pytestmark = needs_mosquitto


@pytest.fixture
def guarded_broker(tmp_path: Path) -> Iterator[Mosquitto]:
    """mosquitto that lets in only user `device` with password `right-password`."""
    passwd = shutil.which("mosquitto_passwd")
    if passwd is None:
        pytest.skip("mosquitto_passwd is not installed")
    work = tmp_path / "broker"
    work.mkdir()
    subprocess.run([passwd, "-b", "-c", str(work / "passwd"), "device", "right-password"], check=True)
    broker = Mosquitto(work, extra_conf=f"allow_anonymous false\npassword_file {work / 'passwd'}\n")
    # The password file replaces the default anonymous access (the later line wins).
    broker.start()
    yield broker
    broker.kill()


def write_config(state_env: dict[str, str], port: int, *, protocol: str = "5", **extra: str) -> None:
    lines = ['board = "sim"', "[mqtt]", "enabled = true", f"port = {port}", f'protocol = "{protocol}"']
    lines += [f'{k} = "{v}"' for k, v in extra.items()]
    Path(state_env["EDGECLAW_CONFIG"]).write_text("\n".join(lines) + "\n")


def broker_line(out: subprocess.CompletedProcess[str]) -> str:
    [line] = [line for line in out.stdout.splitlines() if "mqtt broker:" in line]
    return line


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
def test_a_wrong_password_is_named_by_the_brokers_reason_code(run_cli, state_env, guarded_broker, protocol):
    env = {**state_env, "BROKER_PASSWORD": "wrong-password"}
    write_config(
        state_env, guarded_broker.port, protocol=protocol, username="device", password_env="BROKER_PASSWORD"
    )
    out = run_cli("doctor", env=env)
    line = broker_line(out)
    assert line.startswith("FAIL") and out.returncode == 1, out.stdout
    assert "refused the connection" in line and "user 'device'" in line
    # mosquitto refuses a bad password with "Not authorized" (135; MQTT 3.1.1's return code 5 maps to it).
    assert "CONNACK reason code 135 'Not authorized'" in line, line

    env["BROKER_PASSWORD"] = "right-password"
    line = broker_line(run_cli("doctor", env=env))
    assert line.startswith("ok") and "accepted the connection" in line and "reason code 0" in line, line


def test_a_port_that_is_not_mqtt_is_not_ok(run_cli, state_env):
    # Something that accepts TCP connections and answers like a web server.
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        write_config(state_env, port)
        out = run_cli("doctor")
    finally:
        # The thread ends before the socket closes: left in accept() past the close, it went on
        # answering (400) connections made to the next tests' servers.
        stop.set()
        thread.join(5)
        server.close()
    line = broker_line(out)
    assert line.startswith("FAIL") and out.returncode == 1, out.stdout
    assert f"no MQTT answer (CONNACK) from 127.0.0.1:{port}" in line and "MQTT broker" in line


def test_an_unset_password_variable_is_named(run_cli, state_env, guarded_broker):
    env = {k: v for k, v in state_env.items() if k != "EDGECLAW_TEST_UNSET_PASSWORD"}
    write_config(
        state_env, guarded_broker.port, username="device", password_env="EDGECLAW_TEST_UNSET_PASSWORD"
    )
    line = broker_line(run_cli("doctor", env=env))
    assert line.startswith("FAIL")
    assert "mqtt.password_env" in line and "EDGECLAW_TEST_UNSET_PASSWORD is not set" in line, line


async def test_the_daemons_connection_keeps_the_brokers_reason_code(guarded_broker):
    conn = Connection(
        ConnectionSettings(
            "127.0.0.1", guarded_broker.port, "reason-test", username="device", password="wrong-password"
        ),
        lambda message: None,
        backoff=ReconnectBackoff(first_s=0.05, cap_s=0.1),
    )
    conn.open()
    task = asyncio.create_task(conn.run())
    try:
        error = await poll(lambda: conn.last_error, 10, "the refusal")
    finally:
        task.cancel()
        await asyncio.wait((task,))
    assert isinstance(error, BrokerError)
    assert (error.reason_code, error.reason_name) == (135, "Not authorized")
    assert "reason code 135: Not authorized" in str(error)
