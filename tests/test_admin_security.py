"""What the everyday command key cannot do through the gateway tool: run code as the daemon by an
update, install an older version unasked, take the device's defences down by a config; and that a
config which kills the daemon before it is healthy is rolled back at the next start.
"""

from __future__ import annotations

import asyncio
import base64
import csv
import hashlib
import io
import json
import logging
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from edgeclaw.admin.config_apply import WEAKENING, ConfigTrial, apply_config, validate_text, weakened_keys
from edgeclaw.admin.update import Slots, apply_update, check_newer, check_wheel, install, release_key
from edgeclaw.config.schema import GatewayConfig
from edgeclaw.errors import ToolError
from edgeclaw.tools.audit import AuditTrail


# -- wheels ------------------------------------------------------------------------------------------
def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(
    files: dict[str, bytes | str],
    version: str = "9.9.9",
    unlisted: dict[str, bytes | str] | None = None,
    record_override: dict[str, str] | None = None,
) -> bytes:
    """An edgeclaw wheel holding `files` (RECORD lists them, with `record_override` digests), and
    `unlisted` files RECORD does not name."""
    dist = f"edgeclaw-{version}.dist-info"
    content = {k: v.encode() if isinstance(v, str) else v for k, v in files.items()}
    content[f"{dist}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: edgeclaw\nVersion: {version}\n\nText\n".encode()
    )
    content[f"{dist}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in content.items():
        writer.writerow([name, (record_override or {}).get(name, _digest(data)), len(data)])
    writer.writerow([f"{dist}/RECORD", "", ""])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in content.items():
            z.writestr(name, data)
        for name, data in (unlisted or {}).items():
            z.writestr(name, data)
        z.writestr(f"{dist}/RECORD", record.getvalue())
    return buf.getvalue()


def booby_trapped(marker: Path, version: str = "9.9.9") -> bytes:
    """A wheel whose package writes `marker` as soon as anything imports it."""
    init = f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n__version__ = {version!r}\n"
    return make_wheel({"edgeclaw/__init__.py": init, "edgeclaw/__main__.py": init}, version)


def check(data: bytes, config: GatewayConfig | None = None) -> Any:
    return check_wheel(data, hashlib.sha256(data).hexdigest(), None, config or GatewayConfig())


def test_a_well_formed_wheel_passes_the_checks_without_running():
    wheel = check(make_wheel({"edgeclaw/__init__.py": "__version__ = '9.9.9'\n"}))
    assert wheel.version == "9.9.9"


@pytest.mark.parametrize(
    "why, data",
    [
        (
            "not listed in the wheel's RECORD",
            make_wheel({"edgeclaw/__init__.py": ""}, unlisted={"edgeclaw/extra.py": "x = 1\n"}),
        ),
        (
            "does not match its digest",
            make_wheel(
                {"edgeclaw/__init__.py": ""}, record_override={"edgeclaw/__init__.py": _digest(b"other")}
            ),
        ),
        (
            "outside the edgeclaw package",
            make_wheel({"edgeclaw/__init__.py": "", "evil.pth": "import os\n"}),
        ),
        (
            "outside the edgeclaw package",
            make_wheel({"edgeclaw/__init__.py": "", "edgeclaw-9.9.9.data/scripts/x": "#!/bin/sh\n"}),
        ),
    ],
)
def test_a_wheel_whose_files_are_not_the_ones_its_record_vouches_for_is_refused(why, data):
    with pytest.raises(ToolError, match=why):
        check(data)


def test_a_record_listing_a_file_the_wheel_lacks_is_refused():
    data = make_wheel({"edgeclaw/__init__.py": ""})
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    record = "edgeclaw-9.9.9.dist-info/RECORD"
    entries[record] += b"edgeclaw/gone.py,sha256=abc,1\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, value in entries.items():
            z.writestr(name, value)
    with pytest.raises(ToolError, match="lists files it lacks"):
        check(buf.getvalue())


def test_installing_a_wheel_never_imports_it(tmp_path):
    """The install check reads the slot's metadata back; the wheel's code first runs at its own start."""
    marker = tmp_path / "ran-as-the-daemon"
    wheel = check(booby_trapped(marker))
    slots = Slots(tmp_path / "state")
    target = install(slots, wheel)
    assert (target / ".installed").exists()
    assert not marker.exists()


# -- update requests -----------------------------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.trail = AuditTrail()
        self.trail.add_sink(self.events.append)

    def emit(self, kind: str, /, **fields: Any) -> dict[str, Any]:
        return self.trail.emit(kind, **fields)


def runtime_for(tmp_path: Path, gateway: GatewayConfig) -> Any:
    return SimpleNamespace(
        config=SimpleNamespace(gateway=gateway), state_dir=tmp_path / "state", audit=Recorder()
    )


def upload(runtime: Any, data: bytes, name: str = "w1") -> dict[str, Any]:
    from edgeclaw.admin.update_upload import store_chunk

    store_chunk(runtime.state_dir, runtime.config.gateway, name, 0, 1, base64.b64encode(data).decode())
    return {"upload": name, "sha256": hashlib.sha256(data).hexdigest()}


def signer() -> tuple[Any, str]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = Ed25519PrivateKey.generate()
    return key, key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


async def test_an_unsigned_update_without_a_key_or_the_opt_in_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran-as-the-daemon"
    runtime = runtime_for(tmp_path, GatewayConfig())
    restarts: list[str] = []
    with pytest.raises(ToolError, match="allow_unsigned_updates = true") as refused:
        await apply_update(
            runtime, upload(runtime, booby_trapped(marker)), "mqtt:key:command", restarts.append
        )
    assert "update_public_key" in str(refused.value)
    assert not marker.exists()
    assert Slots(runtime.state_dir).installed() == [] and restarts == []


async def test_an_unsigned_update_is_installed_only_with_the_opt_in_and_still_never_run(tmp_path):
    marker = tmp_path / "ran-as-the-daemon"
    runtime = runtime_for(tmp_path, GatewayConfig(allow_unsigned_updates=True))
    restarts: list[str] = []
    done = await apply_update(runtime, upload(runtime, booby_trapped(marker)), "admin", restarts.append)
    assert done["ok"] is True and done["signed"] is False and done["version"] == "9.9.9"
    await asyncio.sleep(0.4)
    assert restarts  # the new version's first run is the daemon's own start, on trial
    assert not marker.exists()
    [event] = [e for e in runtime.audit.events if e["kind"] == "update"]
    assert event["signed"] is False


def test_versions_are_ordered_as_releases():
    assert release_key("0.1.0") > release_key("0.0.1")
    assert release_key("0.10") > release_key("0.9.9")
    assert release_key("1.0") == release_key("1.0.0")
    assert release_key("1.0rc1") < release_key("1.0") < release_key("1.0.post1")
    assert release_key("1.0.dev1") < release_key("1.0a1")
    assert release_key("1.0+local") == release_key("1.0")  # a local label is not newer
    with pytest.raises(ToolError, match="cannot compare"):
        release_key("latest")


def test_a_version_not_newer_than_the_running_one_needs_the_flag():
    check_newer("0.2.0", "0.1.0", False)
    for older in ("0.0.1", "0.1.0", "0.1.0+rebuilt"):
        with pytest.raises(ToolError, match="allow_downgrade"):
            check_newer(older, "0.1.0", False)
        check_newer(older, "0.1.0", True)


async def test_a_signed_downgrade_is_refused_unless_the_request_allows_it(tmp_path, monkeypatch):
    monkeypatch.setattr("edgeclaw.__version__", "0.1.0")
    key, public = signer()
    runtime = runtime_for(tmp_path, GatewayConfig(update_public_key=public))
    data = make_wheel({"edgeclaw/__init__.py": "__version__ = '0.0.1'\n"}, "0.0.1")
    args = {**upload(runtime, data), "signature": key.sign(data).hex()}
    with pytest.raises(ToolError, match=r"not newer than the running 0\.1\.0"):
        await apply_update(runtime, args, "admin", lambda why: None)
    assert Slots(runtime.state_dir).installed() == []
    done = await apply_update(runtime, {**args, "allow_downgrade": True}, "admin", lambda why: None)
    assert done["ok"] is True and done["signed"] is True and done["version"] == "0.0.1"
    [event] = [e for e in runtime.audit.events if e["kind"] == "update"]
    assert event["downgrade"] is True


# -- config_apply ------------------------------------------------------------------------------------
BASE_CONFIG = (
    'board = "sim"\ndevice_id = "sec-01"\nlog_level = "info"\n'
    '[mqtt]\nhmac_secret_env = "EC_HMAC"\nadmin_secret_env = "EC_ADMIN"\n'
    "[mcp.server]\n"
    "[fleet_page]\n"
)

MCP_TOKEN = 'token_file = "/etc/edgeclaw/mcp-token"\n'  # required with a listener

# (key, the base config changed so that it weakens that key)
WEAKER = [
    ("sandbox.backend", BASE_CONFIG + '[sandbox]\nbackend = "none"\n'),
    ("sandbox.required", BASE_CONFIG + "[sandbox]\nrequired = false\n"),
    ("mqtt.hmac_secret", BASE_CONFIG.replace('hmac_secret_env = "EC_HMAC"\n', "")),
    ("mqtt.admin_secret", BASE_CONFIG.replace('admin_secret_env = "EC_ADMIN"\n', "")),
    ("mqtt.admin_unsigned", BASE_CONFIG.replace("[mqtt]\n", "[mqtt]\nadmin_unsigned = true\n")),
    ("mqtt.broadcast_admin", BASE_CONFIG.replace("[mqtt]\n", "[mqtt]\nbroadcast_admin = true\n")),
    ("tools.channels.mqtt", BASE_CONFIG + '[tools.channels.mqtt]\nprofile = "full"\n'),
    ("tools.channels.mqtt", BASE_CONFIG + '[tools.channels.mqtt]\nallow = ["group:runtime"]\n'),
    ("tools.channels.mcp", BASE_CONFIG + '[tools.channels.mcp]\nprofile = "full"\n'),
    ("tools.exec.security", BASE_CONFIG + '[tools.exec]\nsecurity = "full"\n'),
    (
        "mcp.server.listen",
        BASE_CONFIG.replace(
            "[mcp.server]\n",
            '[mcp.server]\nlisten = "0.0.0.0:8765"\nallow_plain_http = true\n' + MCP_TOKEN,
        ),
    ),
    (
        "fleet_page.listen",
        BASE_CONFIG.replace(
            "[fleet_page]\n", '[fleet_page]\nlisten = "192.168.1.5:8088"\nallow_plain_http = true\n'
        ),
    ),
    ("mcp.servers", BASE_CONFIG + '[mcp.servers.x]\ncommand = "/bin/true"\nsandbox = false\n'),
]


def config_of(text: str, path: Path) -> Any:
    config, problems = validate_text(text, str(path))
    assert config is not None, problems
    return config


def test_every_weakening_rule_has_a_case():
    assert {key for key, _ in WEAKER} | {"tools.profile", "tools.deny"} == {key for key, *_ in WEAKENING}


def test_what_weakens_global_policy_and_what_does_not(tmp_path):
    base = config_of(BASE_CONFIG + '[tools]\nprofile = "coding"\ndeny = ["exec"]\n', tmp_path / "c.toml")
    wider = config_of(BASE_CONFIG + '[tools]\nprofile = "full"\ndeny = ["exec"]\n', tmp_path / "c.toml")
    undenied = config_of(BASE_CONFIG + '[tools]\nprofile = "coding"\n', tmp_path / "c.toml")
    narrower = config_of(
        BASE_CONFIG + '[tools]\nprofile = "minimal"\ndeny = ["exec", "process"]\n', tmp_path / "c.toml"
    )
    assert weakened_keys(base, wider) == ["tools.profile"]
    assert weakened_keys(base, undenied) == ["tools.deny"]
    assert weakened_keys(base, narrower) == []
    assert weakened_keys(narrower, base) == ["tools.profile", "tools.deny"]


def test_listeners_on_loopback_and_narrower_tool_lists_do_not_weaken(tmp_path):
    path = tmp_path / "c.toml"
    base = config_of(BASE_CONFIG, path)
    for harmless in (
        BASE_CONFIG.replace(
            "[mcp.server]\n",
            '[mcp.server]\nlisten = "127.0.0.1:8765"\n' + MCP_TOKEN,
        ),
        BASE_CONFIG.replace("[mcp.server]\n", '[mcp.server]\nlisten = "[::1]:8765"\n' + MCP_TOKEN),
        BASE_CONFIG + '[tools.channels.mqtt]\nallow = ["read_file"]\n',
        BASE_CONFIG + '[tools.channels.mqtt]\nprofile = "minimal"\n',
        BASE_CONFIG + '[sandbox]\nbackend = "bubblewrap"\n',
        BASE_CONFIG.replace('hmac_secret_env = "EC_HMAC"', 'hmac_secret_file = "/etc/edgeclaw/hmac"'),
    ):
        assert weakened_keys(base, config_of(harmless, path)) == [], harmless


class Policy:
    rules = None

    def replace_rules(self, rules: Any) -> None:
        self.rules = rules

    def validate(self) -> list[tuple[str, str]]:
        return []


def daemon_with(tmp_path: Path, text: str = BASE_CONFIG) -> tuple[Any, Path, list[str]]:
    path = tmp_path / "edgeclaw.toml"
    path.write_text(text)
    runtime = SimpleNamespace(
        config=config_of(text, path), audit=Recorder(), registry=SimpleNamespace(policy=Policy())
    )
    return runtime, path, []


@pytest.mark.parametrize("key, text", WEAKER, ids=[f"{k}-{i}" for i, (k, _) in enumerate(WEAKER)])
async def test_a_config_that_weakens_security_needs_its_key_acknowledged(tmp_path, key, text):
    runtime, path, restarts = daemon_with(tmp_path)
    for acknowledged in ([], ["something.else"]):
        refused = await apply_config(runtime, text, "mqtt:key:command", restarts.append, acknowledged)
        assert refused["ok"] is False and key in refused["text"] and refused["weakened"] == [key]
        assert "nothing was written" in refused["text"] and "acknowledge" in refused["text"]
        assert path.read_text() == BASE_CONFIG
    [event, _] = [e for e in runtime.audit.events if e["kind"] == "config_apply"]
    assert event["outcome"] == "refused" and event["weakened"] == [key]
    applied = await apply_config(runtime, text, "mqtt:key:command", restarts.append, [key])
    assert applied["ok"] is True, applied
    assert path.read_text() == text
    done = runtime.audit.events[-1]
    assert done["kind"] == "config_apply" and done["weakened"] == [key] and done["changed"]
    await asyncio.sleep(0.3)  # the restart asked for a moment after the answer


async def test_a_harmless_config_is_applied_without_acknowledgement_and_audited(tmp_path, caplog):
    runtime, path, restarts = daemon_with(tmp_path)
    newer = BASE_CONFIG.replace('log_level = "info"', 'log_level = "debug"')
    newer += '[tools.channels.mqtt]\nprofile = "minimal"\n'  # narrower: no acknowledgement needed
    with caplog.at_level(logging.INFO, logger="edgeclaw.audit"):
        applied = await apply_config(runtime, newer, "mqtt:key:command", restarts.append)
    assert applied["ok"] is True, applied
    assert path.read_text() == newer
    [event] = [e for e in runtime.audit.events if e["kind"] == "config_apply"]
    assert event["changed"] == ["log_level", "tools.channels"] and event["weakened"] == []
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("config_apply")]
    assert "log_level" in line and "tools.channels" in line and "weakened=" in line


