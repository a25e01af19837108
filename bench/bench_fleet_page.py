"""Fleet page benchmark: N devices on a broker, the page's memory, list latency, stream and load.

  * A real mosquitto on loopback. Simulated devices (paho, over `--connections` connections) leave
    their retained `status` and `health` (the shapes of docs/mqtt.md), then, for `--live` seconds,
    publish health at the real rate (each device every `--health-s`, default 60 s: 167 messages a
    second at 10,000 devices) times `--speed`, and an event every `--event-s` per device.
  * `edgeclaw fleet serve` against it (history in SQLite in its state dir). Measured: the time from
    its start to holding all N devices; its resident memory then and after the live phase; the p95
    latency of `GET /api/devices` (pages of 100, assorted sorts, searches and offsets, asked
    while the live messages flow); and what the page's view lost: an event-stream reader (as a
    browser's) must end with every device's last published health and every published event, and
    `/api/state` with every device's last health.
  * The page's load in headless Chromium (Selenium, `--browser`): first contentful paint (the
    Paint Timing API) and the time until the first rows of the list are drawn, after a login.

Run: python bench/bench_fleet_page.py [--curve 100,1000,5000,10000] [--live S] [--browser]
(2 cores shared with other work make timings noisy: compare the figures of one run.)
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.mqtt_support import Mosquitto, free_port  # noqa: E402

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TOKEN = "bench-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def status(device: str, i: int) -> dict[str, object]:
    return {
        "state": "online", "version": "0.1.0", "board": "sim", "device": device, "since": time.time(),
        "groups": ["north" if i % 2 else "south"], "hostname": device,
        "addresses": [f"10.0.{i // 250}.{i % 250}"], "os": "Debian GNU/Linux 12 (bookworm)",
        "kernel": "Linux 6.6.51", "machine": "aarch64", "python": "3.11.2",
        "config_hash": "sha256:3f9a0c1d2b4e5f60", "firmware": {"esp32": None, "probe": None},
        "sandbox": {"configured": "auto", "in_force": "firejail"}, "providers": {}, "ts": time.time(),
    }  # fmt: skip


def health(device: str, i: int) -> dict[str, object]:
    return {
        "ts": time.time(), "board": "sim", "version": "0.1.0", "uptime_s": 3600.0, "cpu_temp_c": 40 + i % 20,
        "load_1m": 0.2 + (i % 7) / 10, "mem_used_pct": 20.0 + i % 30, "outbox_depth": i % 3,
        "tool_calls": i, "tool_errors": 0, "device": device,
    }  # fmt: skip


class Fleet:
    """The simulated devices: paho clients on a few connections, publishing at QoS 1."""

    def __init__(self, port: int, devices: list[str], connections: int) -> None:
        import paho.mqtt.client as mqtt

        self.devices = devices
        self.clients = []
        for n in range(connections):
            c = mqtt.Client(
                mqtt.CallbackAPIVersion.VERSION2, client_id=f"bench-fleet-{n}", protocol=mqtt.MQTTv5
            )
            c.max_inflight_messages_set(1000)
            c.max_queued_messages_set(0)
            c.connect("127.0.0.1", port)
            c.loop_start()
            self.clients.append(c)
        self.last_health: dict[str, float] = {}
        self.events = 0

    def publish(self, i: int, what: str, data: dict[str, object], retain: bool = False) -> Any:
        client = self.clients[i % len(self.clients)]
        return client.publish(f"edgeclaw/{self.devices[i]}/{what}", json.dumps(data), qos=1, retain=retain)

    def retained(self) -> None:
        last = None
        for i, d in enumerate(self.devices):
            self.publish(i, "status", status(d, i), retain=True)
            h = health(d, i)
            last = self.publish(i, "health", h, retain=True)
            self.last_health[d] = float(h["ts"])  # type: ignore[arg-type]
        last.wait_for_publish(120)

    def live(self, seconds: float, health_s: float, event_s: float) -> None:
        """Each device's health every `health_s`, an event every `event_s`, spread evenly in time."""
        n = len(self.devices)
        rate = n / health_s
        started = time.monotonic()
        sent = 0
        last = None
        while (elapsed := time.monotonic() - started) < seconds:
            due = int(elapsed * rate)
            while sent < due:
                i = sent % n
                d = self.devices[i]
                h = health(d, i)
                last = self.publish(i, "health", h, retain=True)
                self.last_health[d] = float(h["ts"])  # type: ignore[arg-type]
                if random.random() < health_s / event_s:
                    event = {"ts": time.time(), "tool": "i2c", "outcome": "ok", "n": self.events}
                    last = self.publish(i, "events", event)
                    self.events += 1
                sent += 1
            time.sleep(0.005)
        if last is not None:
            last.wait_for_publish(60)

    def close(self) -> None:
        for c in self.clients:
            c.loop_stop()
            c.disconnect()


