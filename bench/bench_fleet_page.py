"""Fleet page benchmark: 200 devices' retained messages on a broker, the page in headless Chromium.

  * A real mosquitto on loopback; a publisher leaves N devices' retained `status` and `health`
    (the shapes of docs/mqtt.md, default N = 200) and keeps sending each device's health every
    `--interval` seconds, as a fleet would.
  * `edgeclaw fleet serve` against it. Its resident memory once it holds all N devices, beside, in
    the same run, a bare subscriber's (a Python process with aiomqtt subscribed to the same topics,
    keeping the last payload per topic): the page's cost over the least a reader of them needs.
  * The page's load in headless Chromium (Selenium): first contentful paint (the Paint Timing API)
    and the time until the table shows all N devices, after a login, over `--loads` loads.

Run: python bench/bench_fleet_page.py [--devices N] [--loads L]
(2 cores shared with other work make timings noisy: compare the figures of one run.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.mqtt_support import Caller, Mosquitto, free_port  # noqa: E402

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TOKEN = "bench-token-0123456789"

BARE_SUBSCRIBER = textwrap.dedent(
    """
    import asyncio, sys, aiomqtt
    async def main():
        last = {}
        async with aiomqtt.Client("127.0.0.1", int(sys.argv[1]), protocol=aiomqtt.ProtocolVersion.V5) as c:
            for what in ("status", "health", "events", "approval/request"):
                await c.subscribe(f"edgeclaw/+/{what}", qos=1)
            print("subscribed", flush=True)
            async for m in c.messages:
                last[m.topic.value] = bytes(m.payload)
                if len(last) >= int(sys.argv[2]):
                    print("all", flush=True)
    asyncio.run(main())
    """
)


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


async def publisher(
    port: int, devices: list[str], interval: float, ready: threading.Event, stop: threading.Event
) -> None:
    """The simulated fleet: every device's retained status and health, then health every `interval`."""
    async with Caller(port, []) as c:
        for i, d in enumerate(devices):
            await c.publish(f"edgeclaw/{d}/status", status(d, i), retain=True)
            await c.publish(f"edgeclaw/{d}/health", health(d, i), retain=True)
        ready.set()
        while not stop.is_set():
            await asyncio.to_thread(stop.wait, interval)
            for i, d in enumerate(devices):
                await c.publish(f"edgeclaw/{d}/health", health(d, i), retain=True)


def page_load(url: str, devices: int, profile: Path) -> tuple[float, float]:
    """(first contentful paint, all rows shown), in ms from navigation start."""
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
        WebDriverWait(driver, 60, 0.01).until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "#devices tbody tr")) >= devices
        )
        rows_ms = driver.execute_script("return performance.now()")
        fcp = driver.execute_script(
            "const e = performance.getEntriesByName('first-contentful-paint');"
            "return e.length ? e[0].startTime : null"
        )
        return float(fcp or "nan"), float(rows_ms)
    finally:
        driver.quit()


def devices_held(url: str) -> int:
    req = urllib.request.Request(url + "/api/state", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return len(json.load(r)["devices"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between each device's health")
    args = parser.parse_args()
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        raise SystemExit("chromium and chromium-driver are needed (scripts/bootstrap --system)")
    with tempfile.TemporaryDirectory(prefix="bench-fleet-page-") as tmp:
        root = Path(tmp)
        broker = Mosquitto(root / "broker").start()
        devices = [f"bench-{i:04d}" for i in range(args.devices)]
        ready, stop = threading.Event(), threading.Event()
        feed = threading.Thread(
            target=asyncio.run,
            args=(publisher(broker.port, devices, args.interval, ready, stop),),
            daemon=True,
        )
        feed.start()
        if not ready.wait(60):
            raise SystemExit("the simulated devices could not publish")
        (root / "token").write_text(TOKEN)
        config = root / "page.toml"
        config.write_text(f'[mqtt]\nport = {broker.port}\n[fleet_page]\ntoken_file = "{root / "token"}"\n')
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("EDGECLAW_")}
        started = time.monotonic()
        page = subprocess.Popen(
            [sys.executable, "-m", "edgeclaw", "fleet", "serve", "--config", str(config),
             "--listen", f"127.0.0.1:{port}"], env=env, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        bare = subprocess.Popen(
            [sys.executable, "-c", BARE_SUBSCRIBER, str(broker.port), str(2 * args.devices)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert page.stderr is not None and bare.stdout is not None
            while "fleet page on" not in page.stderr.readline():
                if page.poll() is not None:
                    raise SystemExit("the fleet page did not start")
            url = f"http://127.0.0.1:{port}"
            while devices_held(url) < args.devices:
                time.sleep(0.1)
            up_s = time.monotonic() - started
            while bare.stdout.readline().strip() != "all":
                pass
            time.sleep(2 * args.interval)  # both have taken a round of live health
            page_rss, bare_rss = rss_mb(page.pid), rss_mb(bare.pid)
            loads = [page_load(url, args.devices, root / f"profile-{n}") for n in range(args.loads)]
            page_rss_after = rss_mb(page.pid)
        finally:
            for proc in (page, bare):
                proc.terminate()
                proc.wait(10)
            stop.set()
            feed.join(30)
            broker.stop()
    fcp = statistics.median(x[0] for x in loads)
    rows = statistics.median(x[1] for x in loads)
    print(f"devices: {args.devices} (retained status + health; health again every {args.interval:g} s)")
    print(f"fleet serve: start to holding every device {up_s:.2f} s")
    print(f"RSS: fleet serve {page_rss:.1f} MB (after {args.loads} page loads: {page_rss_after:.1f} MB)")
    print(f"RSS: bare subscriber {bare_rss:.1f} MB   ratio {page_rss / bare_rss:.2f}x")
    print(f"page load: first contentful paint {fcp:.0f} ms, all {args.devices} rows {rows:.0f} ms", end="")
    print(f" (median of {args.loads})")


if __name__ == "__main__":
    main()
