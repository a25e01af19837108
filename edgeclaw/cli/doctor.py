"""`edgeclaw doctor`: is this machine ready to run the daemon as configured?

Each check reports ok, warn or FAIL with what it saw, so a person setting up a
board learns every problem in one run: the state directory, the device files
the board profile grants (and whether this user may open them), the sandbox
(probed by actually running a command in it), the MQTT broker and each
language model provider (reachable over the network?).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from edgeclaw.cli.common import EXIT_OK, EXIT_TOOL_ERROR, config_of
from edgeclaw.cli.doctor_identity import CHECK, commands_signed, device_signing_problem, identity_problems
from edgeclaw.cli.doctor_tools import seed_tool_findings
from edgeclaw.daemon.runtime import Runtime, build_runtime
from edgeclaw.records import dataclass
from edgeclaw.store.state import StateStore
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


def display_findings(runtime: Runtime) -> list[Finding]:
    """Whether canvas and screenshot can work here: the profile's displays, their device files, Pillow."""
    from importlib.util import find_spec

    profile, spec = runtime.board, runtime.board.spec
    displays = spec.displays if spec is not None else []
    if not displays:
        return [Finding("ok", "displays", f"{profile.name} declares none: canvas and screenshot refuse")]
    out = []
    if find_spec("PIL") is None:
        out.append(
            Finding("FAIL", "displays", "canvas and screenshot need Pillow: pip install 'edgeclaw[display]'")
        )
    for d in displays:
        check = f"display {d.name}"
        tools = (
            "canvas" if d.kind != "framebuffer" else "screenshot" + (", canvas" if d.access == "rw" else "")
        )
        if d.kind == "framebuffer" and not d.device.startswith("sim:"):
            found = _device(check, d.device, write=d.access == "rw")
            detail = (
                f"{found.detail} ({tools})" if found.level == "ok" else f"{found.detail}; {tools} cannot work"
            )
            out.append(Finding(found.level, check, detail))
        else:  # the sim's, or an OLED/TFT whose bus device file is checked with the other grants
            out.append(Finding("ok", check, f"{d.kind} {d.width}x{d.height} {d.location} ({tools})"))
    return out


def state_findings(runtime: Runtime) -> list[Finding]:
    out = []
    for what, path in (("state directory", runtime.state_dir), ("workspace", runtime.workspace)):
        ok = path.is_dir() and os.access(path, os.W_OK | os.X_OK)
        out.append(Finding("ok" if ok else "FAIL", what, f"{path}{'' if ok else ' is not writable'}"))
    return out


def _ago(ts: float) -> str:
    seconds = max(0.0, time.time() - ts)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def state_database_findings(runtime: Runtime) -> list[Finding]:
    return database_findings(runtime.state, runtime.config.state.backup_interval_s)


