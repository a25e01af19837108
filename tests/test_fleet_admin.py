"""Administering a device over MQTT: a real mosquitto, a real daemon process on the sim board.

The daemon runs under a small supervisor that does what the systemd unit does (`Restart=on-failure`):
it starts `python -m edgeclaw run` again whenever it exits non-zero, and `EDGECLAW_SUPERVISED=1` tells
the daemon so (it then exits 75 to restart, as under systemd, instead of running itself again in place).
Every admin command is signed with the admin key and answered exactly once on its Response Topic.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.net.signing import envelope
from tests.mqtt_support import Caller, Mosquitto, daemon_env, free_port, needs_mosquitto

pytestmark = needs_mosquitto

DEV = "fleet-adm-01"
BASE = f"edgeclaw/{DEV}"
GATEWAY = f"{BASE}/admin/gateway"
ANSWERS = "test/fleet-admin/answers"
ADMIN_KEY = "admin-key-5b1c9e0f7a"
COMMAND_KEY = "command-key-2d8f4a6b"
SETTLE_S = 1.5  # after an answer, how long a second one would have to show up


class SupervisedDaemon:
    """`python -m edgeclaw run`, started again when it exits non-zero (like Restart=on-failure)."""

    def __init__(self, tmp_path: Path, config: str, env: dict[str, str] | None = None) -> None:
        self.config_path = tmp_path / "edgeclaw.toml"
        self.config_path.write_text(config)
        self.state = tmp_path / "state"
        self.log = tmp_path / "daemon.log"
        self.env = daemon_env(
            self.state,
            self.config_path,
            EDGECLAW_SUPERVISED="1",
            EC_ADMIN=ADMIN_KEY,
            EC_HMAC=COMMAND_KEY,
        )
        self.env.update(env or {})
        self.starts = 0
        self.exits: list[int] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._supervise, daemon=True)

    def start(self) -> SupervisedDaemon:
        self._thread.start()
        return self

    def _supervise(self) -> None:
        while not self._stopping:
            self.starts += 1
            with self.log.open("ab") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "edgeclaw", "run"],
                    env=self.env,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    # Its own process group, as a service's cgroup: a power cut kills the daemon and
                    # what it started (pip) together (tests/test_update_power_cut.py).
                    start_new_session=True,
                )
            code = self.proc.wait()
            self.exits.append(code)
            if code == 0 or self._stopping:
                return
            time.sleep(0.3)

    def stop(self) -> None:
        self._stopping = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._thread.join(10)

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def device_config(port: int, extra: str = "", mqtt: str = "") -> str:
    return (
        f'board = "sim"\ndevice_id = "{DEV}"\n'
        f"[mqtt]\nenabled = true\nport = {port}\ntelemetry_interval_s = 0\ndiscovery = false\n"
        'hmac_secret_env = "EC_HMAC"\nadmin_secret_env = "EC_ADMIN"\n'
        f"{mqtt}"
        '[automation]\nclock_sync = "off"\n'
        "[gateway]\nhealth_deadline_s = 6\n" + extra
    )


@pytest.fixture
def broker(tmp_path: Path):
    b = Mosquitto(tmp_path / "broker").start()
    yield b
    b.kill()


@pytest.fixture
def supervised():
    made: list[SupervisedDaemon] = []

    def make(tmp_path: Path, config: str, env: dict[str, str] | None = None) -> SupervisedDaemon:
        d = SupervisedDaemon(tmp_path, config, env)
        made.append(d)
        return d.start()

    yield make
    for d in made:
        d.stop()


class Admin:
    """A fleet backend's side: signed admin/gateway requests, answers collected by request id."""

    def __init__(self, caller: Caller) -> None:
        self.c = caller

    async def send(self, action: str, sign: str | None = ADMIN_KEY, **args: Any) -> str:
        request_id = f"{action}-{uuid.uuid4().hex[:8]}"
        request = {"id": request_id, "action": action, **args}
        correlation = request_id.encode()
        if sign is None:
            payload: bytes | dict[str, Any] = {**request, "ts": time.time()}
        else:
            payload = envelope(
                sign.encode(), GATEWAY, request, response_topic=ANSWERS, correlation=correlation
            )
        await self.c.publish(GATEWAY, payload, response_topic=ANSWERS, correlation=correlation)
        return request_id

    def answers(self, request_id: str) -> list[dict[str, Any]]:
        return [r.json for r in self.c.on(ANSWERS) if r.correlation == request_id.encode()]

    async def once(self, request_id: str, within: float = 30.0) -> dict[str, Any]:
        """The request's answer, after checking that no second one follows."""
        await self.c.wait_for(lambda: self.answers(request_id), within, f"the answer to {request_id}")
        await asyncio.sleep(SETTLE_S)
        got = self.answers(request_id)
        assert len(got) == 1, got
        assert got[0]["id"] == request_id
        return got[0]

    async def call(self, action: str, within: float = 30.0, **args: Any) -> dict[str, Any]:
        return await self.once(await self.send(action, **args), within)


