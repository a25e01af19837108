"""The README's first command as a newcomer runs it: a console prompt here and a broker line that works.

Each test drives the real command in a pseudo-terminal (pexpect), with a real
mosquitto: the one `edgeclaw try` starts, or one the test started. The
`mosquitto_rr` line the command prints is run as printed and must be answered.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from edgeclaw.cli.first_run import (
    BrokerChoice,
    FirstRunError,
    choose_broker,
    for_this_terminal,
    mosquitto_rr_line,
    parse_address,
    try_state_dir,
)
from edgeclaw.config.paths import device_id
from edgeclaw.config.schema import Config
from tests.mqtt_support import NOT_INHERITED, Mosquitto, free_port, needs_mosquitto

ROOT = Path(__file__).resolve().parents[1]
VENV_EDGECLAW = ROOT / ".venv" / "bin" / "edgeclaw"
PROMPT = r"\S+> "  # the console's prompt: "{device}> "
# Generous: the machine may be loaded; the start-up time itself is measured by bench/, not here.
START_S = 60
needs_mosquitto_rr = pytest.mark.skipif(
    shutil.which("mosquitto_rr") is None, reason="mosquitto_rr is not installed (mosquitto-clients)"
)


def readme_first_command() -> list[str]:
    """The first line of the README's set-up block, without its comment."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Set-up", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return shlex.split(block.splitlines()[0], comments=True)


def as_run(argv: list[str]) -> tuple[str, list[str]]:
    """The README's command as a program and its arguments.

    `scripts/edgeclaw` first runs scripts/bootstrap, which reinstalls the virtualenv when
    pyproject.toml is newer than the last install; that is a network install, not the start-up
    under test, so then the same arguments go to the virtualenv's edgeclaw (what the wrapper execs).
    """
    program = ROOT / argv[0]
    stamp = ROOT / ".venv" / ".edgeclaw-installed"
    fresh = stamp.exists() and stamp.stat().st_mtime >= (ROOT / "pyproject.toml").stat().st_mtime
    if argv[0] == "scripts/edgeclaw" and not fresh:
        program = VENV_EDGECLAW
    return str(program), argv[1:]


@pytest.fixture
def try_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(NOT_INHERITED)}
    env["EDGECLAW_STATE_DIR"] = str(tmp_path / "state")
    env["EDGECLAW_CONFIG"] = str(tmp_path / "edgeclaw.toml")
    (tmp_path / "edgeclaw.toml").write_text("", encoding="utf-8")
    return env


def with_broker_port(env: dict[str, str], port: int) -> None:
    """The config's broker address (what `try` uses by default): a free port, never the machine's 1883."""
    Path(env["EDGECLAW_CONFIG"]).write_text(f"[mqtt]\nport = {port}\n", encoding="utf-8")


