"""Start-up and memory: how fast the daemon serves and how little it holds, each beside its floor.

  * `edgeclaw run --board sim` until it says READY=1 on $NOTIFY_SOCKET (as systemd hears it), with MQTT
    off and with MQTT on (a loopback mosquitto), beside `python -c 'import asyncio, sqlite3, ssl, json,
    socket, logging'` -- the standard library any such daemon needs (target: <= 1.5x). The state
    directory exists (made by an untimed first start), as on every start but the first.
  * `edgeclaw --version` beside `python -c pass` (target: <= 2x).
  * Idle resident memory (VmRSS) of the daemon on the sim board with MQTT up: once its retained status
    says online and it has been idle a few seconds (target: <= 25 MiB); with MQTT off for comparison.
    Beside them, the floors: interpreters that made the floor's imports (with aiomqtt and without)
    and wait, and `python -c pass`.
  * Beside READY=1 with MQTT on, also the floor with the MQTT client imported: what importing
    aiomqtt (paho-mqtt brings urllib.request, http.client and email) costs by itself.
  * Beside READY=1 with MQTT off, the floor with the daemon's first step done: the config read and
    checked and the board profile loaded, which a start must finish before it may say READY=1 (a
    broken config or an unknown profile refuses to start), so no deferring can move it after READY=1.
  * Beside the RSS floors, the MQTT clients imported alone (`import paho.mqtt.client`, `import
    aiomqtt`): most of what the daemon with MQTT up holds before any of its own code.

The package is byte-compiled first, as an installed one is. Times are medians of interleaved
runs (floor, then each variant), so load on the machine hits all alike; 2 shared cores still make
single figures noisy, the ratios less so.

Run: python bench/bench_startup.py [--runs N] [--settle S] [--tree DIR]
Exit status 1 when a target is missed, 2 when mosquitto is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from floors import CONFIG_STEP, FLOOR_IMPORTS, MQTT_FLOOR_IMPORTS  # noqa: E402
from harness import rss_mb, start_broker  # noqa: E402
from procs import stop  # noqa: E402

READY_RATIO_TARGET = 1.5
VERSION_RATIO_TARGET = 2.0
IDLE_RSS_TARGET_MIB = 25.0

NOT_INHERITED = ("EDGECLAW_", "NOTIFY_SOCKET", "WATCHDOG_", "INVOCATION_ID")


# `--tree DIR`: measure the edgeclaw package in another checkout (e.g. an older commit, for a
# before/after figure) as `python -m edgeclaw` with DIR first on the import path.
TREE: Path | None = None


def edgeclaw_command() -> list[str]:
    """The installed console script next to this interpreter, as a user or systemd runs it."""
    if TREE is not None:
        return [sys.executable, "-m", "edgeclaw"]
    script = shutil.which("edgeclaw", path=str(Path(sys.executable).parent)) or shutil.which("edgeclaw")
    return [script] if script else [sys.executable, "-m", "edgeclaw"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(NOT_INHERITED)}
    if TREE is not None:
        env["PYTHONPATH"] = str(TREE)
    env.update(extra)
    return env


def wall_s(cmd: list[str], env: dict[str, str]) -> float:
    return wall_and_cpu_s(cmd, env)[0]


def wall_and_cpu_s(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run of `cmd`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def compile_package() -> None:
    """Byte-compile the measured package first, as `pip install` does: a checkout run with
    PYTHONDONTWRITEBYTECODE (or edited since its last run) would otherwise compile modules from
    source at every start, and the figures would measure the compiler."""
    import compileall

    package = (TREE or HERE.parent) / "edgeclaw"
    if not compileall.compile_dir(str(package), quiet=1):
        raise SystemExit(f"cannot byte-compile {package}")


def cpu_s(pid: int) -> float:
    """CPU time a running process has used so far (/proc/PID/schedstat, nanoseconds on the CPU)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