def database_findings(store: StateStore, interval: float) -> list[Finding]:
    """The state database as the daemon will find it at its next start, without changing anything:
    sound, damaged or foreign (and what the daemon will do about it), files set aside by an earlier
    recovery, the backup's age, free space and the disk reserve. (Whoever opens a damaged database
    first sets it aside: when building this runtime did, that is reported as a failure.)"""
    from edgeclaw.errors import BackendError
    from edgeclaw.store.recovery import examine, set_aside_files
    from edgeclaw.store.reserve import free_bytes

    out: list[Finding] = []
    if store.health is not None and store.health.recovered:
        # Building this runtime opened the database (stored custom tools are loaded at build time)
        # and found it damaged: it was set aside just now, by this run.
        out.append(Finding("FAIL", "state database", f"found by this check: {store.health.summary()}"))
    backup_ok = False
    if store.backup_file.exists():
        with contextlib.suppress(BackendError):
            backup_ok = examine(store.backup_file) is None
    then = (
        f"the backup {store.backup_file.name} ({_ago(store.backup_file.stat().st_mtime)})"
        if backup_ok
        else "an empty database (no usable backup)"
    )
    next_start = f"the daemon will move it aside and start from {then} at its next start"
    try:
        size: int | None = store.path.stat().st_size
    except OSError:
        size = None
    existed = store.identity_file.exists() or store.backup_file.exists()
    if not size:
        if existed:
            what = "is missing" if size is None else "is 0 bytes long"
            out.append(
                Finding("FAIL", "state database", f"{store.path} {what} although one existed; {next_start}")
            )
        else:
            out.append(
                Finding("ok", "state database", f"{store.path}: not created yet (made at the first start)")
            )
    else:
        try:
            problem = examine(store.path)
        except BackendError as e:
            out.append(Finding("FAIL", "state database", str(e)))
        else:
            if problem is None:
                out.append(
                    Finding("ok", "state database", f"{store.path}: sound (quick_check), {size} bytes")
                )
            else:
                out.append(Finding("FAIL", "state database", f"{store.path} is {problem}; {next_start}"))
    set_aside = set_aside_files(store.path)
    if set_aside:
        last = store.last_recovery()
        why = f" ({last.get('problem')}; {last.get('outcome')})" if last else ""
        out.append(
            Finding(
                "warn",
                "state database recovery",
                f"{len(set_aside)} damaged or foreign database file(s) set aside, newest "
                f"{set_aside[0]}{why}; look at them, then delete them to clear this warning",
            )
        )
    if interval <= 0:
        out.append(
            Finding("warn", "state backup", "off (state.backup_interval_s = 0): damage means starting empty")
        )
    elif store.backup_file.exists():
        taken = store.backup_file.stat().st_mtime
        stale = time.time() - taken > 2 * interval + 60
        level: Level = "warn" if stale or not backup_ok else "ok"
        note = "" if backup_ok else "; it does not pass its own check"
        note += f"; older than twice state.backup_interval_s ({interval:g} s)" if stale else ""
        out.append(Finding(level, "state backup", f"{store.backup_file} taken {_ago(taken)}{note}"))
    elif size:
        out.append(
            Finding("warn", "state backup", f"none yet ({store.backup_file} is made by the running daemon)")
        )
    free = free_bytes(store.path.parent)
    reserve = store.reserve
    if free is None:
        out.append(Finding("warn", "disk", f"cannot tell the free space of {store.path.parent}"))
    elif reserve.enabled and not reserve.present:
        level = "FAIL" if free < reserve.size else "warn"
        out.append(
            Finding(
                level,
                "disk",
                f"{free} bytes free on {store.path.parent}; the {reserve.size}-byte reserve for the "
                "daemon's own state is not in place (released after a full disk, or no room for it)",
            )
        )
    else:
        kept = (
            f", {reserve.size}-byte reserve in place"
            if reserve.enabled
            else ", no reserve (state.reserve_bytes = 0)"
        )
        out.append(Finding("ok", "disk", f"{free} bytes free on {store.path.parent}{kept}"))
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


def sandbox_limits_finding(runtime: Runtime) -> Finding | None:
    """The limits of the sandbox as a whole: the memory of all commands together, the disk reserve."""
    shell = getattr(runtime.registry.get("exec"), "shell", None)
    sandbox = getattr(getattr(shell, "runner", None), "sandbox", None)
    if sandbox is None:
        return None
    ok, text = sandbox.limits_report(runtime.workspace)
    return Finding("ok" if ok else "warn", "sandbox limits", text)


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
    """A real MQTT CONNECT with the configured protocol, user name, password and TLS: the broker's
    CONNACK reason code says whether the daemon would get in (a TCP connect proves nothing: any
    port that listens accepts one). Under a client id of its own, so a running daemon is not
    disturbed."""
    import ssl

    from edgeclaw.config.secrets import secret_refs
    from edgeclaw.errors import ConfigError
    from edgeclaw.net.mqtt_connection import ConnectionSettings, TlsSettings, check_broker

    m = runtime.config.mqtt
    if not m.enabled:
        return None
    where = f"{m.host}:{m.port}"
    password = runtime.secrets.get("mqtt", "")
    ref = secret_refs(runtime.config).get("mqtt")
    if ref is not None and not password:
        try:
            password = ref.resolve(runtime.config._source)
        except ConfigError as e:
            return Finding("FAIL", "mqtt broker", f"no password to log in to {where}: {e.key}: {e.problem}")
    tls = TlsSettings(m.tls.ca_file, m.tls.cert_file, m.tls.key_file) if m.tls is not None else None
    settings = ConnectionSettings(
        host=m.host,
        port=m.port,
        client_id=m.client_id or runtime.device_id,
        protocol=m.protocol,
        username=m.username,
        password=password,
        tls=tls,
    )
    how = f"MQTT {m.protocol}, " + (f"user {m.username!r}" if m.username else "no user name")
    how += ", TLS" if tls is not None else ", no TLS"
    try:
        problem = await check_broker(settings, NET_TIMEOUT_S)
    except (OSError, ssl.SSLError) as e:
        return Finding("FAIL", "mqtt broker", f"mqtt.tls: cannot use the TLS files: {e}")
    if problem is None:
        return Finding("ok", "mqtt broker", f"{where} accepted the connection ({how}): CONNACK reason code 0")
    if problem.reason_code is not None:
        return Finding(
            "FAIL",
            "mqtt broker",
            f"{where} refused the connection ({how}): CONNACK reason code {problem.reason_code} "
            f"{problem.reason_name!r}",
        )
    if "CONNACK" in problem.message:  # something listens there, but it does not speak MQTT
        return Finding("FAIL", "mqtt broker", problem.message)
    return Finding("FAIL", "mqtt broker", f"cannot connect to {where}: {problem}")


