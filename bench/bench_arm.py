"""Start-up and memory on a slow CPU: run inside scripts/arm-smoke's emulated ARM root file system.

Each figure beside its floor, measured the same way in the same run (under qemu-user the emulator
itself is part of every process, so only the ratios compare with a real board):

  * `python3 -c pass` (the floor) and `edgeclaw --version`, wall time, medians;
  * `edgeclaw run --board sim` until READY=1 on $NOTIFY_SOCKET (as systemd hears it): the first start
    (cold: no state directory yet, nothing of edgeclaw's in the page cache from an earlier start) and
    the median of the later ones; with MQTT off, and on against a local mosquitto when one is installed;
  * idle resident memory (VmRSS, the emulator included) of the daemon after READY=1 and a settle time,
    beside an idle `python3` (`python3 -c 'import time; time.sleep(...)'`) measured the same way;
  * as bench_startup.py does on the build machine, the starts also beside the standard-library
    floor F0 (`python3 -c 'import asyncio, sqlite3, ssl, json, socket, logging'`), and the step a start
    must take before READY=1 (the config read and checked, the board profile loaded) beside it too;
  * MQTT on beside F1 (F0 and `import aiomqtt`, the client the channel needs), in time and in idle
    memory (an interpreter that made F1's imports and waits).

Standard library only (the daemon's own dependencies are in its virtualenv). Prints one `arm:` line
a figure and a last `arm: summary` line. Run: python bench/bench_arm.py [--runs N] [--settle S]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from floors import CONFIG_STEP, FLOOR_IMPORTS, MQTT_FLOOR_IMPORTS
from procs import rss_mb, stop

NOT_INHERITED = ("EDGECLAW_", "NOTIFY_SOCKET", "WATCHDOG_", "INVOCATION_ID")
READY_TIMEOUT_S = 180.0  # a cold start under emulation on two shared cores takes seconds, not minutes


def edgeclaw_command() -> list[str]:
    """The console script next to this interpreter (the virtualenv it was installed into)."""
    script = shutil.which("edgeclaw", path=str(Path(sys.executable).parent)) or shutil.which("edgeclaw")
    if script is None:
        raise SystemExit("bench_arm: no edgeclaw command next to this python or on PATH")
    return [script]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(NOT_INHERITED)}
    env.update(extra)
    return env


def wall_s(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=clean_env())
    return time.perf_counter() - started


class Daemon:
    """One daemon's config and state directory; `start` spawns it and waits for READY=1."""

    def __init__(self, root: Path, name: str, mqtt_port: int | None) -> None:
        self.dir = root / name
        self.dir.mkdir(parents=True)
        self.name = name
        mqtt = (
            f'[mqtt]\nenabled = true\nhost = "127.0.0.1"\nport = {mqtt_port}\n'
            if mqtt_port is not None
            else "[mqtt]\nenabled = false\n"
        )
        self.config = self.dir / "edgeclaw.toml"
        self.config.write_text(f'board = "sim"\ndevice_id = "{name}"\nlog_level = "warning"\n{mqtt}')
        self.log = self.dir / "edgeclaw.log"

    def start(self) -> tuple[float, subprocess.Popen[bytes]]:
        notify = self.dir / "notify.sock"
        notify.unlink(missing_ok=True)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(str(notify))
            env = clean_env(
                EDGECLAW_STATE_DIR=str(self.dir / "state"),
                EDGECLAW_CONFIG=str(self.config),
                NOTIFY_SOCKET=str(notify),
            )
            started = time.perf_counter()
            with self.log.open("ab") as log:
                proc = subprocess.Popen(
                    [*edgeclaw_command(), "run", "--board", "sim"], env=env, stdout=log, stderr=log
                )
            deadline = started + READY_TIMEOUT_S
            while True:
                sock.settimeout(max(0.1, deadline - time.perf_counter()))
                try:
                    data = sock.recv(4096)
                except TimeoutError:
                    stop(proc, 30)
                    raise SystemExit(
                        f"bench_arm: {self.name}: no READY=1 within {READY_TIMEOUT_S:g} s; log:\n"
                        + self.log.read_text(errors="replace")
                    ) from None
                if b"READY=1" in data.split(b"\n"):
                    return time.perf_counter() - started, proc