def online_since(c: Caller, after: float) -> list[dict[str, Any]]:
    """`online` status messages published after `after` (time.time())."""
    out = []
    for r in c.on(f"{BASE}/status"):
        body = r.json
        if body.get("state") == "online" and body.get("ts", 0) > after:
            out.append(body)
    return out


async def wait_online(c: Caller, after: float, within: float = 60.0) -> dict[str, Any]:
    got = await c.wait_for(lambda: online_since(c, after), within, "the device online again")
    return got[-1]


async def test_admin_actions_are_answered_once_and_only_the_admin_key_administers(
    tmp_path, broker, supervised
):
    d = supervised(tmp_path, device_config(broker.port))
    async with Caller(broker.port, [ANSWERS, f"{BASE}/status"]) as c:
        admin = Admin(c)
        await wait_online(c, 0)
        # Unsigned, or signed with the command key: refused, each with one answer that says why.
        unsigned = await admin.once(await admin.send("version", sign=None))
        assert unsigned["ok"] is False and unsigned["code"] == "bad_signature"
        command = await admin.once(await admin.send("version", sign=COMMAND_KEY))
        assert command["ok"] is False and command["code"] == "bad_signature"
        assert "admin key" in command["error"]
        # The same on the other admin topics; the admin key is taken there, and is who the caller is.
        for topic, request in ((f"{BASE}/admin/cron", {"action": "list"}),
                               (f"{BASE}/admin/tools", {"action": "list"})):  # fmt: skip
            for sign, request_id in ((COMMAND_KEY, f"cmd-{topic[-4:]}"), (ADMIN_KEY, f"adm-{topic[-4:]}")):
                body = {"id": request_id, **request}
                await c.publish(topic, envelope(sign.encode(), topic, body, response_topic=ANSWERS),
                                response_topic=ANSWERS)  # fmt: skip
                [got] = await c.wait_for(
                    lambda rid=request_id: [r.json for r in c.on(ANSWERS) if r.json.get("id") == rid]
                )
                assert got["ok"] is (sign == ADMIN_KEY), got
        cron_job = {
            "id": "job1",
            "action": "add",
            "every": "1h",
            "tool": "hardware_info",
            "args": {},
            "to": "none",
        }
        topic = f"{BASE}/admin/cron"
        await c.publish(topic, envelope(ADMIN_KEY.encode(), topic, cron_job, response_topic=ANSWERS),
                        response_topic=ANSWERS)  # fmt: skip
        [added] = await c.wait_for(lambda: [r.json for r in c.on(ANSWERS) if r.json.get("id") == "job1"])
        assert added["ok"] and added["data"]["job"]["owner"] == "mqtt:admin", added
        # The command key still signs ordinary tool calls.
        call = {"id": "t1", "tool": "hardware_info", "args": {}}
        tool = f"{BASE}/tool/call"
        await c.publish(tool, envelope(COMMAND_KEY.encode(), tool, call, response_topic=ANSWERS),
                        response_topic=ANSWERS)  # fmt: skip
        await c.wait_for(lambda: [r for r in c.on(ANSWERS) if r.json.get("id") == "t1" and r.json["ok"]])

        version = await admin.call("version")
        assert version["ok"] is True and version["action"] == "version"
        from edgeclaw import __version__

        assert version["data"]["edgeclaw"] == __version__

        # config_get: the effective file with secrets as the names that hold them, never values.
        got = await admin.call("config_get")
        assert got["ok"] and "EC_ADMIN" in got["for_llm"] and ADMIN_KEY not in json.dumps(got)
        port = await admin.call("config_get", key="mqtt.port")
        assert port["data"]["value"] == broker.port

        # logs: the last N lines, and with a level only records at it or above.
        logs = await admin.call("logs", lines=5)
        assert logs["ok"] and 1 <= logs["data"]["lines"] <= 5
        warned = await admin.call("logs", lines=200, level="warning")
        assert warned["ok"]
        lines = warned["for_llm"].splitlines() if warned["data"]["lines"] else []
        assert not [line for line in lines if " INFO " in line or " DEBUG " in line], lines
        bad = await admin.call("logs", level="loud")
        assert bad["ok"] is False

        # restart: one answer, then the device goes away and comes back (a new process).
        pid = d.proc.pid
        before = time.time()
        restart_id = await admin.send("restart", reason="test")
        answer = await admin.once(restart_id)
        assert answer["ok"] is True and answer["data"]["restarting"] is True
        await wait_online(c, before)
        await c.wait_for(lambda: d.proc.pid != pid, 30, "a new daemon process")
        await asyncio.sleep(SETTLE_S)
        assert len(admin.answers(restart_id)) == 1  # not answered again by the new process
        # And it answers again.
        assert (await admin.call("version"))["ok"] is True
    assert 75 in d.exits  # the restart was an exit for the supervisor, not a crash