class StreamReader(threading.Thread):
    """The page's event stream read as a browser reads it: rows by device, events counted."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.last_seen: dict[str, float] = {}
        self.events = 0
        self.batches = 0
        self.ended_early = False
        self.stop = threading.Event()

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request("GET", "/api/stream", headers=BEARER)
        response = conn.getresponse()
        kind = ""
        while not self.stop.is_set():
            line = response.fp.readline()
            if not line:
                self.ended_early = not self.stop.is_set()
                return
            text = line.decode().rstrip("\n")
            if text.startswith("event: "):
                kind = text[7:]
            elif text.startswith("data: "):
                data = json.loads(text[6:])
                if kind == "devices":
                    self.batches += 1
                    for row in data["rows"]:
                        if row["last_seen"] is not None:
                            self.last_seen[row["device"]] = row["last_seen"]
                elif kind == "event":
                    self.events += 1
        conn.close()


def get(port: int, path: str) -> tuple[float, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    started = time.perf_counter()
    conn.request("GET", path, headers=BEARER)
    body = conn.getresponse().read()
    took = time.perf_counter() - started
    conn.close()
    return took, json.loads(body)


def list_latencies(port: int, n: int, samples: int) -> list[float]:
    sorts = ["device", "-device", "-cpu_temp_c", "last_seen", "state", "-mem_used_pct"]
    out = []
    for k in range(samples):
        q = random.choice(["", "", "north", f"bench-{random.randrange(max(n, 1)):05d}"[:9]])
        offset = random.randrange(max(n - 100, 1))
        took, page = get(port, f"/api/devices?offset={offset}&limit=100&sort={sorts[k % len(sorts)]}&q={q}")
        assert "rows" in page, page
        out.append(took * 1000)
    return out


def page_load(url: str, profile: Path) -> tuple[float, float]:
    """(first contentful paint, first rows of the list drawn), in ms from navigation start."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(url + "/login")
        driver.find_element(By.ID, "secret").send_keys(TOKEN)
        driver.find_element(By.ID, "login-button").click()
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "body[data-ready=yes]"))
        driver.get(url + "/")  # the measured load: logged in, nothing cached that matters
        WebDriverWait(driver, 60, 0.01).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#devices tbody tr"))
        rows_ms = driver.execute_script("return performance.now()")
        fcp = driver.execute_script(
            "const e = performance.getEntriesByName('first-contentful-paint');"
            "return e.length ? e[0].startTime : null"
        )
        return float(fcp or "nan"), float(rows_ms)
    finally:
        driver.quit()


