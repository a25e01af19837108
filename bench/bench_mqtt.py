"""MQTT benchmark: tool/call round trip and sustained rate, beside a raw aiomqtt echo responder.

One mosquitto on loopback, two responders measured in the same run against it:
  * a raw aiomqtt echo responder (a subprocess: subscribe, publish the payload back to the
    Response Topic with the Correlation Data) -- the floor any MQTT responder in Python pays;
  * `edgeclaw run --board sim` (a subprocess) answering `tool/call` with a cheap hardware read
    (`i2c` read_word of the sim TMP102), through the whole path: signature-free parse, request
    ledger (SQLite), admission, registry (schema, policy, rate limit, scrub, audit), answer and
    audit event published with QoS 1.
The requester sends QoS 1 requests with a Response Topic and Correlation Data.

Figures: round trip p50/p99 (one request at a time) and sustained calls/s (a window of
requests in flight), with every answer checked, and the daemon's CPU time per call in the
sustained run (comparable across runs on a busy machine, where the wall-clock figures are not).
Targets: edgeclaw p50 <= 1.5x the echo's
p50; >= 500 calls/s with none lost.

Run: python bench/bench_mqtt.py [--calls N] [--rate-calls N] [--window W]
Exit status 1 when a target is missed (2 when mosquitto is missing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import harness
from harness import REPLIES, ROOT

P50_RATIO_TARGET = 1.5
RATE_TARGET = 500.0
DEVICE = "bench"
ECHO_TOPIC = "bench/echo"
# Every party (and the broker, set_tcp_nodelay) sends small messages at once, as edgeclaw does.
NODELAY = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),)


def event_loop_runner() -> asyncio.Runner:
    """uvloop when installed, as `edgeclaw run` uses it: the same loop for every party."""
    try:
        import uvloop

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        return asyncio.Runner()


# -- the raw echo responder (runs as a subprocess of this script) ------------------------------
async def echo_responder(port: int) -> None:
    async with aiomqtt.Client(
        "127.0.0.1", port, protocol=aiomqtt.ProtocolVersion.V5, socket_options=NODELAY
    ) as client:
        client.pending_calls_threshold = 1 << 30
        await client.subscribe(ECHO_TOPIC, qos=1)
        print("ready", flush=True)
        pending: set[asyncio.Task[None]] = set()
        async for message in client.messages:
            props = message.properties
            reply_to = getattr(props, "ResponseTopic", None)
            if reply_to is None:
                continue
            out = Properties(PacketTypes.PUBLISH)
            out.CorrelationData = getattr(props, "CorrelationData", b"")
            task = asyncio.create_task(client.publish(reply_to, message.payload, qos=1, properties=out))
            pending.add(task)
            task.add_done_callback(pending.discard)


# -- the requester ---------------------------------------------------------------------------
class Requester:
    def __init__(self, client: aiomqtt.Client) -> None:
        self.client = client
        self.waiting: dict[bytes, asyncio.Future[bytes]] = {}
        self.device_online = asyncio.Event()
        self._seq = 0

    async def listen(self) -> None:
        async for message in self.client.messages:
            if message.topic.value.endswith("/status"):
                if json.loads(message.payload).get("state") == "online":
                    self.device_online.set()
                continue
            props = message.properties
            corr = getattr(props, "CorrelationData", None) if props is not None else None
            fut = self.waiting.pop(corr, None) if corr is not None else None
            if fut is not None and not fut.done():
                fut.set_result(message.payload)

    async def request(self, topic: str, payload: bytes, timeout_s: float = 10.0) -> bytes:
        self._seq += 1
        corr = self._seq.to_bytes(8, "big")
        props = Properties(PacketTypes.PUBLISH)
        props.ResponseTopic = f"{REPLIES}/r"
        props.CorrelationData = corr
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.waiting[corr] = fut
        try:
            await self.client.publish(topic, payload, qos=1, properties=props)
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self.waiting.pop(corr, None)


async def round_trips(req: Requester, topic: str, make: Callable[[int], bytes], calls: int) -> list[float]:
    times: list[float] = []
    for i in range(calls):
        payload = make(i)
        started = time.perf_counter()
        await req.request(topic, payload)
        times.append((time.perf_counter() - started) * 1000.0)
    return times


async def sustained(
    req: Requester,
    topic: str,
    make: Callable[[int], bytes],
    calls: int,
    window: int,
    check: Callable[[bytes], bool],
) -> tuple[float, int, int]:
    """(calls per second, answered and checked ok, lost)."""
    slots = asyncio.Semaphore(window)
    good = 0
    lost = 0

    async def one(i: int) -> None:
        nonlocal good, lost
        try:
            answer = await req.request(topic, make(i), timeout_s=30.0)
        except (TimeoutError, aiomqtt.MqttError):
            lost += 1
        else:
            good += check(answer)
        finally:
            slots.release()

    tasks = []
    started = time.perf_counter()
    for i in range(calls):
        await slots.acquire()
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    return calls / elapsed, good, lost


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(port: int, args: argparse.Namespace, edge_pid: int) -> dict[str, float]:
    tool_topic = f"edgeclaw/{DEVICE}/tool/call"
    run_id = os.getpid()

    def tool_call(i: int) -> bytes:
        return json.dumps(
            {
                "id": f"{run_id}-{i}-{time.monotonic_ns()}",
                "tool": "i2c",
                "args": {"action": "read_word", "bus": 1, "address": 72, "register": 0},
            }
        ).encode()

    def echo_payload(i: int) -> bytes:
        return tool_call(i)

    def ok(answer: bytes) -> bool:
        return bool(json.loads(answer).get("ok"))

    results: dict[str, float] = {}
    async with aiomqtt.Client(
        "127.0.0.1",
        port,
        protocol=aiomqtt.ProtocolVersion.V5,
        identifier=f"bench-requester-{run_id}",
        socket_options=NODELAY,
    ) as client:
        client.pending_calls_threshold = 1 << 30
        await client.subscribe(f"{REPLIES}/#", qos=1)
        await client.subscribe(f"edgeclaw/{DEVICE}/status", qos=1)
        req = Requester(client)
        listener = asyncio.create_task(req.listen())
        try:
            await asyncio.wait_for(req.device_online.wait(), 30)
            first = json.loads(await req.request(tool_topic, tool_call(0), timeout_s=30.0))
            if not first.get("ok"):
                raise SystemExit(f"the tool call failed: {first}")
            # Warm both paths, then interleave the measurements so drift hits both alike.
            await round_trips(req, ECHO_TOPIC, echo_payload, 200)
            await round_trips(req, tool_topic, tool_call, 200)
            echo_t: list[float] = []
            edge_t: list[float] = []
            chunk = max(1, args.calls // 5)
            for _ in range(5):
                echo_t += await round_trips(req, ECHO_TOPIC, echo_payload, chunk)
                edge_t += await round_trips(req, tool_topic, tool_call, chunk)
            results["echo_p50"], results["echo_p99"] = pct(echo_t, 0.5), pct(echo_t, 0.99)
            results["edge_p50"], results["edge_p99"] = pct(edge_t, 0.5), pct(edge_t, 0.99)
            results["samples"] = len(edge_t)
            rate, good, lost = await sustained(
                req, ECHO_TOPIC, echo_payload, args.rate_calls, args.window, lambda a: True
            )
            results["echo_rate"], results["echo_lost"] = rate, lost
            # CPU time per call stays meaningful on a loaded machine, where wall-clock rates do not.
            cpu_before = cpu_seconds(edge_pid)
            rate, good, lost = await sustained(req, tool_topic, tool_call, args.rate_calls, args.window, ok)
            results["edge_cpu_ms"] = (cpu_seconds(edge_pid) - cpu_before) * 1000 / args.rate_calls
            results["edge_rate"], results["edge_good"], results["edge_lost"] = rate, good, lost
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000, help="round trips measured per responder")
    parser.add_argument("--rate-calls", type=int, default=5000, help="calls in the sustained-rate run")
    parser.add_argument("--window", type=int, default=64, help="requests in flight in the sustained-rate run")
    parser.add_argument("--echo-responder", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_responder:
        with event_loop_runner() as runner:
            runner.run(echo_responder(args.echo_responder))
        return 0

    with tempfile.TemporaryDirectory(prefix="bench-mqtt-") as tmp:
        workdir = Path(tmp)
        broker, port = harness.start_broker(workdir)
        echo = subprocess.Popen(
            [sys.executable, __file__, "--echo-responder", str(port)], stdout=subprocess.PIPE, cwd=ROOT
        )
        # No rate limit and no telemetry: every call measured is answered, and nothing else is sent.
        edge = harness.start_daemon(
            workdir, port, DEVICE, "[tools]\nrate_limit = 0\n", telemetry_interval_s=0
        )
        try:
            assert echo.stdout is not None
            if echo.stdout.readline().strip() != b"ready":
                raise SystemExit("the echo responder did not start")
            with event_loop_runner() as runner:
                r = runner.run(measure(port, args, edge.pid))
        finally:
            for proc in (edge.proc, echo, broker):
                proc.terminate()
            for proc in (edge.proc, echo, broker):
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()

    ratio = r["edge_p50"] / r["echo_p50"]
    print(f"tool/call round trip over MQTT 5 QoS 1, loopback mosquitto ({int(r['samples'])} calls each)")
    print(f"  raw aiomqtt echo     p50 {r['echo_p50']:7.3f} ms   p99 {r['echo_p99']:7.3f} ms")
    print(f"  edgeclaw i2c read    p50 {r['edge_p50']:7.3f} ms   p99 {r['edge_p99']:7.3f} ms")
    print(f"  p50 ratio            {ratio:.2f}x   (target <= {P50_RATIO_TARGET}x)")
    print(f"sustained rate, {args.rate_calls} calls, {args.window} in flight")
    print(f"  raw aiomqtt echo     {r['echo_rate']:8.0f} calls/s   lost {int(r['echo_lost'])}")
    print(
        f"  edgeclaw i2c read    {r['edge_rate']:8.0f} calls/s   lost {int(r['edge_lost'])}, "
        f"ok {int(r['edge_good'])}/{args.rate_calls}   (target >= {RATE_TARGET:.0f}/s, none lost)"
    )
    print(f"  edgeclaw daemon CPU  {r['edge_cpu_ms']:8.3f} ms per call (user + system)")
    missed = []
    if ratio > P50_RATIO_TARGET:
        missed.append("p50 ratio")
    if r["edge_rate"] < RATE_TARGET:
        missed.append("calls/s")
    if r["edge_lost"] or r["edge_good"] != args.rate_calls:
        missed.append("lost or failed calls")
    if missed:
        print("targets missed: " + ", ".join(missed))
        return 1
    print("all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