async def test_config_apply_over_mqtt_good_then_unreachable_broker_rolled_back(tmp_path, broker, supervised):
    good = device_config(broker.port)
    d = supervised(tmp_path, good)
    async with Caller(broker.port, [ANSWERS, f"{BASE}/status"]) as c:
        admin = Admin(c)
        await wait_online(c, 0)
        # Refused before anything is written: not TOML, an unknown key.
        for broken in ('board = "sim\n', good + "bogus_key = 1\n"):
            refused = await admin.call("config_apply", content=broken)
            assert refused["ok"] is False and "nothing was written" in refused["for_llm"]
            assert d.config_path.read_text() == good

        # A good file that needs a restart: applied, the device back on it.
        newer = good.replace("telemetry_interval_s = 0", "telemetry_interval_s = 3600")
        before = time.time()
        applied = await admin.call("config_apply", content=newer)
        assert applied["ok"] is True and applied["data"]["how"] == "restart", applied
        await wait_online(c, before)
        marker = d.config_path.with_name("edgeclaw.toml.apply")
        await c.wait_for(lambda: not marker.exists(), 30, "the trial confirmed")
        value = await admin.call("config_get", key="mqtt.telemetry_interval_s")
        assert value["data"]["value"] == 3600

        # A file every check passes, but the daemon cannot reach a broker on it: not healthy by the
        # deadline, so the previous file is put back and the device is online again on it.
        nowhere = newer.replace(f"port = {broker.port}", f"port = {free_port()}")
        before = time.time()
        applied = await admin.call("config_apply", content=nowhere)
        assert applied["ok"] is True and applied["data"]["how"] == "restart"
        back = await wait_online(c, before + 1, within=90)
        assert back["state"] == "online"
        await c.wait_for(lambda: d.config_path.read_text() == newer, 30, "the previous file back")
        await c.wait_for(lambda: not marker.exists(), 30, "the rollback reported")
        value = await admin.call("config_get", key="mqtt.port")
        assert value["data"]["value"] == broker.port
    log = d.text()
    assert "not healthy within 6 s" in log and "rolled back" in log, log[-3000:]


