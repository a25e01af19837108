"""A damaged, foreign or vanished state database, against real SQLite files, a real `edgeclaw run`
and `edgeclaw doctor`; backups; what `status` and the MQTT `events` topic are told.

Each damaged case starts from a real database holding a session with a message taken into the
backup ("before the backup") and one written after it ("after the backup"), so a restore is
visible: the first is back, the second is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edgeclaw.errors import BackendError
from edgeclaw.store.backup import BackupFailed, write_backup
from edgeclaw.store.db import APPLICATION_ID, FORMAT_VERSION, StorageFull
from edgeclaw.store.recovery import examine
from edgeclaw.store.sessions import SessionStore
from edgeclaw.store.state import StateStore
from tests.mqtt_support import Caller, Mosquitto, needs_mosquitto
from tests.test_mqtt import BASE, daemon_config, running_daemon

BEFORE = "remembered from before the backup"
AFTER = "written after the backup"
PADDING = "p" * 2000


def _populate(state: Path, *, backup: bool = True) -> None:
    """A real database: one session with enough rows that cutting it in half hits data."""
    store = StateStore(state, backup_interval_s=3600)
    sessions = SessionStore(store.open())
    sessions.append("cli:kept", "cli", json.dumps({"role": "user", "content": BEFORE}), 5)
    for i in range(300):
        sessions.append(f"cli:pad{i % 7}", "cli", json.dumps({"content": PADDING}), 500)
    if backup:
        assert store.backup()
    sessions.append("cli:kept", "cli", json.dumps({"role": "user", "content": AFTER}), 5)
    store.close()  # no backup on close: "after" is only in the live database


def _messages(state: Path) -> list[str]:
    conn = sqlite3.connect(state / "edgeclaw.db")
    try:
        return [
            r[0] for r in conn.execute("SELECT body FROM messages WHERE session_key = 'cli:kept' ORDER BY id")
        ]
    finally:
        conn.close()


def _zero(db: Path) -> None:
    db.write_bytes(b"")


def _half(db: Path) -> None:
    os.truncate(db, db.stat().st_size // 2)


def _corrupt_page(db: Path) -> None:
    """Garbage inside one data page: the header, the identity and the schema still read fine."""
    with open(db, "r+b") as f:
        f.seek(4096 * 150 + 100)
        f.write(os.urandom(3000))


def _garbage(db: Path) -> None:
    db.write_bytes(os.urandom(64 * 1024))


def _foreign(db: Path) -> None:
    db.unlink()
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, jpeg BLOB)")
    conn.execute("INSERT INTO photos (jpeg) VALUES (x'ffd8ffe0')")
    conn.commit()
    conn.close()


def _foreign_with_id(db: Path) -> None:
    _foreign(db)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA application_id = 1598903374")  # "Fossil"-style: someone else's id
    conn.commit()
    conn.close()


DAMAGE: dict[str, tuple[Callable[[Path], None], str, str]] = {
    # name: (how, what the log and doctor say, the kind in the moved file's name)
    "zero-truncated": (_zero, "truncated to 0 bytes", "damaged"),
    "half-truncated": (_half, "damaged", "damaged"),
    "random garbage": (_garbage, "not an SQLite database", "damaged"),
    "a corrupted page": (_corrupt_page, "quick_check", "damaged"),
    "another app's database": (_foreign, "not edgeclaw's", "foreign"),
    "another app's application_id": (_foreign_with_id, "another application's SQLite database", "foreign"),
}


def _clear_side_files(db: Path) -> None:
    for side in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            Path(f"{db}{side}").unlink()


# -- against the store itself ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damage_is_moved_aside_kept_and_the_backup_restored(tmp_path: Path, kind: str) -> None:
    state = tmp_path / "state"
    _populate(state)
    db = state / "edgeclaw.db"
    _clear_side_files(db)  # a clean stop leaves none; damage is done to the one file
    damage, words, moved_kind = DAMAGE[kind]
    damage(db)
    damaged_digest = hashlib.sha256(db.read_bytes()).hexdigest()
    store = StateStore(state)
    store.open()
    health = store.health
    assert health is not None and health.outcome == "restored" and words in health.problem
    moved = health.moved_to[0]
    assert moved.name.startswith(f"edgeclaw.db.{moved_kind}-")
    assert hashlib.sha256(moved.read_bytes()).hexdigest() == damaged_digest  # kept as it was
    store.close()
    bodies = _messages(state)
    assert any(BEFORE in b for b in bodies) and not any(AFTER in b for b in bodies)
    assert examine(db) is None


def _drop(db: Path, table: str) -> None:
    conn = sqlite3.connect(db)
    conn.execute(f"DROP TABLE {table}")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("recorded", [True, False], ids=["tables-recorded", "only-the-backup-knows"])
def test_a_dropped_table_is_damage_set_aside_and_recovered(tmp_path: Path, recorded: bool) -> None:
    state = tmp_path / "state"
    _populate(state)
    identity = state / "edgeclaw.db.id"
    assert json.loads(identity.read_text())["tables"] == ["messages", "schema_migrations", "sessions"]
    if not recorded:  # an identity file from before tables were recorded: the backup's count
        identity.write_text(
            json.dumps({k: v for k, v in json.loads(identity.read_text()).items() if k != "tables"})
        )
    db = state / "edgeclaw.db"
    _drop(db, "messages")
    _clear_side_files(db)
    assert examine(db) is None  # sound as a file: only what it had before tells
    store = StateStore(state)
    store.open()
    health = store.health
    assert health is not None and health.outcome == "restored", health
    assert "tables it had are missing: messages" in health.problem
    assert health.moved_to[0].name.startswith("edgeclaw.db.damaged-") and health.moved_to[0].exists()
    store.close()
    bodies = _messages(state)  # the table is back, from the backup
    assert any(BEFORE in b for b in bodies)


def test_a_dropped_table_without_a_backup_starts_empty(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _populate(state, backup=False)
    _drop(state / "edgeclaw.db", "sessions")
    store = StateStore(state)
    db = store.open()
    assert store.health is not None and store.health.outcome == "replaced"
    assert "tables it had are missing: sessions" in store.health.problem
    SessionStore(db).append("cli:new", "cli", json.dumps({"content": "fresh"}), 5)  # no traceback: usable
    store.close()
    again = StateStore(state)
    again.open()
    assert again.health is not None and again.health.outcome == "ok"  # the fresh one's tables recorded
    again.close()


def test_without_a_backup_a_damaged_database_is_replaced_by_an_empty_one(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _populate(state, backup=False)
    _garbage(state / "edgeclaw.db")
    store = StateStore(state)
    db = store.open()
    assert store.health is not None and store.health.outcome == "replaced"
    assert "request ledger are gone" in store.health.summary()
    assert db.identity() == (APPLICATION_ID, FORMAT_VERSION)
    store.close()


def test_an_empty_file_on_a_first_start_is_a_fresh_database_not_damage(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "edgeclaw.db").write_bytes(b"")
    store = StateStore(state)
    db = store.open()
    assert store.health is not None and store.health.outcome == "created" and not store.health.moved_to
    assert db.identity() == (APPLICATION_ID, FORMAT_VERSION)
    store.close()
    # From now on the identity file says a database existed: the same empty file is damage.
    (state / "edgeclaw.db").write_bytes(b"")
    _clear_side_files(state / "edgeclaw.db")
    again = StateStore(state)
    again.open()
    assert again.health is not None and again.health.outcome == "replaced"
    again.close()


def test_a_database_of_a_newer_format_is_refused_and_left_alone(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _populate(state)
    conn = sqlite3.connect(state / "edgeclaw.db")
    conn.execute(f"PRAGMA user_version = {FORMAT_VERSION + 1}")
    conn.commit()
    conn.close()
    digest = hashlib.sha256((state / "edgeclaw.db").read_bytes()).hexdigest()
    with pytest.raises(BackendError, match="written by a newer edgeclaw"):
        StateStore(state).open()
    assert hashlib.sha256((state / "edgeclaw.db").read_bytes()).hexdigest() == digest
    assert not [p for p in state.iterdir() if ".damaged-" in p.name or ".foreign-" in p.name]


def test_a_database_from_before_the_identity_was_stamped_is_adopted(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    conn = sqlite3.connect(state / "edgeclaw.db")
    conn.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    conn.execute("INSERT INTO schema_migrations VALUES ('sessions-0', 0)")
    conn.commit()
    conn.close()
    store = StateStore(state)
    db = store.open()
    assert store.health is not None and store.health.outcome == "ok"
    assert db.identity() == (APPLICATION_ID, FORMAT_VERSION)
    store.close()


def test_a_backup_of_a_damaged_database_never_replaces_the_good_one(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _populate(state)
    backup = state / "edgeclaw.db.backup"
    good = backup.read_bytes()
    _half(state / "edgeclaw.db")
    with pytest.raises(BackupFailed):
        write_backup(state / "edgeclaw.db", backup)
    assert backup.read_bytes() == good
    assert not [p for p in state.iterdir() if ".tmp-" in p.name]  # no half-written copy left


# -- against a real `edgeclaw run` and `edgeclaw doctor` -----------------------------------------------


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "edgeclaw.toml"
    config.write_text(f'board = "sim"\nstate_dir = "{tmp_path / "state"}"\n')
    out = {
        k: v for k, v in os.environ.items() if not k.startswith(("EDGECLAW_", "NOTIFY_SOCKET", "WATCHDOG_"))
    }
    out["EDGECLAW_CONFIG"] = str(config)
    return out


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgeclaw", *args], env=env, capture_output=True, text=True, timeout=60
    )


@contextlib.contextmanager
def _daemon(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "edgeclaw", "run"], env=env, stderr=err)
    try:
        deadline = time.monotonic() + 30
        while "INFO edgeclaw.daemon: ready" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, f"the daemon exited: {log.read_text()}"
            time.sleep(0.05)
        assert "ready" in log.read_text(), log.read_text()
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(20) == 0, log.read_text()
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()


def _finding(doctor_out: str, check: str) -> str:
    lines = [line for line in doctor_out.splitlines() if f"  {check}:" in line]
    assert lines, f"no {check!r} finding in:\n{doctor_out}"
    return lines[0]


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_the_daemon_starts_from_the_backup_and_says_so(
    tmp_path: Path, env: dict[str, str], kind: str
) -> None:
    state = tmp_path / "state"
    _populate(state)
    db = state / "edgeclaw.db"
    _clear_side_files(db)
    damage, words, moved_kind = DAMAGE[kind]
    damage(db)
    log = tmp_path / "daemon.log"
    with _daemon(env, log):
        status = _cli(env, "status", "--json")
        assert status.returncode == 0, status.stderr
        state_db = json.loads(status.stdout)["state_db"]
        assert state_db["outcome"] == "restored" and words in state_db["problem"]
        assert state_db["moved_to"] and state_db["restored_from"].endswith("edgeclaw.db.backup")
        assert state_db["last_recovery"]["moved_to"] == state_db["moved_to"]
    text = log.read_text()
    [error] = [line for line in text.splitlines() if "ERROR edgeclaw.store.state" in line]
    moved = state_db["moved_to"][0]
    assert words in error and moved in error and "started from the backup" in error
    assert Path(moved).exists() and Path(moved).name.startswith(f"edgeclaw.db.{moved_kind}-")
    assert "state_database outcome=restored" in text  # the audit line (also an MQTT event)

    after = _cli(env, "doctor")
    assert _finding(after.stdout, "state database").startswith("ok")
    recovery = _finding(after.stdout, "state database recovery")
    assert recovery.startswith("warn") and moved in recovery and words in recovery
    bodies = _messages(state)
    assert any(BEFORE in b for b in bodies) and not any(AFTER in b for b in bodies)


@pytest.mark.parametrize("kind", ["zero-truncated", "half-truncated", "another app's database"])
def test_doctor_reports_a_damaged_database_as_a_failure(
    tmp_path: Path, env: dict[str, str], kind: str
) -> None:
    state = tmp_path / "state"
    _populate(state)
    _clear_side_files(state / "edgeclaw.db")
    damage, words, _ = DAMAGE[kind]
    damage(state / "edgeclaw.db")
    first = _cli(env, "doctor")
    assert first.returncode == 1
    failed = [line for line in first.stdout.splitlines() if line.startswith("FAIL  state database:")]
    assert failed and all(words in line for line in failed), first.stdout
    # Either doctor only looked ("will move it aside at its next start"), or opening the runtime
    # set it aside already and doctor says so: both name what is wrong, neither says ok.
    assert any("will move it aside" in line or "moved aside" in line for line in failed)
    second = _cli(env, "doctor")
    assert _finding(second.stdout, "state database recovery").startswith("warn")


def test_a_good_database_starts_quietly_and_keeps_everything(tmp_path: Path, env: dict[str, str]) -> None:
    state = tmp_path / "state"
    _populate(state)
    before = sorted(p.name for p in state.iterdir() if p.name != "edgeclaw.db.backup")
    assert _finding(_cli(env, "doctor").stdout, "state database").startswith("ok")
    log = tmp_path / "daemon.log"
    with _daemon(env, log):
        pass
    text = log.read_text()
    assert "ERROR" not in text and "moved aside" not in text
    assert "state database backed up" in text  # at the clean stop
    assert set(before) <= {p.name for p in state.iterdir()}
    bodies = _messages(state)
    assert any(BEFORE in b for b in bodies) and any(AFTER in b for b in bodies)
    doctor = _cli(env, "doctor").stdout
    assert "state database recovery" not in doctor
    assert _finding(doctor, "state backup").startswith("ok")


def test_the_daemon_starts_past_a_dropped_table_without_a_traceback(
    tmp_path: Path, env: dict[str, str]
) -> None:
    state = tmp_path / "state"
    _populate(state)
    with _daemon(env, tmp_path / "first.log"):
        pass  # every store's tables made, and recorded at the clean stop
    _drop(state / "edgeclaw.db", "custom_tools")  # read while the runtime is built
    log = tmp_path / "daemon.log"
    with _daemon(env, log):
        status = json.loads(_cli(env, "status", "--json").stdout)["state_db"]
    text = log.read_text()
    assert "Traceback" not in text and "no such table" not in text, text
    assert status["outcome"] == "restored" and "custom_tools" in status["problem"], status
    [error] = [line for line in text.splitlines() if "ERROR edgeclaw.store.state" in line]
    assert "tables it had are missing: custom_tools" in error and "moved aside" in error


def test_a_newer_database_stops_the_start_with_a_reason(tmp_path: Path, env: dict[str, str]) -> None:
    state = tmp_path / "state"
    _populate(state)
    conn = sqlite3.connect(state / "edgeclaw.db")
    conn.execute(f"PRAGMA user_version = {FORMAT_VERSION + 7}")
    conn.commit()
    conn.close()
    out = _cli(env, "run")
    assert out.returncode == 1 and "written by a newer edgeclaw" in out.stderr
    assert _finding(_cli(env, "doctor").stdout, "state database").startswith("FAIL")


# -- the MQTT event -----------------------------------------------------------------------------------


@needs_mosquitto
async def test_a_recovery_is_published_on_events_and_shown_in_status(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _populate(state)
    _clear_side_files(state / "edgeclaw.db")
    _garbage(state / "edgeclaw.db")
    broker = Mosquitto(tmp_path / "broker").start()
    try:
        async with (
            Caller(broker.port, [f"{BASE}/events"]) as c,
            running_daemon(daemon_config(tmp_path, broker.port)) as d,
        ):

            def recovery_event() -> dict | None:
                events = (m.json for m in c.on(f"{BASE}/events"))
                return next((e for e in events if e.get("kind") == "state_database"), None)

            event = await c.wait_for(recovery_event)
            assert event["outcome"] == "restored" and "not an SQLite database" in event["problem"]
            assert event["moved_to"][0].startswith(str(state / "edgeclaw.db.damaged-"))
            health = d.runtime.state_health
            assert health["outcome"] == "restored" and health["reserve"]["bytes"] > 0
    finally:
        broker.kill()


def test_storage_full_is_also_an_sqlite_error_naming_what_was_not_stored(tmp_path: Path) -> None:
    error = StorageFull("a message of session 'cli:x'", tmp_path / "edgeclaw.db")
    assert isinstance(error, sqlite3.OperationalError) and isinstance(error, BackendError)
    assert str(error).startswith("no space left on device: could not store a message of session 'cli:x'")


async def test_the_running_daemon_backs_up_on_its_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from edgeclaw.config.loader import config_from_dict
    from edgeclaw.daemon import state as state_service_module
    from edgeclaw.daemon.lifecycle import Daemon

    monkeypatch.setattr(state_service_module, "UPKEEP_S", 0.05)
    state = tmp_path / "state"
    config = config_from_dict(
        {"board": "sim", "state_dir": str(state), "state": {"backup_interval_s": 0.3}}, "test.toml"
    )
    daemon = Daemon(config, services=[], environ={})
    run = asyncio.create_task(daemon.run())
    await asyncio.wait_for(daemon.ready.wait(), 20)
    backup = state / "edgeclaw.db.backup"
    try:
        for _ in range(200):  # the one at start
            if backup.exists():
                break
            await asyncio.sleep(0.05)
        first = backup.stat().st_mtime_ns
        SessionStore(daemon.runtime.db).append("cli:later", "cli", json.dumps({"content": AFTER}), 5)
        for _ in range(200):  # the next, an interval later, with the new row in it
            if backup.stat().st_mtime_ns != first:
                break
            await asyncio.sleep(0.05)
        conn = sqlite3.connect(backup)
        try:
            assert (
                conn.execute("SELECT count(*) FROM messages WHERE session_key = 'cli:later'").fetchone()[0]
                == 1
            )
        finally:
            conn.close()
    finally:
        daemon.request_stop()
        assert await asyncio.wait_for(run, 20) == 0
