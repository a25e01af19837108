"""The state database's migrations and transactions, and the approval broker's fail-closed rules."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from edgeclaw.errors import BackendError
from edgeclaw.store import Database, Migration
from edgeclaw.tools.approval import ApprovalBroker, ApprovalRequest, Decision
from edgeclaw.tools.base import ToolContext

NOTES = [Migration("notes-1", ["CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)"])]


def test_migrations_run_once_and_survive_reopen(tmp_path):
    db = Database.in_state_dir(tmp_path)
    assert db.migrate(NOTES) == ["notes-1"]
    db.execute("INSERT INTO notes (body) VALUES (?)", ("kept",))
    db.close()
    again = Database.in_state_dir(tmp_path)
    assert again.migrate(NOTES) == []
    assert [r["body"] for r in again.query("SELECT body FROM notes")] == ["kept"]
    assert again.query("PRAGMA journal_mode")[0][0] == "wal"


def test_failed_transaction_leaves_nothing(tmp_path):
    db = Database.in_state_dir(tmp_path)
    db.migrate(NOTES)
    with pytest.raises(sqlite3.IntegrityError), db.transaction() as conn:
        conn.execute("INSERT INTO notes (body) VALUES ('half')")
        conn.execute("INSERT INTO notes (body) VALUES (NULL)")
    assert db.query("SELECT count(*) FROM notes")[0][0] == 0


def test_a_failing_migration_is_not_recorded(tmp_path):
    db = Database.in_state_dir(tmp_path)
    bad = Migration("bad-1", ["CREATE TABLE ok (x)", "CREATE TABLE broken ("])
    with pytest.raises(sqlite3.OperationalError):
        db.migrate([bad])
    assert db.query("SELECT name FROM sqlite_master WHERE name = 'ok'") == []
    assert db.migrate(NOTES) == ["notes-1"]


def test_an_unusable_state_directory_is_a_backend_error(tmp_path):
    # A state directory that cannot be created is reported like any other database problem,
    # so the CLI prints one line instead of a traceback.
    (tmp_path / "file").write_text("")
    with pytest.raises(BackendError, match="cannot open the state database"):
        Database.in_state_dir(tmp_path / "file" / "state")


def test_a_file_that_is_not_a_database_is_a_backend_error(tmp_path):
    (tmp_path / "edgeclaw.db").write_bytes(b"this is not SQLite" * 100)
    with pytest.raises(BackendError, match="not a database"):
        Database.in_state_dir(tmp_path)


class ScriptedApprover:
    def __init__(self, answer: Decision | None = None, delay: float = 0.0, fail: bool = False) -> None:
        self.answer, self.delay, self.fail = answer, delay, fail
        self.asked: list[ApprovalRequest] = []

    async def ask_approval(self, request: ApprovalRequest) -> Decision | None:
        self.asked.append(request)
        await asyncio.sleep(self.delay)
        if self.fail:
            raise ConnectionError("console unplugged")
        return self.answer


CTX = ToolContext(channel="console", session_key="console:ttyGS0")


@pytest.mark.parametrize("answer", [Decision.ALLOW_ONCE, Decision.ALLOW_ALWAYS])
async def test_allow_decisions_pass_through(answer):
    broker = ApprovalBroker()
    approver = ScriptedApprover(answer)
    broker.register("console", approver)
    decision, reason = await broker.request("exec", "apt-get install htop", CTX)
    assert decision is answer and reason == ""
    assert approver.asked[0].summary == "apt-get install htop" and approver.asked[0].seconds_left > 100


@pytest.mark.parametrize(
    ("approver", "wait_s", "needle"),
    [
        (None, 1, "cannot ask"),
        (ScriptedApprover(Decision.DENY), 1, "denied"),
        (ScriptedApprover(None), 1, "nobody could be asked"),
        (ScriptedApprover(Decision.ALLOW_ONCE, delay=5), 0.05, "timed out"),
        (ScriptedApprover(fail=True), 1, "could not be asked"),
    ],
)
async def test_everything_else_denies(approver, wait_s, needle):
    broker = ApprovalBroker()
    if approver is not None:
        broker.register("console", approver)
    decision, reason = await broker.request("exec", "rm -rf build", CTX, timeout_s=wait_s)
    assert decision is Decision.DENY and needle in reason


async def test_question_goes_to_the_callers_channel_only():
    broker = ApprovalBroker()
    console = ScriptedApprover(Decision.ALLOW_ONCE)
    broker.register("console", console)
    decision, _ = await broker.request("exec", "x", ToolContext(channel="mqtt"))
    assert decision is Decision.DENY and console.asked == []


def test_the_database_is_private_to_the_daemon_user(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        db = Database.in_state_dir(tmp_path / "state")
        db.migrate(NOTES)
        db.execute("INSERT INTO notes (body) VALUES ('x')")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    for name in ("edgeclaw.db", "edgeclaw.db-wal"):
        assert stat.S_IMODE((tmp_path / "state" / name).stat().st_mode) == 0o600