def spawn(program: str, args: list[str], env: dict[str, str]) -> pexpect.spawn:
    child = pexpect.spawn(
        program, args, env=env, cwd=str(ROOT), encoding="utf-8", timeout=START_S, dimensions=(40, 120)
    )
    child.logfile_read = sys.stdout  # shown by pytest when a test fails
    return child


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(condition, within_s: float = 20.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def printed_rr_line(child: pexpect.spawn) -> list[str]:
    """The mosquitto_rr command as printed before the console's banner, split as a shell would."""
    match = re.search(r"^\s*(mosquitto_rr .*)$", child.before, re.MULTILINE)
    assert match, f"no mosquitto_rr line before the prompt:\n{child.before}"
    return shlex.split(match.group(1))


def assert_scan_answered(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["ok"] is True and answer["tool"] == "i2c"
    # The sim board's parts of its contract: TMP102, 24C32 EEPROM, BME280 (it may carry more).
    assert {"0x48", "0x50", "0x76"} <= set(answer["data"]["addresses"])


@needs_mosquitto
@needs_mosquitto_rr
def test_readme_first_command_gives_a_console_and_a_broker_line_that_is_answered(
    try_env: dict[str, str],
) -> None:
    argv = readme_first_command()
    assert argv[:2] == ["scripts/edgeclaw", "try"]
    port = free_port()
    with_broker_port(try_env, port)
    child = spawn(*as_run(argv), try_env)
    try:
        child.expect(f"started mosquitto on 127.0.0.1:{port}")
        child.expect(PROMPT)
        assert "board sim" in child.before
        rr = printed_rr_line(child)
        # A device of its own: never the id of a service that may run on the same board.
        assert rr[rr.index("-t") + 1] == f"edgeclaw/{device_id()}-try/tool/call"
        assert_scan_answered(rr)
        # The same scan typed at the console's prompt.
        child.sendline('/call i2c {"action": "scan", "bus": 1}')
        child.expect("0x76")
        child.expect(PROMPT)
        # Logging out leaves: the daemon stops, and so does the broker it started.
        child.sendcontrol("d")
        child.expect("edgeclaw try: stopped")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert wait_until(lambda: not answers(port)), "the broker started for the session is still running"
    # The prompt came only once the daemon was subscribed, so the line works as soon as it shows.
    log = (Path(try_env["EDGECLAW_STATE_DIR"]) / "try.log").read_text(encoding="utf-8")
    assert log.index(f"connected to 127.0.0.1:{port}") < log.index(": open at 115200")


@needs_mosquitto
@needs_mosquitto_rr
def test_a_broker_already_running_is_used_and_left_running(try_env: dict[str, str], tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path / "broker").start()
    try:
        child = spawn(str(VENV_EDGECLAW), ["try", "--broker", f"127.0.0.1:{broker.port}"], try_env)
        try:
            child.expect(f"using the broker at 127.0.0.1:{broker.port}")
            child.expect(PROMPT)
            assert_scan_answered(printed_rr_line(child))
            child.sendline("/exit")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        assert child.exitstatus == 0
        assert broker.proc is not None and broker.proc.poll() is None  # not ours to stop
        assert answers(broker.port)
    finally:
        broker.stop()


def test_the_terminal_is_given_back_as_it_was(try_env: dict[str, str]) -> None:
    """The console puts the terminal in raw mode; after `try` the shell's line editing must work again."""
    script = f"{shlex.quote(str(VENV_EDGECLAW))} try --no-broker; echo EXIT=$?; stty -a"
    child = spawn("/bin/bash", ["--norc", "-c", script], try_env)
    try:
        child.expect("MQTT: off")
        child.expect(PROMPT)
        child.sendline("/logout")
        child.expect("EXIT=0")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    settings = child.before.split()
    assert "icanon" in settings and "echo" in settings and "isig" in settings, child.before


@needs_mosquitto
def test_closing_the_terminal_stops_the_daemon_and_its_broker(try_env: dict[str, str]) -> None:
    port = free_port()
    child = spawn(str(VENV_EDGECLAW), ["try", "--broker", f"127.0.0.1:{port}"], try_env)
    try:
        child.expect(PROMPT)
        assert answers(port)
        os.kill(child.pid, signal.SIGHUP)  # what a closed terminal window sends
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert wait_until(lambda: not answers(port))


@needs_mosquitto
def test_a_killed_try_leaves_no_broker_behind(try_env: dict[str, str]) -> None:
    port = free_port()
    child = spawn(str(VENV_EDGECLAW), ["try", "--broker", f"127.0.0.1:{port}"], try_env)
    try:
        child.expect(PROMPT)
        assert answers(port)
        os.kill(child.pid, signal.SIGKILL)  # no chance to clean up: the kernel tells the broker
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert wait_until(lambda: not answers(port)), "mosquitto outlived the edgeclaw that started it"


def test_without_a_terminal_it_says_to_use_run(try_env: dict[str, str]) -> None:
    done = subprocess.run(
        [str(VENV_EDGECLAW), "try", "--no-broker"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=try_env,
        timeout=60,
    )
    assert done.returncode == 2
    assert "not one" in done.stderr and "edgeclaw run" in done.stderr


@pytest.mark.parametrize(
    ("text", "says"),
    [("localhost", "expected HOST:PORT"), ("127.0.0.1:mqtt", "not a number"), ("127.0.0.1:0", "1-65535")],
)
def test_a_bad_broker_address_is_refused_naming_what_is_wrong(
    try_env: dict[str, str], text: str, says: str
) -> None:
    done = subprocess.run(
        [str(VENV_EDGECLAW), "try", "--broker", text],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=try_env,
        timeout=60,
    )
    assert done.returncode == 2
    assert says in done.stderr and text in done.stderr


def test_parse_address_takes_ipv6_in_brackets() -> None:
    assert parse_address("[::1]:1884") == ("::1", 1884)
    with pytest.raises(FirstRunError):
        parse_address(":1883")


def test_without_mosquitto_mqtt_is_off_and_it_says_what_to_install(tmp_path: Path) -> None:
    choice = choose_broker(("127.0.0.1", free_port()), enabled=True, workdir=tmp_path, mosquitto=None)
    assert choice.host is None and choice.started is None
    assert "apt install mosquitto" in choice.note


def test_a_remote_address_with_nothing_there_is_never_started(tmp_path: Path) -> None:
    # 192.0.2.0/24 is reserved for documentation: nothing answers there.
    choice = choose_broker(("192.0.2.1", 1883), enabled=True, workdir=tmp_path, mosquitto="/bin/false")
    assert choice.host is None and choice.started is None
    assert "no broker answers at 192.0.2.1:1883" in choice.note


def test_state_stays_apart_from_an_installed_daemon(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert try_state_dir(Config(), {}) == tmp_path / ".local" / "state" / "edgeclaw-try"
    assert try_state_dir(Config(), {"EDGECLAW_STATE_DIR": "/x"}) == Path("/x")
    assert try_state_dir(Config(state_dir="/y"), {"EDGECLAW_STATE_DIR": "/x"}) == Path("/y")


def test_try_is_a_device_of_its_own_on_the_broker() -> None:
    config = Config(device_id="greenhouse-07")
    config.mqtt.client_id = "greenhouse-07"
    choice = BrokerChoice("127.0.0.1", 1883, "")
    ran = for_this_terminal(config, "/dev/pts/9", 100, choice)
    assert ran.device_id == "greenhouse-07-try" and ran.mqtt.client_id == ""
    assert ran.console.ports == ["/dev/pts/9"] and ran.console.login == "off"
    assert (
        config.device_id == "greenhouse-07" and config.console.ports == []
    )  # the loaded config is untouched


def test_the_broker_line_quotes_what_a_shell_would_split() -> None:
    line = mosquitto_rr_line("127.0.0.1", 1883, "edgeclaw", "lab's-pi")
    argv = shlex.split(line)
    assert argv[argv.index("-t") + 1] == "edgeclaw/lab's-pi/tool/call"
    assert json.loads(argv[argv.index("-m") + 1])["args"] == {"action": "scan", "bus": 1}