async def provider_findings(runtime: Runtime) -> list[Finding]:
    from edgeclaw.agent.providers.endpoints import provider_url

    config = runtime.config
    if not config.agent.providers:
        return [Finding("warn", "providers", "none configured: only slash commands will be answered")]
    from edgeclaw.backends.http_client import SharedClient
    from edgeclaw.daemon.agent import model_info

    client = SharedClient()
    info = model_info(runtime, list(config.agent.providers), client)
    out = []
    try:
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
            if problem:
                out.append(Finding("FAIL", f"provider {name}", problem))
                continue
            # What the agent asks at first contact (llama.cpp `/props`, Ollama `/api/show`; public
            # endpoints are not asked): the context, and whether the chat template takes tools -- a
            # warning when it does not, since the agent then sends none.
            with contextlib.suppress(Exception):  # what the server does not say is left unsaid
                async with asyncio.timeout(NET_TIMEOUT_S):
                    await info.takes_tools(name)
            context, note = info.known(name), info.tools_note(name)
            detail = f"{p.kind} at {url.geturl()} reachable" + (f"; context {context}" if context else "")
            out.append(
                Finding("warn" if note else "ok", f"provider {name}", detail + (f"; {note}" if note else ""))
            )
    finally:
        await client.aclose()
    return out


async def web_search_findings(runtime: Runtime) -> list[Finding]:
    """Each web_search provider as the main agent would reach it: key or package, the guard's
    verdict on its endpoint (a SearXNG on the LAN needs tools.web.allow_networks), a connection.
    Nothing is searched: a search can cost money."""
    from edgeclaw.tools.web.search import WebSearchTool

    tool = runtime.registry.get("web_search")
    if not isinstance(tool, WebSearchTool):
        return []
    return [
        Finding("ok" if usable else "FAIL", f"web_search {name}", detail)
        for name, usable, detail in await tool.probe(ToolContext())
    ]


def board_choice_finding(runtime: Runtime) -> Finding | None:
    """The simulated board serves made-up readings: right on a laptop, wrong on a deployed device.
    And `auto` that matched nothing runs with no hardware granted."""
    from edgeclaw.board import FALLBACK_BOARD

    profile = runtime.board
    if profile.simulated:
        return Finding(
            "warn",
            "board choice",
            f"{profile.name!r} is simulated: every sensor reading is fabricated. Fine for trying "
            'edgeclaw out; on a real device set board = "NAME" (edgeclaw board detect / board show)',
        )
    if runtime.config.board == "auto" and profile.name == FALLBACK_BOARD:
        return Finding(
            "warn",
            "board choice",
            f"no board profile matches this machine, so {FALLBACK_BOARD!r} is used and no hardware is "
            f'granted; set board = "NAME" for your board (or board = "{FALLBACK_BOARD}" to say so)',
        )
    return None


def _is_pty(path: str) -> bool:
    """A pseudo-terminal (socat, a test) rather than a physical port; symlinks to one count too."""
    return os.path.realpath(path).startswith("/dev/pts/")


