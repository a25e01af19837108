"""What the long-running benchmarks share: a loopback mosquitto, `edgeclaw run` daemons as
subprocesses, their resident memory, and an MQTT 5 requester that matches answers by
Correlation Data.

Imported by bench_mqtt.py, bench_soak.py and bench_names.py (run them from the repository root as
`python bench/NAME.py`; this directory is then on the import path).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from procs import rss_mb

ROOT = Path(__file__).resolve().parent.parent
REPLIES = "bench/replies"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.02)
    raise SystemExit(f"nothing listens on port {port} after {timeout_s:g} s")


def start_broker(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A mosquitto on a free loopback port, without persistence. Exit status 2 when not installed."""
    mosquitto = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not Path(mosquitto).exists():
        print("mosquitto is not installed (scripts/bootstrap --system)", file=sys.stderr)
        raise SystemExit(2)
    port = free_port()
    conf = workdir / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nlog_type error\n"
        "set_tcp_nodelay true\nmax_queued_messages 100000\n" + ("user root\n" if os.geteuid() == 0 else "")
    )
    proc = subprocess.Popen(
        [mosquitto, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_port(port)
    return proc, port


@dataclass
class Daemon:
    """One `edgeclaw run --board sim` subprocess with its own state directory and config."""

    device: str
    proc: subprocess.Popen[bytes]
    workdir: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_mb(self) -> float:
        return rss_mb(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    @property
    def log(self) -> str:
        path = self.workdir / "edgeclaw.log"
        return path.read_text(errors="replace") if path.exists() else ""


def start_daemon(
    workdir: Path, port: int, device: str, config: str = "", telemetry_interval_s: int = 60
) -> Daemon:
    """`config` is more TOML appended after the [mqtt] table (its own tables only)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "edgeclaw.toml"
    path.write_text(
        f'board = "sim"\ndevice_id = "{device}"\nlog_level = "warning"\n'
        f"[mqtt]\nenabled = true\nport = {port}\ntelemetry_interval_s = {telemetry_interval_s}\n"
        "inbound_queue = 1024\nmax_concurrent = 64\n" + config
    )
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("EDGECLAW_", "NOTIFY_SOCKET", "WATCHDOG_"))
    }
    env["EDGECLAW_STATE_DIR"] = str(workdir / "state")
    env["EDGECLAW_CONFIG"] = str(path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgeclaw", "run", "--board", "sim"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "edgeclaw.log").open("wb"),
    )
    return Daemon(device, proc, workdir)


def tools_config(**keys: object) -> str:
    """A [tools] table that only names keys this version's schema has (so a bench runs on older trees)."""
    from edgeclaw.config.schema import ToolsConfig

    known = ToolsConfig.__dataclass_fields__
    lines = [f"{k} = {json.dumps(v)}" for k, v in keys.items() if k in known]
    return "[tools]\n" + "".join(line + "\n" for line in lines)


def slope_mb_per_h(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) samples, in MiB per hour."""
    n = len(samples)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in samples) / n
    mean_m = sum(m for _, m in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (m - mean_m) for t, m in samples)
    return cov / var * 3600.0


class Requester:
    """A backend: publishes requests with a Response Topic and matches answers by Correlation Data."""

    def __init__(self, client: aiomqtt.Client, tag: str) -> None:
        self.client = client
        self.tag = tag
        self.waiting: dict[bytes, asyncio.Future[bytes]] = {}
        self.online: set[str] = set()
        self._seq = 0

    async def listen(self) -> None:
        async for message in self.client.messages:
            topic = message.topic.value
            if topic.endswith("/status"):
                state = json.loads(message.payload).get("state")
                device = topic.split("/")[-2]
                if state == "online":
                    self.online.add(device)
                else:
                    self.online.discard(device)
                continue
            props = message.properties
            corr = getattr(props, "CorrelationData", None) if props is not None else None
            fut = self.waiting.pop(corr, None) if corr is not None else None
            if fut is not None and not fut.done():
                fut.set_result(message.payload)

    async def wait_online(self, device: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while device not in self.online:
            if time.monotonic() > deadline:
                raise SystemExit(f"device {device} did not come online")
            await asyncio.sleep(0.05)

    async def request(self, topic: str, payload: dict[str, object], timeout_s: float = 30.0) -> dict:
        self._seq += 1
        corr = f"{self.tag}-{self._seq}".encode()
        props = Properties(PacketTypes.PUBLISH)
        props.ResponseTopic = f"{REPLIES}/{self.tag}"
        props.CorrelationData = corr
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.waiting[corr] = fut
        try:
            await self.client.publish(topic, json.dumps(payload).encode(), qos=1, properties=props)
            return json.loads(await asyncio.wait_for(fut, timeout_s))
        finally:
            self.waiting.pop(corr, None)


@contextlib.asynccontextmanager
async def requester(port: int, tag: str, devices: list[str]):
    async with aiomqtt.Client(
        "127.0.0.1", port, protocol=aiomqtt.ProtocolVersion.V5, identifier=f"bench-{tag}-{os.getpid()}"
    ) as client:
        client.pending_calls_threshold = 1 << 30
        await client.subscribe(f"{REPLIES}/{tag}", qos=1)
        for device in devices:
            await client.subscribe(f"edgeclaw/{device}/status", qos=1)
        req = Requester(client, tag)
        listener = asyncio.create_task(req.listen())
        try:
            for device in devices:
                await req.wait_online(device)
            yield req
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