class DaemonDir:
    """One daemon's config and state directory; each start is timed until READY=1."""

    def __init__(self, root: Path, name: str, mqtt_port: int | None) -> None:
        self.dir = root / name
        self.dir.mkdir(parents=True)
        self.name = name
        self.config = self.dir / "edgeclaw.toml"
        mqtt = (
            f'[mqtt]\nenabled = true\nhost = "127.0.0.1"\nport = {mqtt_port}\n'
            if mqtt_port is not None
            else "[mqtt]\nenabled = false\n"
        )
        self.config.write_text(f'board = "sim"\ndevice_id = "{name}"\nlog_level = "warning"\n{mqtt}')
        self.log = self.dir / "edgeclaw.log"

    def start(self, notify_path: Path) -> tuple[subprocess.Popen[bytes], socket.socket, float]:
        """Spawn the daemon; returns it, its notify socket and the spawn time (perf_counter)."""
        notify_path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(notify_path))
        env = clean_env(
            EDGECLAW_STATE_DIR=str(self.dir / "state"),
            EDGECLAW_CONFIG=str(self.config),
            NOTIFY_SOCKET=str(notify_path),
        )
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [*edgeclaw_command(), "run", "--board", "sim"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
        )
        return proc, sock, t0

    def time_to_ready(
        self, notify_path: Path, keep: bool = False
    ) -> tuple[float, subprocess.Popen[bytes], float]:
        """Wall time from spawn to READY=1, the process, and the CPU time it had used by then."""
        proc, sock, t0 = self.start(notify_path)
        try:
            sock.settimeout(60)
            while True:
                try:
                    data = sock.recv(4096)
                except TimeoutError:
                    stop(proc)
                    log = self.log.read_text()
                    raise SystemExit(f"{self.name}: no READY=1 in 60 s; log:\n{log}") from None
                if b"READY=1" in data.split(b"\n"):
                    elapsed = time.perf_counter() - t0
                    cpu = cpu_s(proc.pid)
                    break
        finally:
            sock.close()
        if not keep:
            stop(proc)
        return elapsed, proc, cpu


async def wait_online(port: int, device: str, timeout_s: float = 60.0) -> None:
    """Until the device's retained status says online: its MQTT channel is connected and serving."""
    import json

    import aiomqtt

    async with aiomqtt.Client("127.0.0.1", port, identifier=f"bench-startup-{os.getpid()}") as client:
        await client.subscribe(f"edgeclaw/{device}/status", qos=1)
        async with asyncio.timeout(timeout_s):
            async for message in client.messages:
                if json.loads(message.payload).get("state") == "online":
                    return


def idle_rss(daemon: DaemonDir, notify_path: Path, port: int | None, settle_s: float) -> float:
    _, proc, _ = daemon.time_to_ready(notify_path, keep=True)
    try:
        if port is not None:
            asyncio.run(wait_online(port, daemon.name))
        time.sleep(settle_s)  # idle: whatever start-up work trails READY is over
        if proc.poll() is not None:
            raise SystemExit(f"{daemon.name} exited; log:\n{daemon.log.read_text()}")
        return rss_mb(proc.pid)
    finally:
        stop(proc)