def console_login_findings(runtime: Runtime) -> list[Finding]:
    """A console without a PIN on a physical port gives anyone with a cable the board's tools:
    allowed, but it must be a deliberate choice."""
    from edgeclaw.daemon.console import login_gate
    from edgeclaw.errors import ConfigErrors

    c = runtime.config.console
    if not c.ports:
        return []
    try:
        gate = login_gate(runtime, c, runtime.config._source)
    except ConfigErrors as e:
        return [Finding("FAIL", "console login", str(e))]
    if gate is not None:
        return [Finding("ok", "console login", f"PIN required on {', '.join(c.ports)}")]
    physical = [p for p in c.ports if not _is_pty(p)]
    if not physical:
        return [Finding("ok", "console login", "no PIN, but only pseudo-terminals are served")]
    why = 'login = "off"' if c.login == "off" else "no login_hash or login_hash_file"
    return [
        Finding(
            "warn",
            "console login",
            f"no PIN on {', '.join(physical)} ({why}): anyone with a cable gets the console's tools. "
            "If that is not deliberate, set login_hash (edgeclaw console hash-pin)",
        )
    ]


def mqtt_policy_finding(runtime: Runtime) -> Finding | None:
    """What MQTT callers may use beyond the remote default, and whether their commands are signed."""
    from edgeclaw.tools.policy import DEFAULT_CHANNEL_PROFILES

    config = runtime.config
    if not config.mqtt.enabled:
        return None
    policy = runtime.registry.policy
    allowed = policy.allowed(ToolContext(channel="mqtt", session_key="mqtt:doctor", peer_kind="device"))
    default_profile = DEFAULT_CHANNEL_PROFILES["mqtt"]
    registry = runtime.registry

    def weight(name: str) -> tuple[int, str]:
        # What runs programs first, then what writes, so the line leads with what matters most.
        tool = registry.get(name)
        group = tool.group if tool is not None else ""
        return ({"runtime": 0, "custom": 0, "fs": 1}.get(group, 2), name)

    beyond = sorted(allowed - policy.profile_members(default_profile), key=weight)
    if not beyond:
        return Finding(
            "ok", "mqtt tools", f"MQTT callers get the {default_profile!r} profile: reading, hardware"
        )
    signed = commands_signed(config)
    shown = ", ".join(beyond[:8]) + (f" and {len(beyond) - 8} more" if len(beyond) > 8 else "")
    if signed:
        return Finding("ok", "mqtt tools", f"MQTT callers may also use {shown} (commands are signed)")
    return Finding(
        "warn",
        "mqtt tools",
        f"MQTT callers may also use {shown}, and commands are not signed: anyone who can publish "
        "to the broker can. Set mqtt.hmac_secret_env or hmac_secret_file (or a [callers.NAME] that "
        "operates), or narrow [tools.channels.mqtt]",
    )


async def diagnose(runtime: Runtime) -> list[Finding]:
    findings = state_findings(runtime) + state_database_findings(runtime) + device_findings(runtime)
    findings += display_findings(runtime)
    findings.append(await sandbox_finding(runtime))
    limits = sandbox_limits_finding(runtime)
    if limits is not None:
        findings.append(limits)
    findings += [Finding(level, check, detail) for level, check, detail in seed_tool_findings(runtime)]
    broker = await broker_finding(runtime)
    if broker is not None:
        findings.append(broker)
    findings += await provider_findings(runtime)
    findings += await web_search_findings(runtime)
    for finding in (board_choice_finding(runtime), mqtt_policy_finding(runtime)):
        if finding is not None:
            findings.append(finding)
    findings += console_login_findings(runtime)
    findings += await mcp_findings(runtime)
    findings += mcp_serve_findings(runtime)
    findings += identity_findings(runtime)
    return findings


def identity_findings(runtime: Runtime) -> list[Finding]:
    """Every way this config lets one caller act as another or as admin (doctor_identity)."""
    problems = identity_problems(runtime.config)
    if signing := device_signing_problem(runtime.config, runtime.state_dir):
        problems.append(signing)
    if not problems:
        return [Finding("ok", CHECK, "no caller can act as another or as the administrator")]
    return [Finding("warn", CHECK, problem) for problem in problems]


