"""`[metrics] listen`: the daemon's Prometheus metrics on `GET /metrics` (docs/metrics.md).

Off by default; when on, on loopback unless the config says otherwise (a non-loopback address without
TLS needs `allow_plain_http`, as the other listeners). Everything is read when Prometheus scrapes,
from what the daemon already keeps (its status, the registry's counters, the sensors), except the
tool-call latency histogram, which an audit sink fills as calls end. A scrape reads the board's sensors
at most every `SENSOR_MAX_AGE_S`, however often it is scraped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from edgeclaw.daemon.runtime import Runtime
from edgeclaw.net.httpd import HttpServer
from edgeclaw.net.prometheus_text import CONTENT_TYPE, Family, Histogram, render
from edgeclaw.tools.audit import AuditRecord

log = logging.getLogger("edgeclaw.metrics")

PATH = "/metrics"
PLAIN = "text/plain; charset=utf-8"
SENSOR_MAX_AGE_S = 5.0
OUTCOMES = ("ok", "failed", "refused")


class DaemonMetrics:
    """The families of one scrape, from the runtime and the daemon's status."""

    def __init__(self, runtime: Runtime, status: Callable[[], dict[str, Any]]) -> None:
        self.runtime = runtime
        self.status = status
        self.durations = Histogram(
            "edgeclaw_tool_call_duration_seconds",
            "How long tool calls took, by tool (refusals included).",
            ("tool",),
        )
        self._readings: list[Any] = []
        self._read_at = 0.0
        self._reading: asyncio.Lock = asyncio.Lock()

    def observe(self, record: AuditRecord) -> None:
        """The audit sink: each ended call's duration, under its tool when the tool exists (a caller's
        invented name must not become a series of its own)."""
        tool = "(unknown)" if record.stage == "unknown_tool" else record.tool  # as the registry's counters
        self.durations.observe(record.duration_ms / 1000.0, tool)

    async def families(self) -> list[Family]:
        status = self.status()
        out = [
            Family("edgeclaw_build_info", "gauge", "The running version, its board and device id.").sample(
                1,
                version=str(status.get("version", "")),
                board=str(status.get("board", "")),
                device=str(status.get("device", "")),
            ),
            Family("edgeclaw_uptime_seconds", "gauge", "Seconds since the daemon started.").sample(
                float(status.get("uptime_s", 0.0))
            ),
            Family("edgeclaw_ready", "gauge", "1 while the daemon serves (READY), else 0.").sample(
                1 if status.get("state") == "serving" else 0
            ),
            self._resident_memory(),
            self._tool_calls(),
            self.durations.family(),
            Family("edgeclaw_tool_calls_in_flight", "gauge", "Tool calls running now.").sample(
                self.runtime.registry.in_flight
            ),
        ]
        out += self._channels(status.get("channels") or {})
        out.append(self._sandbox_memory())
        out.append(await self._sensors())
        return out

    def _tool_calls(self) -> Family:
        family = Family(
            "edgeclaw_tool_calls_total", "counter", "Tool calls since start, by tool and outcome."
        )
        for tool, c in sorted(self.runtime.registry.stats.tools.items()):
            ok = c.calls - c.errors - c.refused
            for outcome, count in zip(OUTCOMES, (ok, c.errors, c.refused), strict=True):
                family.sample(count, tool=tool, outcome=outcome)
        return family

    @staticmethod
    def _resident_memory() -> Family:
        family = Family("edgeclaw_resident_memory_bytes", "gauge", "The daemon's resident memory (VmRSS).")
        try:
            with open(f"/proc/{os.getpid()}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        family.sample(int(line.split()[1]) * 1024)
        except (OSError, ValueError, IndexError):
            pass
        return family

    @staticmethod
    def _channels(channels: dict[str, Any]) -> list[Family]:
        connected = Family("edgeclaw_mqtt_connected", "gauge", "1 while the MQTT channel is connected.")
        outbox = Family(
            "edgeclaw_mqtt_outbox_messages", "gauge", "Messages waiting in the MQTT outbox for the broker."
        )
        mqtt = channels.get("mqtt")
        if isinstance(mqtt, dict) and "connected" in mqtt:
            connected.sample(1 if mqtt["connected"] else 0)
            outbox.sample(int(mqtt.get("outbox", 0)))
        return [connected, outbox]

    def _sandbox_memory(self) -> Family:
        family = Family(
            "edgeclaw_sandbox_memory_bytes",
            "gauge",
            "Memory charged to the sandboxed commands' cgroup (all of them together).",
        )
        from edgeclaw.sandbox.cgroup import memory_in_use

        used = memory_in_use(self.runtime.config.sandbox.pids_cgroup)
        if used is not None:
            family.sample(used)
        return family

    async def _sensors(self) -> Family:
        family = Family(
            "edgeclaw_sensor_value",
            "gauge",
            "The board's declared sensors, each value by device, quantity, label and unit.",
        )
        readings = await self._fresh_readings()
        for reading in readings:
            for v in reading.values:
                family.sample(v.value, device=reading.device, quantity=v.quantity, label=v.label, unit=v.unit)
        return family

    async def _fresh_readings(self) -> list[Any]:
        async with self._reading:  # scrapes at once share one read of the bus
            if time.monotonic() - self._read_at >= SENSOR_MAX_AGE_S:
                from edgeclaw.backends.sensors.base import Reading

                sensors = self.runtime.hardware.sensors()
                if sensors.devices:
                    # A device that does not answer is left out of this scrape (its absence is what
                    # an alert sees), never the whole scrape.
                    outcomes = await sensors.read_all()
                    self._readings = [r for r in outcomes if isinstance(r, Reading)]
                self._read_at = time.monotonic()
            return self._readings


class MetricsService:
    """The `/metrics` listener, entered after the channels (their state is part of a scrape)."""

    def __init__(self, runtime: Runtime, status: Callable[[], dict[str, Any]]) -> None:
        from edgeclaw.daemon.mcp_server import parse_listen

        cfg = runtime.config.metrics
        self.host, self.port = parse_listen(cfg.listen, runtime.config._source, key="metrics.listen")
        self.metrics = DaemonMetrics(runtime, status)
        self.runtime = runtime
        self.http: HttpServer | None = None

    async def handle(self, request: Any, exchange: Any) -> None:
        if request.path != PATH:
            await exchange.respond(
                404, b"not found: the metrics are at /metrics\n", content_type="text/plain"
            )
            return
        if request.method not in ("GET", "HEAD"):
            await exchange.respond(405, b"GET only\n", {"Allow": "GET, HEAD"}, content_type=PLAIN)
            return
        body = render(await self.metrics.families())
        await exchange.respond(200, b"" if request.method == "HEAD" else body, content_type=CONTENT_TYPE)

    async def __aenter__(self) -> MetricsService:
        cfg = self.runtime.config.metrics
        self.runtime.registry.add_audit_sink(self.metrics.observe)
        self.http = HttpServer(
            self.handle, self.host, self.port, max_body=0, max_connections=8, allowed_hosts=cfg.allowed_hosts
        )
        await self.http.__aenter__()
        log.info("Prometheus metrics at http://%s:%d%s", self.host, self.http.bound_port, PATH)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.runtime.registry.remove_audit_sink(self.metrics.observe)
        if self.http is not None:
            await self.http.__aexit__(*exc)
