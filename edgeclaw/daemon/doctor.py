"""`edgeclaw doctor`: is this machine ready to run the daemon as configured?

Each check reports ok, warn or FAIL with what it saw, so a person setting up a
board learns every problem in one run: the state directory, the device files
the board profile grants (and whether this user may open them), the sandbox
(probed by actually running a command in it), the MQTT broker and each
language model provider (reachable over the network?).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from edgeclaw.daemon.runtime import Runtime
from edgeclaw.tools.base import ToolContext

Level = Literal["ok", "warn", "FAIL"]
NET_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Finding:
    level: Level
    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.level:<4}  {self.check}: {self.detail}"


def _device(check: str, path: str, *, write: bool) -> Finding:
    p = Path(path)
    if not p.exists():
        return Finding("FAIL", check, f"{path} does not exist")
    mode = os.R_OK | (os.W_OK if write else 0)
    if not os.access(p, mode):
        need = "read/write" if write else "read"
        return Finding(
            "FAIL", check, f"{path}: no {need} permission for this user (groups i2c/spi/gpio/dialout?)"
        )
    return Finding("ok", check, f"{path} {'read/write' if write else 'readable'}")


def device_findings(runtime: Runtime) -> list[Finding]:
    """The device files the profile grants, and the console ports; none are needed on a simulated board."""
    profile = runtime.board
    spec = profile.spec
    out: list[Finding] = []
    if profile.simulated or spec is None:
        out.append(Finding("ok", "board", f"{profile.name}: simulated devices, no device files needed"))
    else:
        out.append(Finding("ok", "board", f"{profile.name} ({profile.path})"))
        for g in spec.i2c:
            out.append(_device(f"i2c bus {g.bus}", g.device_path, write=True))
        for g in spec.spi:
            out.append(_device(f"spi {g.bus}.{g.chip_select}", g.device_path, write=g.access == "rw"))
        if spec.gpio:
            chips = sorted(str(p) for p in Path("/dev").glob("gpiochip*"))
            out.append(
                Finding("ok", "gpio", ", ".join(chips))
                if chips
                else Finding("FAIL", "gpio", "no /dev/gpiochip* on this machine")
            )
        for m in spec.memory:
            out.append(_device(f"memory {m.name}", m.device, write=m.access == "rw"))
        if spec.esp32 is not None and spec.esp32.port != "sim":
            out.append(_device("esp32 bridge", spec.esp32.port, write=True))
    for port in runtime.config.console.ports:
        out.append(_device(f"console {port}", port, write=True))
    return out


def state_findings(runtime: Runtime) -> list[Finding]:
    out = []
    for what, path in (("state directory", runtime.state_dir), ("workspace", runtime.workspace)):
        ok = path.is_dir() and os.access(path, os.W_OK | os.X_OK)
        out.append(Finding("ok" if ok else "FAIL", what, f"{path}{'' if ok else ' is not writable'}"))
    return out


async def sandbox_finding(runtime: Runtime) -> Finding:
    if runtime.registry.get("exec") is None:
        return Finding("ok", "sandbox", "no shell tools registered")
    # A dry run goes through the exec tool's own checks, which probe the configured backend for real.
    outcome = await runtime.registry.execute(
        "exec", {"command": "true"}, ToolContext(channel="cli", session_key="doctor"), dry_run=True
    )
    if outcome.ok:
        return Finding("ok", "sandbox", f"backend {runtime.config.sandbox.backend!r} works")
    level: Level = "FAIL" if runtime.config.sandbox.required else "warn"
    return Finding(level, "sandbox", outcome.error or "exec refused")


async def _tcp(host: str, port: int) -> str | None:
    try:
        async with asyncio.timeout(NET_TIMEOUT_S):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return f"no answer from {host}:{port} within {NET_TIMEOUT_S:g} s"
    except OSError as e:
        return f"cannot connect to {host}:{port}: {e.strerror or e}"
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()  # do not leave the socket to the garbage collector
    return None


async def broker_finding(runtime: Runtime) -> Finding | None:
    m = runtime.config.mqtt
    if not m.enabled:
        return None
    problem = await _tcp(m.host, m.port)
    return Finding(
        "FAIL" if problem else "ok", "mqtt broker", problem or f"{m.host}:{m.port} accepts connections"
    )


async def provider_findings(runtime: Runtime) -> list[Finding]:
    from edgeclaw.daemon.agent import provider_url

    config = runtime.config
    if not config.agent.providers:
        return [Finding("warn", "providers", "none configured: only slash commands will be answered")]
    out = []
    for name in config.agent.providers:
        p = config.providers[name]
        url = urlsplit(provider_url(p))
        port = url.port or (443 if url.scheme == "https" else 80)
        problem = await _tcp(url.hostname or "", port)
        if (
            problem is None
            and f"providers.{name}" not in runtime.secrets
            and (p.api_key_env or p.api_key_file)
        ):
            problem = "its API key could not be read"
        out.append(
            Finding(
                "FAIL" if problem else "ok",
                f"provider {name}",
                problem or f"{p.kind} at {url.geturl()} reachable",
            )
        )
    return out


async def diagnose(runtime: Runtime) -> list[Finding]:
    findings = state_findings(runtime) + device_findings(runtime)
    findings.append(await sandbox_finding(runtime))
    broker = await broker_finding(runtime)
    if broker is not None:
        findings.append(broker)
    findings += await provider_findings(runtime)
    return findings
