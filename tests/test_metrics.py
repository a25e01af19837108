"""The daemon's Prometheus metrics: read by a real `prometheus` (Debian's) scraping a real `edgeclaw run`
on the sim board with MQTT to a real mosquitto, checked by `promtool check metrics`, and refused where
they must not be served."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.net.prometheus_text import Family, Histogram, render
from tests.mqtt_support import (
    Caller,
    Mosquitto,
    daemon_env,
    free_port,
    needs_mosquitto,
    run_daemon,
    stop_daemon,
)

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None, reason="prometheus is not installed (apt-get install prometheus)"
)
DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana" / "edgeclaw-device.json"


def promtool_check(text: bytes) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text.decode(), capture_output=True, text=True, timeout=30
    )


# -- the format --------------------------------------------------------------------------------------
@needs_prometheus
def test_promtool_accepts_what_we_render_and_refuses_a_broken_copy():
    h = Histogram("demo_duration_seconds", "How long.", ("tool",), (0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 3.0):
        h.observe(v, "i2c")
    text = render(
        [
            Family("demo_total", "counter", "Calls.").sample(3, tool='we"ird\\name\n', outcome="ok"),
            Family("demo_value", "gauge", "A value.").sample(21.5, unit="°C"),
            h.family(),
        ]
    )
    checked = promtool_check(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = text.decode().splitlines()
    # Cumulative buckets: 0.05 and 0.1 are <= 0.1; 0.5 joins at 1; 3.0 only at +Inf.
    assert 'demo_duration_seconds_bucket{tool="i2c",le="0.1"} 2' in lines
    assert 'demo_duration_seconds_bucket{tool="i2c",le="1"} 3' in lines
    assert 'demo_duration_seconds_bucket{tool="i2c",le="+Inf"} 4' in lines
    assert 'demo_duration_seconds_sum{tool="i2c"} 3.65' in lines
    assert 'demo_total{tool="we\\"ird\\\\name\\n",outcome="ok"} 3' in lines
    broken = text.replace(
        b"# TYPE demo_total counter\n", b"# TYPE demo_total counter\n# TYPE demo_total gauge\n"
    )
    assert promtool_check(broken).returncode != 0  # the check can fail


def test_a_histogram_keeps_a_bounded_number_of_series():
    h = Histogram("x_seconds", "X.", ("tool",), max_series=3)
    for i in range(100):
        h.observe(0.01, f"invented-{i}")
    counts = [s for s in h.family().samples if s[0] == "_count"]
    assert len(counts) == 3
    assert {"tool": "overflow"} in [labels for _, labels, _ in counts]
    assert sum(v for *_, v in counts) == 100  # nothing lost, only pooled


# -- a daemon, scraped by prometheus -----------------------------------------------------------------
class Prometheus:
    """Debian's prometheus scraping `target` every second (with a bearer token from `token_file`)."""

    def __init__(self, work: Path, target: str, token_file: Path | None = None) -> None:
        self.port = free_port()
        config = work / "prometheus.yml"
        auth = f"    authorization:\n      credentials_file: {token_file}\n" if token_file else ""
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            f"scrape_configs:\n  - job_name: edgeclaw\n{auth}    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )
        self.log = work / "prometheus.log"
        assert PROMETHEUS is not None
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={work / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
        )

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.load(response)
        except OSError:
            return []
        return body["data"]["result"] if body.get("status") == "success" else []

    def wait_for(self, expr: str, within: float = 60) -> list[dict[str, Any]]:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            result = self.query(expr)
            if result:
                return result
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        raise AssertionError(f"prometheus never had {expr}:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        stop_daemon(self.proc)  # type: ignore[arg-type]


class Device:
    def __init__(self, work: Path, broker: Mosquitto, metrics_port: int) -> None:
        self.work = work
        self.broker = broker
        self.port = metrics_port
        config = work / "edgeclaw.toml"
        config.write_text(
            'board = "sim"\ndevice_id = "metrics-1"\n[tools]\nrate_limit = 0\n'
            '[tools.channels.mqtt]\nprofile = "full"\n'
            f'[metrics]\nlisten = "127.0.0.1:{metrics_port}"\n'
            f"[mqtt]\nenabled = true\nport = {broker.port}\ndiscovery = false\ntelemetry_interval_s = 0\n"
        )
        self.log = work / "daemon.log"
        self.env = daemon_env(work / "state", config)
        self.proc = run_daemon(self.env, self.log, "--board", "sim")
        deadline = time.monotonic() + 60
        while "Prometheus metrics at" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(self.log.read_text(errors="replace")[-3000:])
            time.sleep(0.1)

    def tools(self, *calls: tuple[str, dict[str, Any]]) -> list[bool]:
        """Each call over MQTT, as a backend makes it; whether each answer is ok."""

        async def run() -> list[bool]:
            answers = "reply/metrics-1/test/1"
            async with Caller(self.broker.port, [answers]) as c:
                for n, (tool, args) in enumerate(calls):
                    request = {"id": f"m{n}", "tool": tool, "args": args}
                    await c.publish(
                        "edgeclaw/metrics-1/tool/call", request, response_topic=answers, correlation=b"%d" % n
                    )
                got = await c.answers(answers, len(calls), within=30)
            by_id = {m.json["id"]: m.json.get("ok") is True for m in got}
            return [by_id[f"m{n}"] for n in range(len(calls))]

        return asyncio.run(run())

    def scrape(self, host: str | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/metrics")
        if host is not None:
            request.add_header("Host", host)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()


@pytest.fixture
def scraped(tmp_path: Path) -> Iterator[tuple[Device, Prometheus, Mosquitto]]:
    broker = Mosquitto(tmp_path / "broker").start()
    device = Device(tmp_path, broker, free_port())
    prometheus = Prometheus(tmp_path, f"127.0.0.1:{device.port}")
    try:
        yield device, prometheus, broker
    finally:
        prometheus.stop()
        stop_daemon(device.proc)
        broker.kill()


def value(result: list[dict[str, Any]]) -> float:
    return float(result[0]["value"][1])


@needs_mosquitto
@needs_prometheus
def test_prometheus_scrapes_tool_calls_sensors_and_the_mqtt_link(scraped):
    device, prometheus, broker = scraped
    scan = ("i2c", {"action": "scan", "bus": 1})
    refused = ("i2c", {"action": "read_byte", "bus": 1, "address": "0x3f"})  # not granted by the profile
    assert device.tools(scan, scan, refused, ("no_such_tool", {})) == [True, True, False, False]

    status, body = device.scrape()
    assert status == 200
    checked = promtool_check(body)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    ok = prometheus.wait_for('edgeclaw_tool_calls_total{tool="i2c",outcome="ok"} >= 2')
    assert value(ok) == 2
    assert prometheus.wait_for('edgeclaw_tool_calls_total{tool="i2c",outcome!="ok"} > 0')
    assert prometheus.wait_for('edgeclaw_tool_call_duration_seconds_count{tool="i2c"} == 3')
    # The caller's invented name is pooled, never a series of its own.
    assert not prometheus.query('edgeclaw_tool_calls_total{tool="no_such_tool"}')
    assert not prometheus.query('edgeclaw_tool_call_duration_seconds_count{tool="no_such_tool"}')
    assert prometheus.wait_for('edgeclaw_tool_calls_total{tool="(unknown)"} == 1')
    # The sim board's TMP102 at power-up, in its unit.
    temperature = prometheus.wait_for('edgeclaw_sensor_value{device="board temperature",unit="°C"}')
    assert value(temperature) == pytest.approx(21.5, abs=0.1)
    assert value(prometheus.wait_for("edgeclaw_mqtt_connected == 1")) == 1
    assert prometheus.wait_for('edgeclaw_build_info{board="sim",device="metrics-1"} == 1')
    assert value(prometheus.wait_for("edgeclaw_resident_memory_bytes")) > 10 * 2**20

    broker.kill()  # the link goes down, and the scrape says so
    assert value(prometheus.wait_for("edgeclaw_mqtt_connected == 0")) == 0


@needs_mosquitto
@needs_prometheus
def test_every_metric_the_shipped_dashboard_plots_is_one_the_daemon_serves(scraped):
    device, _, _ = scraped
    # A sandboxed command first: its cgroup's memory is served from then on.
    assert device.tools(("i2c", {"action": "scan", "bus": 1}), ("exec", {"command": "echo hi"})) == [
        True,
        True,
    ]
    served = {
        line.split("{")[0].split(" ")[0]
        for line in device.scrape()[1].decode().splitlines()
        if line and not line.startswith("#")
    }
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert exprs
    plotted = {name for expr in exprs for name in re.findall(r"\b(edgeclaw_[a-z_]+)", expr)}
    assert plotted and plotted <= served, plotted - served


@needs_mosquitto
def test_another_host_name_and_other_paths_are_refused(scraped):
    device, _, _ = scraped
    status, body = device.scrape(host="rebound.example")
    assert status == 421 and b"allowed_hosts" in body
    status, _ = device.scrape(host=f"localhost:{device.port}")
    assert status == 200


@pytest.mark.parametrize(
    ("listen", "extra", "refused"),
    [
        ("0.0.0.0:9464", "", True),
        ("0.0.0.0:9464", "allow_plain_http = true\n", False),
        ("127.0.0.1:9464", "", False),
    ],
)
def test_metrics_off_loopback_need_the_explicit_opt_in(tmp_path, listen, extra, refused):
    from edgeclaw.config.loader import load_config
    from edgeclaw.errors import ConfigErrors

    path = tmp_path / "edgeclaw.toml"
    path.write_text(f'[metrics]\nlisten = "{listen}"\n{extra}')
    if refused:
        with pytest.raises(ConfigErrors, match=r"metrics\.listen.*allow_plain_http"):
            load_config(path)
    else:
        assert load_config(path).metrics.listen == listen