def floor_rss(imports: str, env: dict[str, str]) -> float:
    """Resident memory of an interpreter that has done `imports` and waits: the RSS floor."""
    code = f"{imports}; import sys, time; print('up', flush=True); time.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n", "the floor did not start"
        return rss_mb(proc.pid)
    finally:
        stop(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="timed starts of each kind")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds idle before reading RSS")
    parser.add_argument("--tree", type=Path, help="measure the edgeclaw package of this checkout instead")
    opts = parser.parse_args()
    global TREE
    TREE = opts.tree.resolve() if opts.tree else None
    if TREE is not None:
        os.chdir(TREE)  # `python -m` puts the working directory first on the import path
    compile_package()
    missed: list[str] = []
    floor_cmd = [sys.executable, "-c", FLOOR_IMPORTS]
    mqtt_floor_cmd = [sys.executable, "-c", MQTT_FLOOR_IMPORTS]

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        root = Path(tmp)
        broker, port = start_broker(root)
        try:
            off = DaemonDir(root, "bench-off", None)
            on = DaemonDir(root, "bench-on", port)
            notify = root / "notify.sock"
            first_off = off.time_to_ready(notify)[0]  # makes the state directory and database
            first_on = on.time_to_ready(notify)[0]
            config_step_cmd = [sys.executable, "-c", CONFIG_STEP, str(off.config)]
            floor, floor_cpu, mqtt_floor, config_step = [], [], [], []
            runs: dict[str, tuple[list[float], list[float]]] = {"MQTT off": ([], []), "MQTT on": ([], [])}
            env = clean_env()
            for _ in range(opts.runs):
                wall, cpu = wall_and_cpu_s(floor_cmd, env)
                floor.append(wall)
                floor_cpu.append(cpu)
                mqtt_floor.append(wall_s(mqtt_floor_cmd, env))
                config_step.append(wall_s(config_step_cmd, env))
                for label, daemon in (("MQTT off", off), ("MQTT on", on)):
                    wall, _, cpu = daemon.time_to_ready(notify)
                    runs[label][0].append(wall)
                    runs[label][1].append(cpu)
            floor_ms = statistics.median(floor) * 1000
            floor_cpu_ms = statistics.median(floor_cpu) * 1000
            print(
                f"READY=1 floor `python -c '{FLOOR_IMPORTS}'`: {floor_ms:.0f} ms ({floor_cpu_ms:.0f} ms CPU)"
            )
            for label, first in (("MQTT off", first_off), ("MQTT on", first_on)):
                ms = statistics.median(runs[label][0]) * 1000
                cpu_ms = statistics.median(runs[label][1]) * 1000
                ratio = ms / floor_ms
                print(
                    f"READY=1 {label}: {ms:.0f} ms = {ratio:.2f}x the floor (target <= "
                    f"{READY_RATIO_TARGET:g}x); CPU {cpu_ms:.0f} ms = {cpu_ms / floor_cpu_ms:.2f}x; "
                    f"first start, state made: {first * 1000:.0f} ms"
                )
                if ratio > READY_RATIO_TARGET:
                    missed.append(f"READY=1 {label}")
            config_step_ms = statistics.median(config_step) * 1000
            print(
                f"  MQTT off beside the floor with the config read and checked and the board profile "
                f"loaded ({config_step_ms:.0f} ms = {config_step_ms / floor_ms:.2f}x the floor)"
            )
            mqtt_floor_ms = statistics.median(mqtt_floor) * 1000
            on_ms = statistics.median(runs["MQTT on"][0]) * 1000
            print(
                f"  MQTT on beside `python -c '{MQTT_FLOOR_IMPORTS}'` ({mqtt_floor_ms:.0f} ms = "
                f"{mqtt_floor_ms / floor_ms:.2f}x the floor): {on_ms / mqtt_floor_ms:.2f}x"
            )

            pass_s, version_s, pass_cpu, version_cpu = [], [], [], []
            version_cmd = [*edgeclaw_command(), "--version"]
            for _ in range(opts.runs * 3):
                wall, cpu = wall_and_cpu_s([sys.executable, "-c", "pass"], env)
                pass_s.append(wall)
                pass_cpu.append(cpu)
                wall, cpu = wall_and_cpu_s(version_cmd, env)
                version_s.append(wall)
                version_cpu.append(cpu)
            pass_ms = statistics.median(pass_s) * 1000
            version_ms = statistics.median(version_s) * 1000
            ratio = version_ms / pass_ms
            cpu_ratio = statistics.median(version_cpu) / statistics.median(pass_cpu)
            print(
                f"--version: `python -c pass` {pass_ms:.1f} ms, `edgeclaw --version` {version_ms:.1f} ms "
                f"= {ratio:.2f}x (target <= {VERSION_RATIO_TARGET:g}x); CPU {cpu_ratio:.2f}x"
            )
            if ratio > VERSION_RATIO_TARGET:
                missed.append("--version")

            rss_on = idle_rss(on, notify, port, opts.settle)
            rss_off = idle_rss(off, notify, None, opts.settle)
            print(
                f"idle RSS, sim board: MQTT up {rss_on:.1f} MiB (target <= {IDLE_RSS_TARGET_MIB:g} MiB), "
                f"MQTT off {rss_off:.1f} MiB"
            )
            print(
                f"  beside the floors' imports, waiting: {floor_rss(MQTT_FLOOR_IMPORTS, env):.1f} MiB with "
                f"aiomqtt, {floor_rss(FLOOR_IMPORTS, env):.1f} MiB without; `python -c pass` "
                f"{floor_rss('pass', env):.1f} MiB"
            )
            paho_mib = floor_rss("import paho.mqtt.client", env)
            print(
                f"  the MQTT clients alone: `import paho.mqtt.client` {paho_mib:.1f} MiB, "
                f"`import aiomqtt` {floor_rss('import aiomqtt', env):.1f} MiB"
            )
            if rss_on > IDLE_RSS_TARGET_MIB:
                missed.append("idle RSS")
        finally:
            broker.terminate()
            broker.wait(10)

    if missed:
        print("missed: " + ", ".join(missed))
        return 1
    print("all targets met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