# -- updates ---------------------------------------------------------------------------------------
REPO = Path(__file__).resolve().parent.parent


def _build_wheel(source: Path, out: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
         "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [wheel] = out.glob("edgeclaw-*.whl")
    return wheel


def _patched_copy(root: Path, version_tag: str, path: str, old: str, new: str) -> Path:
    """This checkout copied, with a version of its own and one patch."""
    import shutil

    copy = root / f"src-{version_tag}"
    copy.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (copy / name).write_bytes((REPO / name).read_bytes())
    shutil.copytree(REPO / "board_profiles", copy / "board_profiles")
    shutil.copytree(REPO / "edgeclaw", copy / "edgeclaw", ignore=shutil.ignore_patterns("__pycache__"))
    init = copy / "edgeclaw" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "', f'__version__ = "9.9.9+{version_tag}.'))
    target = copy / path
    text = target.read_text()
    assert text.count(old) == 1, (path, old)
    target.write_text(text.replace(old, new))
    return _build_wheel(copy, root / version_tag)


@pytest.fixture(scope="session")
def wheels(tmp_path_factory):
    """A wheel of this checkout; one of a patched copy whose daemon fails at start-up; one whose
    daemon starts but never reports healthy."""
    root = tmp_path_factory.mktemp("wheels")
    main = (REPO / "edgeclaw" / "__main__.py").read_text()
    return {
        "good": _build_wheel(REPO, root / "good"),
        "broken": _patched_copy(
            root, "broken", "edgeclaw/__main__.py", main,
            'raise SystemExit("this build of edgeclaw fails at start-up")\n' + main,
        ),
        "unhealthy": _patched_copy(
            root, "unhealthy", "edgeclaw/channels/mqtt/channel.py",
            "        if self.connection.connected:\n            return None\n",
            '        if self.connection.connected:\n            return "this build never reports healthy"\n',
        ),
    }  # fmt: skip


def sha256_of(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def file_server(tmp_path: Path):
    """Plain HTTP on loopback serving a directory (the fleet's file server)."""
    import functools
    import http.server

    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))

    class Quiet(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):  # a client gone mid-answer is not news
            pass

    server = Quiet(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


UPDATE_CONFIG = '[gateway]\nupdate_allow_networks = ["127.0.0.0/8"]\nhealth_deadline_s = {deadline}\n{more}'


def update_device_config(port: int, deadline: float = 20, more: str = "") -> str:
    return device_config(port).replace(
        "[gateway]\nhealth_deadline_s = 6\n", UPDATE_CONFIG.format(deadline=deadline, more=more)
    )


def signing_key() -> tuple[Any, str]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = Ed25519PrivateKey.generate()
    return key, key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


@pytest.mark.parametrize("restart", ["supervised", "in_place"])
async def test_update_by_url_switches_slots_and_a_corrupt_or_unsigned_wheel_is_refused(
    tmp_path, broker, supervised, wheels, file_server, restart
):
    served, base_url = file_server
    good = wheels["good"]
    (served / good.name).write_bytes(good.read_bytes())
    key, public = signing_key()
    config = update_device_config(broker.port, more=f'update_public_key = "{public}"\n')
    # in_place: no supervisor is declared, so the daemon restarts by running itself again (execv).
    d = supervised(tmp_path, config, {"EDGECLAW_SUPERVISED": "1" if restart == "supervised" else "0"})
    async with Caller(broker.port, [ANSWERS, f"{BASE}/status"]) as c:
        admin = Admin(c)
        await wait_online(c, 0)
        before = await admin.call("version")
        assert before["data"]["slot"] == "base" and before["data"]["current"] == "base"

        # A wheel whose bytes are not the ones the request names: refused, nothing installed.
        corrupt = served / "edgeclaw-0.0.1-py3-none-any.whl"
        data = bytearray(good.read_bytes())
        data[len(data) // 2] ^= 0xFF
        corrupt.write_bytes(bytes(data))
        refused = await admin.call("update", url=f"{base_url}/{corrupt.name}", sha256=sha256_of(good))
        assert refused["ok"] is False and "SHA-256 mismatch" in refused["error"], refused
        assert not list((d.state / "venvs").glob("*/.installed"))
        # With a public key configured: unsigned, or signed over other bytes, refused.
        url = f"{base_url}/{good.name}"
        unsigned = await admin.call("update", url=url, sha256=sha256_of(good))
        assert unsigned["ok"] is False and "must carry its signature" in unsigned["error"]
        wrong = key.sign(bytes(data)).hex()
        forged = await admin.call("update", url=url, sha256=sha256_of(good), signature=wrong)
        assert forged["ok"] is False and "signature does not match" in forged["error"]
        assert not list((d.state / "venvs").glob("*/.installed"))

        # The real one: installed beside the running version, switched to, healthy, kept. It is this
        # checkout's own version, not newer than the running one: the request says that is intended.
        pid = d.proc.pid
        t0 = time.time()
        signature = key.sign(good.read_bytes()).hex()
        same = await admin.call("update", url=url, sha256=sha256_of(good), signature=signature)
        assert same["ok"] is False and "allow_downgrade" in same["error"], same
        done = await admin.call(
            "update", url=url, sha256=sha256_of(good), signature=signature, allow_downgrade=True, within=300
        )
        assert done["ok"] is True and done["data"]["signed"] is True, done
        slot = done["data"]["slot"]
        assert slot.startswith("0.") and done["data"]["previous"] == "base"
        await wait_online(c, t0, within=120)
        await c.wait_for(lambda: not (d.state / "venvs" / "update.json").exists(), 60, "the update confirmed")
        after = await admin.call("version")
        assert after["data"]["slot"] == slot and after["data"]["current"] == slot
        assert after["data"]["executable"].startswith(str(d.state / "venvs" / slot))
        assert os.readlink(d.state / "venvs" / "current") == slot
        # In place: the same process all along; supervised: a new one started by the supervisor.
        assert (d.proc.pid == pid) is (restart == "in_place")
    assert "in force (healthy)" in d.text()


async def test_update_in_chunks_of_a_version_that_fails_to_start_is_rolled_back(
    tmp_path, broker, supervised, wheels
):
    broken = wheels["broken"]
    d = supervised(tmp_path, update_device_config(broker.port, more="allow_unsigned_updates = true\n"))
    async with Caller(broker.port, [ANSWERS, f"{BASE}/status"]) as c:
        admin = Admin(c)
        await wait_online(c, 0)
        import base64

        data = broken.read_bytes()
        size = 32 * 1024
        parts = [data[i : i + size] for i in range(0, len(data), size)]
        # Out of order, and one part sent twice: each answered once, the repeat harmless.
        order = [*range(1, len(parts)), 0, 1]
        for index in order:
            got = await admin.call(
                "update_chunk", upload="broken1", index=index, total=len(parts),
                data=base64.b64encode(parts[index]).decode(),
            )  # fmt: skip
            assert got["ok"] is True, got
        assert got["data"]["received"] == len(parts)
        too_big = await admin.call(
            "update_chunk",
            upload="broken2",
            index=0,
            total=1,
            data=base64.b64encode(b"x" * (size + 1)).decode(),
        )
        assert too_big["ok"] is False and "update_chunk_bytes" in too_big["error"]
        missing = await admin.call("update", upload="nothing-here", sha256="0" * 64)
        assert missing["ok"] is False and "no upload" in missing["error"]

        t0 = time.time()
        done = await admin.call("update", upload="broken1", sha256=sha256_of(broken), within=300)
        assert done["ok"] is True, done
        slot = done["data"]["slot"]
        assert slot.startswith("9.9.9+broken.")
        # It dies at start-up; the next start (by the supervisor, as systemd would) puts the base back.
        back = await wait_online(c, t0, within=120)
        assert back["state"] == "online"
        await c.wait_for(
            lambda: not (d.state / "venvs" / "update.json").exists(), 60, "the rollback reported"
        )
        after = await admin.call("version")
        assert after["data"]["slot"] == "base" and after["data"]["current"] == "base"
        assert slot in after["data"]["slots"]  # kept installed, not run
    log = d.text()
    assert "fails at start-up" in log and "rolled back" in log, log[-3000:]


def test_old_slots_are_pruned_but_never_the_current_or_the_previous(tmp_path, monkeypatch):
    from edgeclaw.admin.update import Slots, prune

    monkeypatch.delenv("EDGECLAW_SLOT", raising=False)
    slots = Slots(tmp_path)
    for i, name in enumerate(["0.1-a", "0.2-b", "0.3-c", "0.4-d", "0.5-e"]):
        (slots.root / name).mkdir(parents=True)
        (slots.root / name / ".installed").write_text("{}")
        os.utime(slots.root / name, (1000 + i, 1000 + i))
    slots.switch("0.5-e")
    slots.write_trial({"state": "pending", "slot": "0.5-e", "previous": "0.1-a"})
    removed = prune(slots, 3)
    # Kept: the current, the one to go back to (the oldest), and the newest other one.
    assert sorted(removed) == ["0.2-b", "0.3-c"]
    assert slots.installed() == ["0.1-a", "0.4-d", "0.5-e"]


def test_a_zip_that_is_not_an_edgeclaw_wheel_is_refused(tmp_path):
    import hashlib
    import io
    import zipfile

    from edgeclaw.admin.update import check_wheel
    from edgeclaw.config.schema import GatewayConfig
    from edgeclaw.errors import ToolError

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("other/__init__.py", "")
        z.writestr("other-1.0.dist-info/METADATA", "Name: other\nVersion: 1.0\n")
    data = buf.getvalue()
    with pytest.raises(ToolError, match="not an edgeclaw wheel"):
        check_wheel(data, hashlib.sha256(data).hexdigest(), None, GatewayConfig())
    with pytest.raises(ToolError, match="update_max_bytes"):
        check_wheel(data, hashlib.sha256(data).hexdigest(), None, GatewayConfig(update_max_bytes=10))
    with pytest.raises(ToolError, match="64 hex digits"):
        check_wheel(data, "abc", None, GatewayConfig())


async def test_update_to_a_version_that_never_reports_healthy_is_rolled_back_by_itself(
    tmp_path, broker, supervised, wheels, file_server
):
    served, base_url = file_server
    unhealthy = wheels["unhealthy"]
    (served / unhealthy.name).write_bytes(unhealthy.read_bytes())
    d = supervised(
        tmp_path, update_device_config(broker.port, deadline=6, more="allow_unsigned_updates = true\n")
    )
    async with Caller(broker.port, [ANSWERS, f"{BASE}/status"]) as c:
        admin = Admin(c)
        await wait_online(c, 0)
        done = await admin.call(
            "update", url=f"{base_url}/{unhealthy.name}", sha256=sha256_of(unhealthy), within=300
        )
        assert done["ok"] is True, done
        slot = done["data"]["slot"]
        # It runs (and even connects), but its health check never passes: past the deadline it puts
        # the base installation back itself and restarts through it.
        marker = d.state / "venvs" / "update.json"
        current = d.state / "venvs" / "current"
        await c.wait_for(lambda: d.text().count("not healthy within 6 s"), 120, "the deadline passed")
        await c.wait_for(lambda: not os.path.lexists(current) and not marker.exists(), 60, "the rollback")
        after = await admin.call("version")
        assert after["data"]["slot"] == "base" and slot in after["data"]["slots"]
    log = d.text()
    assert "this build never reports healthy" in log
    # The reason on record is the new version's own verdict, not a guess made at the next start.
    assert f"the update to {slot} was rolled back (not healthy within 6 s" in log, log[-3000:]


# -- dependencies: a bundle of the release and the wheels it needs -----------------------------------
def _tiny_wheel(out: Path, name: str = "tinydep", version: str = "1.0") -> Path:
    """A pure-Python wheel of one module, made by hand (a dependency no index has)."""
    import base64
    import hashlib
    import zipfile

    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{name}-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
        ),
        f"{name}-{version}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }

    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{n},sha256={digest(d)},{len(d)}\n" for n, d in files.items())
    record += f"{name}-{version}.dist-info/RECORD,,\n"
    path = out / f"{name}-{version}-py3-none-any.whl"
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr(f"{name}-{version}.dist-info/RECORD", record)
    return path


def _bundle(out: Path, wheels: list[Path], manifest: dict[str, str] | None = None) -> Path:
    import io
    import json
    import tarfile

    manifest = manifest if manifest is not None else {w.name: sha256_of(w) for w in wheels}
    path = out / "bundle.tar"
    with tarfile.open(path, "w") as tar:
        for member, data in [("manifest.json", json.dumps({"wheels": manifest}).encode())] + [
            (w.name, w.read_bytes()) for w in wheels
        ]:
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="session")
def needs_dep(tmp_path_factory):
    """A wheel of this checkout that depends on `tinydep`, and tinydep's wheel."""
    root = tmp_path_factory.mktemp("needs-dep")
    release = _patched_copy(
        root,
        "needsdep",
        "pyproject.toml",
        '    "httpx>=0.27,<1",\n',
        '    "httpx>=0.27,<1",\n    "tinydep==1.0",\n',
    )
    return release, _tiny_wheel(root / "deps")


