"""`edgeclaw fleet serve`: the fleet page built from the config and run until stopped.

The broker and its credentials come from `[mqtt]` (host, port, user, password,
TLS, topic prefix; `--broker HOST:PORT` overrides host and port), the keys the
page signs with from `[mqtt]` too (`hmac_secret_*`: the command key;
`approver_secret_*`: the approver key; `admin_secret_*`: the admin key, for update
rollouts only), everything else from `[fleet_page]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeclaw.config.paths import state_dir
from edgeclaw.config.pin_hash import PinHash, parse_pin_hash
from edgeclaw.config.schema import Config
from edgeclaw.config.secrets import SecretRef, secret_refs
from edgeclaw.errors import ConfigError
from edgeclaw.fleetpage.access import Access
from edgeclaw.fleetpage.broker import FleetBroker
from edgeclaw.fleetpage.server import COOKIE, FleetPage
from edgeclaw.fleetpage.window import FleetWindow
from edgeclaw.net.device_trust import DeviceKeys, DeviceKeysError
from edgeclaw.net.httpd import HttpServer
from edgeclaw.net.mqtt_connection import ConnectionSettings, TlsSettings

if TYPE_CHECKING:
    from edgeclaw.fleetpage.history import HistoryStore

log = logging.getLogger("edgeclaw.fleetpage")

CATALOG_TIMEOUT_S = 60.0
HISTORY_FILENAME = "fleet-page-history.sqlite3"  # in the state directory, unless history_file names another
KEYS_FILENAME = "fleet-page-device-keys"  # in the state directory, unless device_keys_file names another
# A shared subscription group's name is one topic level: no `/`, no wildcards.
SHARE_GROUP = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def host_port(text: str, key: str, source: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:8088` for IPv6) -> (host, port); ConfigError naming `key` otherwise."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(source, key, f"expected HOST:PORT (e.g. 127.0.0.1:8088), got {text!r}")
    return host, int(port)


def _secret(ref: SecretRef | None, source: str) -> str:
    return ref.resolve(source) if ref is not None else ""


def _login_hash(config: Config) -> PinHash | None:
    fp = config.fleet_page
    if fp.login_hash and fp.login_hash_file:
        raise ConfigError(config._source, "fleet_page", "set login_hash or login_hash_file, not both")
    text, key = fp.login_hash, "fleet_page.login_hash"
    if fp.login_hash_file:
        key = "fleet_page.login_hash_file"
        text = SecretRef(key, file=fp.login_hash_file).resolve(config._source)
    if not text:
        return None
    try:
        return parse_pin_hash(text.strip())
    except ValueError as e:
        raise ConfigError(config._source, key, str(e)) from None


def build_access(config: Config) -> tuple[Access, str]:
    """The login's rules, and the token made for this run when the config names neither a hash nor one.

    Never open: without a configured secret the run gets a random token of its own, printed on
    the terminal of whoever started it (and gone when it stops), so a first look needs no set-up.
    """
    fp = config.fleet_page
    password = _login_hash(config)
    token = (
        SecretRef("fleet_page.token_file", file=fp.token_file).resolve(config._source)
        if fp.token_file
        else ""
    )
    made = ""
    if password is None and not token:
        token = made = secrets.token_urlsafe(18)
    access = Access(
        password_hash=password,
        token=token,
        ttl_s=fp.session_ttl_s,
        max_sessions=fp.max_sessions,
        max_failures=fp.max_login_failures,
        lockout_s=fp.lockout_s,
    )
    return access, made


def device_keys(config: Config) -> DeviceKeys:
    """The keys each device must sign with: `[fleet_page] device_keys`, the keys file, first sight."""
    fp = config.fleet_page
    path = Path(fp.device_keys_file) if fp.device_keys_file else state_dir(config.state_dir) / KEYS_FILENAME
    try:
        return DeviceKeys(fp.device_keys, file=path, first_use=fp.trust_on_first_use)
    except DeviceKeysError as e:
        key = "fleet_page.device_keys" if str(e).startswith("fleet_page.") else "fleet_page.device_keys_file"
        raise ConfigError(config._source, key, str(e)) from None


def history_store(config: Config) -> HistoryStore | None:
    """The history kept across restarts (`[fleet_page] history_store`), or None when it is off."""
    from edgeclaw.fleetpage.history import open_history  # sqlite3 only when the page runs

    fp = config.fleet_page
    path = Path(fp.history_file) if fp.history_file else state_dir(config.state_dir) / HISTORY_FILENAME
    try:
        return open_history(fp.history_store, path, fp.history_retention_s, fp.history_dsn)
    except ValueError as e:
        raise ConfigError(config._source, "fleet_page.history_store", str(e)) from None
    except OSError as e:  # sqlite3.Error is caught by the caller's run: this is the directory
        raise ConfigError(config._source, "fleet_page.history_file", f"{path}: {e}") from None


def _share_group(config: Config, given: str | None) -> str:
    """The shared subscription group (`--share-group`, else `[fleet_page] share_group`; "" = none)."""
    fp = config.fleet_page
    name, key, source = fp.share_group, "fleet_page.share_group", config._source
    if given is not None:
        name, key, source = given, "--share-group", "command line"
    if not name:
        return ""
    if not SHARE_GROUP.fullmatch(name):
        raise ConfigError(
            source,
            key,
            f"a group name is 1 to 64 letters, digits, _ . or - (one topic level), got {name!r:.80}",
        )
    if fp.history_store == "off":
        raise ConfigError(
            source,
            key,
            'a share group divides the history\'s writes among the pages, and history_store = "off" keeps '
            'none: set history_store = "postgresql" (one database for the group)',
        )
    if fp.history_store == "sqlite" and not fp.history_file:
        log.warning(
            "share group %s with SQLite in this page's state directory: this page's file gets only its "
            'share of the history (history_store = "postgresql" keeps one database for the group)',
            name,
        )
    return name


def connection_settings(config: Config, broker: str | None) -> ConnectionSettings:
    m = config.mqtt
    host, port = host_port(broker, "--broker", "command line") if broker else (m.host, m.port)
    if m.protocol != "5":
        raise ConfigError(
            config._source, "mqtt.protocol", "the fleet page needs MQTT 5 (Response Topic, Correlation Data)"
        )
    refs = secret_refs(config)
    tls = TlsSettings(m.tls.ca_file, m.tls.cert_file, m.tls.key_file) if m.tls is not None else None
    return ConnectionSettings(
        host=host,
        port=port,
        client_id=f"edgeclaw-fleetpage-{secrets.token_hex(4)}",
        username=m.username,
        password=_secret(refs.get("mqtt"), config._source),
        keepalive_s=m.keepalive_s,
        connect_timeout_s=m.connect_timeout_s,
        tls=tls,
    )


def tool_catalog() -> list[dict[str, Any]]:
    """The tools this installation has, with their JSON schemas, for the page's forms.

    Asked of `edgeclaw tools list --json` in a child process with an empty config and a
    throw-away state directory, so the server itself never loads the tools (or their memory).
    A device may have more (custom, MCP) or fewer (its policy): the page calls those with a
    JSON box, and the device decides either way.
    """
    with tempfile.TemporaryDirectory(prefix="edgeclaw-fleetpage-") as tmp:
        config = Path(tmp) / "edgeclaw.toml"
        config.write_text("")
        env = {k: v for k, v in os.environ.items() if not k.startswith("EDGECLAW_")}
        env.update(EDGECLAW_CONFIG=str(config), EDGECLAW_STATE_DIR=str(Path(tmp) / "state"))
        try:
            done = subprocess.run(
                [sys.executable, "-m", "edgeclaw", "tools", "list", "--json", "--board", "sim"],
                env=env,
                capture_output=True,
                timeout=CATALOG_TIMEOUT_S,
                check=False,
            )
            tools = json.loads(done.stdout) if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError):
            tools = None
    if not isinstance(tools, list):
        log.warning("the tool catalog could not be read: the page's console takes JSON arguments only")
        return []
    return [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]


async def serve(
    config: Config, *, broker: str | None = None, listen: str | None = None, share_group: str | None = None
) -> None:
    """Run the fleet page until SIGTERM / SIGINT (or cancellation)."""
    fp = config.fleet_page
    if listen:
        host, port = host_port(listen, "--listen", "command line")
    else:
        host, port = host_port(fp.listen, "fleet_page.listen", config._source)
    access, made_token = build_access(config)
    refs = secret_refs(config)
    group = _share_group(config, share_group)
    history = history_store(config)
    window = FleetWindow(
        config.mqtt.topic_prefix,
        history_s=fp.history_s,
        max_devices=fp.max_devices,
        max_events=fp.max_events,
        keys=device_keys(config),
    )
    page: FleetPage | None = None
    fleet = FleetBroker(
        connection_settings(config, broker),
        window,
        command_secret=_secret(refs.get("mqtt.hmac"), config._source),
        approver_secret=_secret(refs.get("mqtt.approver"), config._source),
        # Only for update rollouts; a page without it calls and approves, never administers.
        admin_secret=_secret(refs.get("mqtt.admin"), config._source),
        command_key_name=config.mqtt.hmac_key_name,  # the caller the page is on the devices
        approver_key_name=config.mqtt.approver_key_name,
        admin_key_name=config.mqtt.admin_key_name,
        on_update=lambda updates: page.publish(updates) if page is not None else None,
        on_history=lambda updates: page.record(updates) if page is not None else None,
        share_group=group,
    )
    tools = await asyncio.to_thread(tool_catalog)
    page = FleetPage(
        window,
        fleet,
        access,
        tools=tools,
        call_timeout_s=fp.call_timeout_s,
        broadcast_wait_s=fp.broadcast_wait_s,
        history=history,
    )
    fleet.connection.open()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if host not in ("127.0.0.1", "::1", "localhost"):
        log.warning(
            "the fleet page listens on %s, not loopback: put a TLS reverse proxy in front of it", host
        )
    allowed_hosts = config.fleet_page.allowed_hosts
    async with HttpServer(page, host, port, max_body=256 * 1024, allowed_hosts=allowed_hosts) as http:
        page.cookie = f"{COOKIE}_{http.bound_port}"  # two pages on one host keep their own sessions
        runner = asyncio.create_task(fleet.run())
        watcher = asyncio.create_task(page.watch_broker())
        writer = asyncio.create_task(history.run()) if history is not None else None
        where = f"http://{host if ':' not in host else f'[{host}]'}:{http.bound_port}/"
        log.info(
            "fleet page on %s (broker %s:%d)",
            where,
            fleet.connection.settings.host,
            fleet.connection.settings.port,
        )
        if made_token:
            # On stderr, not through the logger (which may write a file that outlives the run).
            # Under systemd stderr is the journal: a service configures a hash or a token file.
            print(
                f"no login_hash or token_file in [fleet_page]: log in with this run's token {made_token}",
                file=sys.stderr,
            )
        print(f"fleet page on {where}", file=sys.stderr, flush=True)
        try:
            await stop.wait()
        finally:
            watcher.cancel()
            await page.rollouts.close()  # each stopped, its devices not reached recorded as skipped
            await fleet.connection.stop(runner)
            if writer is not None and history is not None:
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer  # its last flush
                history.close()