async def mcp_findings(runtime: Runtime) -> list[Finding]:
    """Each MCP server connected once: its state, its tools, those left out (and why) and those whose
    arguments are checked here only in part (and what the server alone checks)."""
    bridge = runtime.mcp
    if bridge is None:
        return []
    await bridge.start()
    out = []
    for name, st in bridge.status().items():
        check = f"mcp server {name}"
        if st["state"] == "disabled":
            out.append(Finding("ok", check, "disabled (enabled = false)"))
        elif st["state"] != "connected":
            out.append(Finding("FAIL", check, f"{st['state']}: {st['error'] or 'no answer'} ({st['where']})"))
        else:
            server = f"{st['server']}, " if st["server"] else ""
            left_out = f", {len(st['broken'])} left out" if st["broken"] else ""
            partly = st.get("partly_checked", {})
            part = f", {len(partly)} checked in part by the server only" if partly else ""
            detail = (
                f"{st['where']}: {server}MCP {st['protocol_version']}, {st['tools']} tools{left_out}{part}"
            )
            out.append(Finding("ok", check, detail))
            for tool, why in sorted(st["broken"].items()):
                out.append(Finding("warn", check, f"tool {tool!r} left out: {why}"))
            for tool, what in sorted(partly.items()):
                checked = f"tool {tool!r} checked in part here; by the server only: {what}"
                out.append(Finding("ok", check, checked))
    return out


def mcp_serve_findings(runtime: Runtime) -> list[Finding]:
    """edgeclaw's tools served over MCP ([mcp.server]): the endpoint's token and TLS, what MCP clients
    get, and MCP over MQTT, which commands' signatures do not cover."""
    from edgeclaw.daemon.mcp_server import parse_listen, read_token, tls_context
    from edgeclaw.errors import ConfigErrors

    config = runtime.config
    srv = config.mcp.server
    out: list[Finding] = []
    if srv.listen:
        check = "mcp endpoint"
        try:
            host, _port = parse_listen(srv.listen, config._source)
            _token, name = read_token(srv, config._source)
            tls = tls_context(srv, config._source)
        except ConfigErrors as e:
            out.append(Finding("FAIL", check, str(e).replace("\n", "; ")))
        else:
            url = f"{'https' if tls else 'http'}://{srv.listen}{srv.path}"
            loopback = host in ("127.0.0.1", "::1", "localhost")
            if tls is None and not loopback:
                detail = (
                    f"{url} without TLS: the bearer token crosses the network in clear "
                    "(allowed by mcp.server.allow_plain_http; set tls_cert_file)"
                )
                out.append(Finding("warn", check, detail))
            else:
                out.append(Finding("ok", check, f"{url}, bearer token {name!r}"))
    if srv.mqtt and config.mqtt.enabled:
        signed = commands_signed(config)
        detail = "on the broker connection; MCP messages are unsigned: the broker's ACL decides who may call"
        if signed:
            detail += " (the edgeclaw topics' HMAC does not cover $mcp-rpc/...)"
        out.append(Finding("warn" if signed else "ok", "mcp over mqtt", detail))
    if out:
        allowed = runtime.registry.policy.allowed(ToolContext(channel="mcp", session_key="mcp:doctor"))
        shell = sorted(allowed & {"exec", "process"})
        tools = f"MCP clients may use {len(allowed)} tools"
        if shell:
            out.append(Finding("warn", "mcp tools", f"{tools}, the shell among them ({', '.join(shell)})"))
        else:
            out.append(Finding("ok", "mcp tools", f"{tools} (no shell)"))
    return out


def cmd_doctor(args: argparse.Namespace) -> int:
    from edgeclaw.errors import BackendError, ConfigErrors

    try:
        config = config_of(args)
        # Missing secrets are reported per provider below rather than stopping the whole check.
        runtime = build_runtime(config, board=args.board, require_secrets=False)
    except ConfigErrors as e:
        print(Finding("FAIL", "config", str(e).replace("\n", "; ")))
        return EXIT_TOOL_ERROR
    except BackendError as e:
        # The state database could not be opened (a newer format, a full disk): say why, and
        # what the database itself looks like, without a runtime.
        from edgeclaw.config.paths import state_dir

        print(Finding("FAIL", "runtime", str(e)))
        store = StateStore(state_dir(config.state_dir), reserve_bytes=config.state.reserve_bytes)
        for finding in database_findings(store, config.state.backup_interval_s):
            print(finding)
        return EXIT_TOOL_ERROR

    async def run() -> list[Finding]:
        try:
            return await diagnose(runtime)
        finally:
            await runtime.aclose()

    findings = [Finding("ok", "config", runtime.config._source), *asyncio.run(run())]
    for finding in findings:
        print(finding)
    return EXIT_TOOL_ERROR if any(f.level == "FAIL" for f in findings) else EXIT_OK
