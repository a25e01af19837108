"""The request ledger on its own (a real SQLite database, no broker): what is recorded before a
request is acknowledged, when it may run again, what a restarted daemon answers, and the bounds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edgeclaw.channels.mqtt.dedup import (
    MAX_WAITERS,
    Finished,
    Recorded,
    RequestLedger,
    Seen,
    journal_key,
    request_key,
)
from edgeclaw.channels.mqtt.outbox import Kind, Outbox, OutMessage
from edgeclaw.store.db import Database


@pytest.fixture
def db(tmp_path: Path):
    database = Database(tmp_path / "state.db")
    yield database
    database.close()


def route(n: int = 1) -> Recorded:
    return Recorded(f"reply/{n}", f"corr-{n}".encode(), f"id-{n}", "work")


def commit(db: Database, finished: Finished[str]) -> list[str]:
    """Write a conclusion as the channel does: inside the transaction that stores the answer."""
    box = Outbox(db, 100)
    box.put(OutMessage(Kind.ANSWER, "reply/x", b"{}", box.next_order()), finished.record)
    return finished.waiters


def test_request_keys_name_the_content_not_only_the_id():
    key = request_key("tool", "1", ["work", {"n": "1"}])
    assert key != request_key("tool", "1", ["work", {"n": "2"}])  # same id, other content: another request
    assert request_key("tool", "1", ["w", {"a": 1, "b": 2}]) == request_key(
        "tool", "1", ["w", {"b": 2, "a": 1}]
    )


def test_a_stored_request_is_not_run_again_after_the_window_until_the_purge_forgets_it(db):
    ledger: RequestLedger[str] = RequestLedger(db, window_s=0.05)
    key = request_key("tool", "1", ["work", {"n": "1"}])
    assert ledger.begin(key, route(), started=True).seen is Seen.NEW
    commit(db, ledger.finish(key, b'{"ok":true}'))
    time.sleep(0.1)  # past the window; the purge has not run
    again = ledger.begin(key, route(2), started=True)
    assert again.seen is Seen.DONE and again.answer == b'{"ok":true}'
    # A restarted daemon, too: only the purge makes the id new.
    restarted: RequestLedger[str] = RequestLedger(db, window_s=0.05)
    assert restarted.lookup(key).seen is Seen.DONE
    assert restarted.purge() == 1
    assert restarted.begin(key, route(3), started=True).seen is Seen.NEW


def test_a_running_request_collects_its_copies_and_bounds_them(db):
    ledger: RequestLedger[str] = RequestLedger(db, window_s=60)
    key = request_key("tool", "1", [])
    ledger.begin(key, route(), started=True)
    assert ledger.begin(key, route(2), started=True).seen is Seen.RUNNING
    assert all(ledger.wait(key, f"copy-{i}") for i in range(MAX_WAITERS))
    assert ledger.wait(key, "one-too-many") is False  # answered "busy" by the channel
    assert ledger.in_memory == (1, MAX_WAITERS)
    assert commit(db, ledger.finish(key, b"a")) == [f"copy-{i}" for i in range(MAX_WAITERS)]
    assert ledger.in_memory == (0, 0)
    assert ledger.lookup(key).seen is Seen.DONE


def test_what_a_restarted_daemon_finds_unfinished_and_whether_it_may_have_run(db):
    ledger: RequestLedger[str] = RequestLedger(db, window_s=60)
    waiting, running, moved, done = (request_key("tool", str(i), []) for i in range(4))
    ledger.begin(waiting, route(1), started=False)
    ledger.begin(running, route(2), started=True)
    ledger.begin(moved, route(3), started=False)
    ledger.start(moved)  # its turn came: recorded as running before it runs
    ledger.begin(done, route(4), started=True)
    commit(db, ledger.finish(done, b"answer"))
    chat = journal_key("chat")
    ledger.begin(chat, Recorded("chat/out", None, None, "mqtt:ops"), started=True)
    assert ledger.unfinished() == []  # all of them are this process's own

    restarted: RequestLedger[str] = RequestLedger(db, window_s=60)
    found = {u.key: u for u in restarted.unfinished()}
    assert set(found) == {waiting, running, moved, chat}
    assert not found[waiting].may_have_run
    assert found[running].may_have_run and found[moved].may_have_run
    assert found[running].recorded == route(2) and found[running].kind == "tool"
    assert found[chat].kind == "chat" and found[chat].recorded.label == "mqtt:ops"
    looked = restarted.lookup(waiting)
    assert looked.seen is Seen.INTERRUPTED and not looked.may_have_run
    assert restarted.lookup(running).may_have_run


def test_unfinished_rows_outlive_the_purge_and_journal_rows_go_when_answered(db):
    ledger: RequestLedger[str] = RequestLedger(db, window_s=0.01)
    key = request_key("tool", "long", [])
    ledger.begin(key, route(), started=True)
    chat = journal_key("chat")
    ledger.begin(chat, route(2), started=True)
    time.sleep(0.05)
    assert ledger.purge() == 0  # a request running longer than the window keeps its row
    commit(db, ledger.finish(chat, b"reply"))
    assert db.query("SELECT count(*) FROM mqtt_requests WHERE key = ?", (chat,))[0][0] == 0
    commit(db, ledger.finish(key, b"done"))
    time.sleep(0.05)
    assert ledger.purge() == 1
    assert db.query("SELECT count(*) FROM mqtt_requests")[0][0] == 0


def test_abandon_lets_a_request_that_never_ran_run_later(db):
    ledger: RequestLedger[str] = RequestLedger(db, window_s=60)
    ledger.begin("tool:k:0", route(), started=False)
    ledger.wait("tool:k:0", "r")
    assert commit(db, ledger.abandon("tool:k:0")) == ["r"]
    assert ledger.lookup("tool:k:0").seen is Seen.NEW


def test_a_conclusion_is_written_with_the_answer_or_not_at_all(db):
    ledger: RequestLedger[str] = RequestLedger(db, window_s=60)
    key = request_key("tool", "1", [])
    ledger.begin(key, route(), started=True)
    finished = ledger.finish(key, b"answer")
    box = Outbox(db, 100)

    def failing_record(conn):
        assert finished.record is not None
        finished.record(conn)
        raise OSError("disk full")  # the answer's row cannot be written either

    with pytest.raises(OSError):
        box.put(OutMessage(Kind.ANSWER, "reply/1", b"answer", box.next_order()), failing_record)
    assert box.depth == 0 and box.peek(10) == []
    # Still unfinished in the database: a restart answers it `interrupted`, not nothing.
    assert [u.key for u in RequestLedger(db, window_s=60).unfinished()] == [key]