def run(n: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-fleet-page-") as tmp:
        root = Path(tmp)
        broker = Mosquitto(root / "broker", extra_conf="max_queued_messages 0\n").start()
        fleet = Fleet(broker.port, [f"bench-{i:05d}" for i in range(n)], args.connections)
        page = None
        try:
            fleet.retained()
            (root / "token").write_text(TOKEN)
            config = root / "page.toml"
            config.write_text(
                f'[mqtt]\nport = {broker.port}\n[fleet_page]\ntoken_file = "{root / "token"}"\n'
            )
            port = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("EDGECLAW_")}
            env["EDGECLAW_STATE_DIR"] = str(root / "state")
            started = time.monotonic()
            page = subprocess.Popen(
                [sys.executable, "-m", "edgeclaw", "fleet", "serve", "--config", str(config),
                 "--listen", f"127.0.0.1:{port}"], env=env, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert page.stderr is not None
            while "fleet page on" not in page.stderr.readline():
                if page.poll() is not None:
                    raise SystemExit("the fleet page did not start")
            threading.Thread(target=page.stderr.read, daemon=True).start()  # never let its log block it
            while get(port, "/api/devices?limit=1")[1]["total"] < n:
                if time.monotonic() - started > 300:
                    raise SystemExit(f"the page never held all {n} devices")
                time.sleep(0.05)
            hold_s = time.monotonic() - started
            rss_held = rss_mb(page.pid)
            reader = StreamReader(port)
            reader.start()
            time.sleep(0.5)
            events_before = fleet.events
            feed = threading.Thread(
                target=fleet.live, args=(args.live, args.health_s / args.speed, args.event_s)
            )
            feed.start()
            latencies = list_latencies(port, n, args.samples)
            feed.join()
            time.sleep(1.5)  # the last batch sent
            reader.stop.set()
            rss_live = rss_mb(page.pid)
            _, state = get(port, "/api/state")
            held = {r["device"]: r["last_seen"] for r in state["devices"]}
            lost_page = sum(1 for d, ts in fleet.last_health.items() if held.get(d) != ts)
            live_devices = [d for d in fleet.devices if d in reader.last_seen]
            lost_stream = sum(1 for d in live_devices if reader.last_seen[d] != fleet.last_health[d])
            published_events = fleet.events - events_before
            loads = [page_load(f"http://127.0.0.1:{port}", root / f"profile-{k}") for k in range(args.loads)]
            return {
                "n": n,
                "hold_s": hold_s,
                "rss_held": rss_held,
                "rss_live": rss_live,
                "p50": statistics.median(latencies),
                "p95": statistics.quantiles(latencies, n=20)[18],
                "rate": n / args.health_s * args.speed,
                "lost_page": lost_page,
                "lost_stream": lost_stream,
                "stream_devices": len(live_devices),
                "events": (reader.events, published_events),
                "batches": reader.batches,
                "stream_ended": reader.ended_early,
                "fcp": statistics.median(x[0] for x in loads) if loads else float("nan"),
                "rows_ms": statistics.median(x[1] for x in loads) if loads else float("nan"),
            }
        finally:
            if page is not None and page.poll() is None:
                page.terminate()
                page.wait(10)
            fleet.close()
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--curve", default="100,1000,5000,10000", help="device counts, comma separated")
    parser.add_argument("--live", type=float, default=20.0, help="seconds of live messages")
    parser.add_argument("--health-s", type=float, default=60.0, help="seconds between a device's health")
    parser.add_argument("--event-s", type=float, default=600.0, help="seconds between a device's events")
    parser.add_argument("--speed", type=float, default=1.0, help="time compressed by this factor")
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--samples", type=int, default=200, help="list requests timed")
    parser.add_argument("--loads", type=int, default=0, help="page loads in headless Chromium (0: none)")
    args = parser.parse_args()
    if args.loads and not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        raise SystemExit("chromium and chromium-driver are needed (scripts/bootstrap --system)")
    print("| devices | health msg/s | time to hold all | RSS held | RSS after live | list p50 | list p95 "
          "| FCP | first rows | lost (page / stream) | events streamed |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in args.curve.split(",")):
        r = run(n, args)
        print(
            f"| {r['n']:,} | {r['rate']:.0f} | {r['hold_s']:.2f} s | {r['rss_held']:.0f} MB "
            f"| {r['rss_live']:.0f} MB "
            f"| {r['p50']:.1f} ms | {r['p95']:.1f} ms | {r['fcp']:.0f} ms | {r['rows_ms']:.0f} ms "
            f"| {r['lost_page']} / {r['lost_stream']} of {r['stream_devices']} "
            f"| {r['events'][0]} of {r['events'][1]}{' (stream ended!)' if r['stream_ended'] else ''} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
