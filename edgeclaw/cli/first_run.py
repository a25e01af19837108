"""`edgeclaw try`: the daemon a newcomer can talk to at once, on the terminal it was started from.

`edgeclaw run` stays what systemd needs: a plain foreground daemon that logs
and serves its configured channels. `try` runs the same daemon with three
things added for a person at a terminal:

- the technician console served on this terminal (the same console a serial
  cable gets: banner, prompt, slash commands, approvals), without a login,
  since whoever started it already has this terminal; logging out (Ctrl-D,
  `/exit`) stops the daemon;
- MQTT on a local broker: the configured one (127.0.0.1:1883 by default) when
  something answers there, else a mosquitto started for the session on that
  address and stopped with it, when mosquitto is installed;
- before the console takes over the terminal, the exact `mosquitto_rr` line
  that asks this daemon for an I2C scan from another terminal.

It runs on the sim board unless `--board` says otherwise, keeps its state
apart from an installed daemon's (so it never takes over a service's control
socket or database), and writes its log to a file there: log lines on the
terminal would land in the middle of the console.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import termios
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import IO, Any

from edgeclaw.cli.common import EXIT_REFUSED, config_of
from edgeclaw.config.paths import device_id
from edgeclaw.config.schema import Config
from edgeclaw.errors import EdgeclawError
from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.try")

DEFAULT_BOARD = "sim"
# The calls the newcomer is shown: one I2C scan of the sim board's bus 1, over MQTT and on the console.
SCAN_CALL = {"id": "scan-1", "tool": "i2c", "args": {"action": "scan", "bus": 1}}
CONSOLE_SCAN = '/call i2c {"action": "scan", "bus": 1}'
TRY_SUFFIX = "-try"
BROKER_START_S = 10.0  # how long a mosquitto we start may take to accept connections
PR_SET_PDEATHSIG = 1  # prctl option: a signal for the child when its parent dies


class FirstRunError(EdgeclawError):
    """`edgeclaw try` cannot start: no terminal, a bad broker address, a broker that would not start."""


def try_state_dir(config: Config, environ: Mapping[str, str]) -> Path:
    """The config's state_dir, else $EDGECLAW_STATE_DIR, else ~/.local/state/edgeclaw-try.

    Not the daemon's /var/lib/edgeclaw: a service running on this machine keeps its database and
    control socket to itself.
    """
    if config.state_dir:
        return Path(config.state_dir)
    if environ.get("EDGECLAW_STATE_DIR"):
        return Path(environ["EDGECLAW_STATE_DIR"])
    return Path.home() / ".local" / "state" / "edgeclaw-try"


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets) → (host, port); FirstRunError naming what is wrong."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise FirstRunError(f"--broker {text!r}: expected HOST:PORT, e.g. 127.0.0.1:1883")
    host = host.removeprefix("[").removesuffix("]")
    try:
        port = int(port_text)
    except ValueError:
        raise FirstRunError(f"--broker {text!r}: the port {port_text!r} is not a number") from None
    if not 0 < port < 65536:
        raise FirstRunError(f"--broker {text!r}: the port must be 1-65535, not {port}")
    return host, port


def answers(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def find_mosquitto() -> str | None:
    """The mosquitto program: on PATH, else where Debian puts it (/usr/sbin, not on a user's PATH)."""
    found = shutil.which("mosquitto")
    if found:
        return found
    for candidate in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when we die, even by SIGKILL, so no broker is left behind."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class LocalBroker:
    """A mosquitto of our own on host:port for this session: no persistence, anonymous, loopback only."""

    def __init__(self, program: str, host: str, port: int, workdir: Path) -> None:
        self.program = program
        self.host = host
        self.port = port
        self.workdir = workdir
        self.log_path = workdir / "mosquitto.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, within_s: float = BROKER_START_S) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "mosquitto.conf"
        lines = [f"listener {self.port} {self.host}", "allow_anonymous true", "persistence false",
                 "log_dest stderr", "log_type error", "log_type warning", "log_type notice"]  # fmt: skip
        if os.geteuid() == 0:
            # Started as root mosquitto switches to its own user; nothing here needs that (its log is
            # our file descriptor, it keeps no files), and that user may not exist on every system.
            lines.append("user root")
        conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
        with self.log_path.open("ab") as log_file:
            self.proc = subprocess.Popen(
                [self.program, "-c", str(conf)],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,  # the terminal's Ctrl-C and hang-up are ours to handle, not its
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise FirstRunError(
                    f"mosquitto exited at start ({self.proc.returncode}): {self._last_log_line()}"
                )
            if answers(self.host, self.port, timeout_s=0.2):
                return
            time.sleep(0.05)
        self.stop()
        raise FirstRunError(
            f"mosquitto did not accept connections on {self.host}:{self.port} within {within_s:g} s"
        )

    def _last_log_line(self) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return lines[-1] if lines else "(nothing logged)"

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class BrokerChoice:
    """Where MQTT goes for this session, and what to tell the person about it."""

    host: str | None  # None: MQTT off
    port: int
    note: str
    started: LocalBroker | None = None


def choose_broker(
    address: tuple[str, int],
    *,
    enabled: bool,
    workdir: Path,
    mosquitto: str | None,
) -> BrokerChoice:
    """Use a broker that answers at `address`; else start mosquitto there when it is local and installed."""
    host, port = address
    if not enabled:
        return BrokerChoice(None, port, "MQTT: off (--no-broker).")
    if answers(host, port):
        return BrokerChoice(host, port, f"MQTT: using the broker at {host}:{port}.")
    if not is_loopback(host):
        return BrokerChoice(None, port, f"MQTT: off: no broker answers at {host}:{port}.")
    if mosquitto is None:
        return BrokerChoice(
            None,
            port,
            f"MQTT: off: no broker answers at {host}:{port} and mosquitto is not installed "
            "(sudo apt install mosquitto mosquitto-clients, then start this again).",
        )
    broker = LocalBroker(mosquitto, host, port, workdir)
    broker.start()
    return BrokerChoice(
        host, port, f"MQTT: started mosquitto on {host}:{port} for this session (it stops with it).", broker
    )


def mosquitto_rr_line(host: str, port: int, prefix: str, device: str) -> str:
    """The command that asks this device for an I2C scan over MQTT 5, answered on its own reply topic."""
    return shlex.join([
        "mosquitto_rr", "-V", "5", "-h", host, "-p", str(port),
        "-t", f"{prefix}/{device}/tool/call", "-e", f"reply/{device}/try", "-W", "10",
        "-m", json.dumps(SCAN_CALL, separators=(",", ":")),
    ])  # fmt: skip


def for_this_terminal(config: Config, tty: str, columns: int, broker: BrokerChoice) -> Config:
    """The config `try` runs: the console on this terminal only, no login, MQTT on the chosen broker."""
    console = dataclasses.replace(
        config.console, ports=[tty], login="off", pace=False, width=max(40, columns)
    )
    mqtt = config.mqtt
    if broker.host is None:
        mqtt = dataclasses.replace(mqtt, enabled=False)
    elif broker.started is not None:
        # Our own broker speaks plain MQTT to anyone on loopback: the real broker's TLS and
        # credentials are not for it.
        mqtt = dataclasses.replace(
            mqtt, enabled=True, host=broker.host, port=broker.port, tls=None, username="",
            password_env="", password_file="",
        )  # fmt: skip
    else:
        mqtt = dataclasses.replace(mqtt, enabled=True, host=broker.host, port=broker.port)
    # A device of its own on the broker: on a board whose service runs too, the same id (and client
    # id) would throw the service off the broker and overwrite its retained status.
    mqtt = dataclasses.replace(mqtt, client_id="")
    return dataclasses.replace(config, console=console, mqtt=mqtt, device_id=try_device_id(config))


def try_device_id(config: Config) -> str:
    """The configured device id (else the hostname) with `-try` after it."""
    return f"{device_id(config.device_id)}{TRY_SUFFIX}"


def introduction(config: Config, board: str, state: Path, log_path: Path, broker: BrokerChoice) -> str:
    from edgeclaw import __version__

    device = device_id(config.device_id)
    lines = [
        f"edgeclaw {__version__} try: device {device} on the {board} board; state in {state}",
        f"(log: {log_path}; `edgeclaw run` is the daemon for a service).",
        broker.note,
    ]
    if broker.host is not None:
        lines += [
            "From another terminal, ask it for an I2C scan:",
            "  " + mosquitto_rr_line(broker.host, broker.port, config.mqtt.topic_prefix, device),
        ]
        if shutil.which("mosquitto_rr") is None:
            lines.append("  (mosquitto_rr is in the mosquitto-clients package.)")
    lines += [
        f"The console is on this terminal: try {CONSOLE_SCAN} or /help; Ctrl-D or /exit stops edgeclaw.",
        "",
    ]
    return "\n".join(lines)


def _log_to_file(path: Path, level: str) -> None:
    """Every log line to `path`: the terminal belongs to the console from now on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        level=level.upper(),
        filename=str(path),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )


def run_try(
    config: Config,
    *,
    board: str | None = None,
    broker: str | None = None,
    no_broker: bool = False,
    log_level: str | None = None,
    stdin: IO[str] | None = None,
    out: IO[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run the daemon with the console on this terminal until the person logs out or a signal stops it."""
    stdin = sys.stdin if stdin is None else stdin
    out = sys.stdout if out is None else out
    environ = dict(os.environ if environ is None else environ)
    address = parse_address(broker) if broker else (config.mqtt.host, config.mqtt.port)
    if not stdin.isatty():
        raise FirstRunError(
            "edgeclaw try serves the console on this terminal, and standard input is not one; "
            "start it from a terminal (for a service or a script: edgeclaw run)"
        )
    fd = stdin.fileno()
    tty = os.ttyname(fd)
    board = board or DEFAULT_BOARD
    state = try_state_dir(config, environ)
    choice = choose_broker(
        address, enabled=not no_broker, workdir=state / "mosquitto", mosquitto=find_mosquitto()
    )
    try:
        columns = os.get_terminal_size(fd).columns
    except OSError:
        columns = 80
    run_config = for_this_terminal(config, tty, columns, choice)
    log_path = state / "try.log"
    # The daemon keeps its state here; a service manager's socket and watchdog are not ours to answer.
    environ["EDGECLAW_STATE_DIR"] = str(state)
    for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        environ.pop(key, None)
    try:
        out.write(introduction(run_config, board, state, log_path, choice) + "\n")
        out.flush()
        _log_to_file(log_path, log_level or config.log_level)
        saved = termios.tcgetattr(fd)
        try:
            code = _serve(run_config, board, environ)
        finally:
            # The console left the terminal raw; give the shell its terminal back as it was.
            with contextlib.suppress(termios.error):
                termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    finally:
        if choice.started is not None:
            choice.started.stop()
    with contextlib.suppress(OSError):  # the terminal may be gone (hung up)
        out.write(f"edgeclaw try: stopped (log: {log_path}).\n")
        out.flush()
    return code


def _mqtt_service() -> Any:
    from edgeclaw.daemon.mqtt import mqtt_service  # aiomqtt and paho: only when MQTT is on

    return mqtt_service


def _serve(config: Config, board: str, environ: Mapping[str, str]) -> int:
    from edgeclaw.daemon.console import console_service
    from edgeclaw.daemon.lifecycle import Daemon, configured_services
    from edgeclaw.daemon.runtime import Runtime

    daemon: Daemon | None = None

    def console_on_terminal(runtime: Runtime) -> Any:
        channel = console_service(runtime)
        channel.options = dataclasses.replace(channel.options, end_on_logout=True)
        channel.on_session_end = lambda _path: daemon.request_stop() if daemon is not None else None
        return channel

    @contextlib.asynccontextmanager
    async def mqtt_once_subscribed(runtime: Runtime) -> AsyncIterator[Any]:
        """The MQTT channel, entered once it is subscribed (or has tried for a while): the prompt
        comes after it, and the printed mosquitto_rr line is answered as soon as the prompt shows."""
        from edgeclaw.daemon.mqtt import mqtt_service

        async with mqtt_service(runtime) as channel:
            if not await channel.connection.wait_connected(BROKER_START_S):
                log.warning("not connected to the broker yet; the console starts anyway (MQTT keeps trying)")
            yield channel

    from edgeclaw.daemon import console as console_module

    services: list[Callable[[Runtime], Any]] = []
    for factory in configured_services(config):
        if factory is console_module.console_service:
            factory = console_on_terminal
        elif config.mqtt.enabled and factory is _mqtt_service():
            factory = mqtt_once_subscribed
        services.append(factory)
    daemon = Daemon(config, board=board, services=services, environ=environ)

    async def main() -> int:
        # Closing the terminal window hangs up: stop as for SIGTERM (and stop the broker we started).
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, daemon.request_stop)
        return await daemon.run()

    return asyncio.run(main())


def cmd_try(args: argparse.Namespace) -> int:
    try:
        return run_try(
            config_of(args),
            board=args.board,
            broker=args.broker,
            no_broker=args.no_broker,
            log_level=args.log_level,
        )
    except FirstRunError as e:
        print(f"edgeclaw try: {e}", file=sys.stderr)
        return EXIT_REFUSED