def idle_rss(code: str, settle_s: float) -> float:
    """VmRSS of an interpreter that ran `code` (which must import time) and then waits."""
    idle = subprocess.Popen([sys.executable, "-c", f"{code}; time.sleep(600)"])
    time.sleep(settle_s)
    try:
        return rss_mb(idle.pid)
    finally:
        stop(idle)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mosquitto(root: Path) -> tuple[subprocess.Popen[bytes], int] | None:
    binary = shutil.which("mosquitto") or (
        "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None
    )
    if binary is None:
        return None
    port = free_port()
    conf = root / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.2)
    stop(proc, 30)
    raise SystemExit("bench_arm: mosquitto did not listen within 60 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="timed starts after the first (default 2)")
    parser.add_argument("--settle", type=float, default=5.0, help="idle seconds before RSS is read")
    opts = parser.parse_args()
    if opts.runs < 0:
        parser.error("--runs must be 0 or more")
    where = f"{platform.machine()}, Python {platform.python_version()}"
    print(f"arm: measuring on {where} ({os.cpu_count()} CPUs visible)", flush=True)

    floor_s = statistics.median(wall_s([sys.executable, "-c", "pass"]) for _ in range(3))
    version_s = statistics.median(wall_s([*edgeclaw_command(), "--version"]) for _ in range(3))
    print(f"arm: `python3 -c pass` (floor): {floor_s * 1000:.0f} ms", flush=True)
    print(f"arm: `edgeclaw --version`: {version_s * 1000:.0f} ms = {version_s / floor_s:.2f}x the floor")
    stdlib_s = statistics.median(wall_s([sys.executable, "-c", FLOOR_IMPORTS]) for _ in range(3))
    print(f"arm: `python3 -c '{FLOOR_IMPORTS}'` (stdlib floor): {stdlib_s * 1000:.0f} ms", flush=True)

    mqtt_s = statistics.median(wall_s([sys.executable, "-c", MQTT_FLOOR_IMPORTS]) for _ in range(3))
    print(f"arm: F1 `python3 -c '{MQTT_FLOOR_IMPORTS}'`: {mqtt_s * 1000:.0f} ms", flush=True)
    floor_rss = idle_rss("import time", opts.settle)
    print(f"arm: idle `python3` RSS (floor): {floor_rss:.1f} MiB", flush=True)
    mqtt_rss = idle_rss(MQTT_FLOOR_IMPORTS + "; import time", opts.settle)
    print(f"arm: idle RSS of F1's imports: {mqtt_rss:.1f} MiB", flush=True)

    summary: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-arm-") as tmp:
        root = Path(tmp)
        broker = start_mosquitto(root)
        variants: list[tuple[str, int | None]] = [("mqtt-off", None)]
        if broker is not None:
            variants.append(("mqtt-on", broker[1]))
        else:
            print("arm: no mosquitto in this root file system: the MQTT-on figures are left out")
        try:
            for label, port in variants:
                daemon = Daemon(root, f"arm-{label}", port)
                if port is None:
                    step_cmd = [sys.executable, "-c", CONFIG_STEP, str(daemon.config)]
                    step_s = statistics.median(wall_s(step_cmd) for _ in range(3))
                    print(
                        f"arm: the config read and checked and the board profile loaded: "
                        f"{step_s * 1000:.0f} ms = {step_s / stdlib_s:.2f}x the stdlib floor",
                        flush=True,
                    )
                # The first start is the cold one (no state directory yet); the last start, whichever
                # it is, stays up idle for its memory.
                times = []
                for run in range(1 + opts.runs):
                    elapsed, proc = daemon.start()
                    times.append(elapsed)
                    if run == opts.runs:
                        time.sleep(opts.settle)
                        rss = rss_mb(proc.pid)
                    stop(proc, 30)
                cold_s = times[0]
                if opts.runs:
                    later_s = statistics.median(times[1:])
                    later = f"{later_s:.2f} s = {later_s / stdlib_s:.2f}x the stdlib floor"
                else:
                    later = "not measured (--runs 0)"
                print(
                    f"arm: READY=1 {label}: first start {cold_s:.2f} s = {cold_s / floor_s:.1f}x the floor "
                    f"({cold_s / stdlib_s:.2f}x the stdlib floor), later starts {later}",
                    flush=True,
                )
                print(f"arm: idle RSS {label}: {rss:.1f} MiB = {rss / floor_rss:.2f}x an idle python3")
                summary.append(
                    f"{label} READY=1 {cold_s:.2f} s cold ({cold_s / floor_s:.1f}x), "
                    f"RSS {rss:.1f} MiB ({rss / floor_rss:.2f}x)"
                )
                if port is not None:
                    ready_s = statistics.median(times[1:]) if opts.runs else cold_s
                    print(
                        f"arm: READY=1 mqtt-on {ready_s:.2f} s = {ready_s / mqtt_s:.2f}x F1 "
                        f"({'later starts' if opts.runs else 'the first start'}); idle RSS F1 "
                        f"+ {rss - mqtt_rss:.1f} MiB",
                        flush=True,
                    )
                    summary.append(f"mqtt-on / F1 {ready_s / mqtt_s:.2f}x, RSS F1 + {rss - mqtt_rss:.1f} MiB")
        finally:
            if broker is not None:
                stop(broker[0])
    print(
        f"arm: summary [{platform.machine()}] floor {floor_s * 1000:.0f} ms / {floor_rss:.1f} MiB; "
        f"--version {version_s / floor_s:.2f}x; " + "; ".join(summary),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