# -- a config that kills the daemon before it is healthy ---------------------------------------------
def test_a_start_that_finds_the_trial_still_trying_restores_the_previous_config(tmp_path):
    path = tmp_path / "edgeclaw.toml"
    path.write_text("old\n")
    trial = ConfigTrial(path)
    (tmp_path / "edgeclaw.toml.previous").write_text("old\n")
    path.write_text("new\n")
    trial.begin("admin", ["log_level"])
    # The first start on the new file marks the trial as running; it is still the new file.
    assert ConfigTrial(path).before_start() is None
    assert json.loads(trial.marker.read_text())["state"] == "trying"
    assert path.read_text() == "new\n"
    # It died before it was healthy: the next start puts the previous file back before reading it.
    again = ConfigTrial(path)
    assert again.before_start() is not None
    assert path.read_text() == "old\n"
    assert json.loads(trial.marker.read_text())["state"] == "rolled_back" and not again.trying


def test_edgeclaw_run_honours_a_trial_left_trying(tmp_path):
    """End to end: `edgeclaw run` on a file whose trial never reported healthy starts on the previous
    file (and reports the rollback once healthy)."""
    from tests.mqtt_support import daemon_env, run_daemon, stop_daemon

    good = 'board = "sim"\ndevice_id = "sec-02"\n[automation]\nclock_sync = "off"\n'
    path = tmp_path / "edgeclaw.toml"
    (tmp_path / "edgeclaw.toml.previous").write_text(good)
    # What the killed daemon was trying: valid, so only the marker can tell it must not be kept.
    path.write_text(good.replace('"sec-02"', '"sec-killed"'))
    (tmp_path / "edgeclaw.toml.apply").write_text(
        json.dumps({"state": "trying", "at": time.time(), "by": "admin", "changed": ["device_id"]})
    )
    log = tmp_path / "daemon.log"
    proc = run_daemon(daemon_env(tmp_path / "state", path), log)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (tmp_path / "edgeclaw.toml.apply").exists():
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        assert not (tmp_path / "edgeclaw.toml.apply").exists(), log.read_text()[-3000:]
    finally:
        stop_daemon(proc)
    assert path.read_text() == good
    assert "rolled back" in log.read_text()