def test_a_release_that_adds_a_dependency_installs_from_its_bundle_and_a_bad_bundle_changes_nothing(
    tmp_path, needs_dep
):
    from edgeclaw.admin.update import Slots, check_bundle, check_wheel, install
    from edgeclaw.config.schema import GatewayConfig
    from edgeclaw.errors import ToolError

    release, dep = needs_dep
    config = GatewayConfig(update_max_bytes=64 << 20)
    slots = Slots(tmp_path / "state")

    # The wheel alone: its new dependency is nowhere (no index is asked), so it is refused before any
    # switch, its half-made slot removed.
    alone = check_wheel(release.read_bytes(), sha256_of(release), release.name, config)
    with pytest.raises(ToolError, match="tinydep"):
        install(slots, alone)
    assert slots.installed() == []

    # A bundle whose manifest names a wrong digest for the dependency: refused as a whole, naming it.
    (tmp_path / "bad").mkdir()
    bad = _bundle(tmp_path / "bad", [release, dep], {release.name: sha256_of(release), dep.name: "0" * 64})
    with pytest.raises(ToolError, match=r"SHA-256 mismatch in the bundle: tinydep-1\.0-py3-none-any\.whl"):
        check_bundle(bad.read_bytes(), sha256_of(bad), config)
    # A file the manifest does not name, and a bundle without the release, are refused too.
    (tmp_path / "extra").mkdir()
    stray = _bundle(tmp_path / "extra", [release, dep], {release.name: sha256_of(release)})
    with pytest.raises(ToolError, match="not in the manifest"):
        check_bundle(stray.read_bytes(), sha256_of(stray), config)
    (tmp_path / "norelease").mkdir()
    bare = _bundle(tmp_path / "norelease", [dep])
    with pytest.raises(ToolError, match="exactly one edgeclaw wheel"):
        check_bundle(bare.read_bytes(), sha256_of(bare), config)
    assert slots.installed() == []

    # The good bundle: the dependency lands in the slot's own site-packages beside the release.
    (tmp_path / "good").mkdir()
    good = _bundle(tmp_path / "good", [release, dep])
    wheel = check_bundle(good.read_bytes(), sha256_of(good), config)
    assert [name for name, _ in wheel.deps] == [dep.name]
    target = install(slots, wheel)
    assert slots.installed() == [wheel.slot]
    assert list(target.glob("lib/python*/site-packages/tinydep/__init__.py"))
    assert len(list(target.glob("lib/python*/site-packages/edgeclaw-*.dist-info"))) == 1
