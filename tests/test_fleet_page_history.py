"""The fleet page's history in SQLite: batched writes, downsampling, retention, kept across a restart."""

from __future__ import annotations

import functools
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeclaw.fleetpage.history import HEALTH_SLOT_S, HistoryStore, open_history


class Clock:
    def __init__(self) -> None:
        self.now = 100_000.0

    def __call__(self) -> float:
        return self.now


async def test_what_is_added_is_written_in_one_batch_and_read_back_newest_first(tmp_path: Path):
    store = HistoryStore(tmp_path / "h.sqlite3", retention_s=3600, clock=Clock())
    for n in range(5):
        store.add("events", "a", {"ts": 99_000.0 + n, "tool": "i2c", "n": n})
    store.add("answers", "b", {"ts": 99_000.0, "ok": True, "broadcast": "hardware_info"})
    assert await store.records("events") == []  # not written before the flush
    await store.flush()
    events = await store.records("events", limit=3)
    assert [e["n"] for e in events] == [4, 3, 2] and events[0]["device"] == "a"
    assert [e["n"] for e in await store.records("events", before=99_002.0)] == [1, 0]
    assert (await store.records("answers", device="b"))[0]["broadcast"] == "hardware_info"
    assert await store.records("answers", device="a") == []
    with pytest.raises(ValueError, match="kind must be one of"):
        await store.records("passwords")
    journal = sqlite3.connect(tmp_path / "h.sqlite3").execute("PRAGMA journal_mode").fetchone()[0]
    assert journal == "wal"
    store.close()


async def test_health_is_kept_one_point_a_slot_and_old_rows_go(tmp_path: Path):
    clock = Clock()
    store = HistoryStore(tmp_path / "h.sqlite3", retention_s=3600, clock=clock)
    for n in range(100):  # a report a second for 100 s
        store.add_health("a", [clock.now - 100 + n, 40.0 + n, 0.1, 20.0])
    await store.flush()
    points = await store.health("a", 0)
    assert len(points) == 100 / HEALTH_SLOT_S and points[0] == [clock.now - 100, 40.0, 0.1, 20.0]
    store.add("events", "a", {"ts": clock.now - 10})
    await store.flush()
    clock.now += 3600 - 50  # the first half of those points is now past the retention
    await store.flush()
    assert len(await store.health("a", 0)) == 5
    assert len(await store.records("events")) == 1
    store.close()


async def test_history_outlives_the_store(tmp_path: Path):
    path = tmp_path / "state" / "h.sqlite3"
    store = HistoryStore(path, retention_s=3600, clock=Clock())
    store.add("approvals", "a", {"ts": 99_999.0, "id": "q1", "tool": "exec"})
    await store.flush()
    store.close()
    again = HistoryStore(path, retention_s=3600, clock=Clock())
    assert [q["id"] for q in await again.records("approvals")] == ["q1"]
    again.close()


def test_postgresql_needs_its_dsn_and_off_keeps_nothing(tmp_path: Path):
    with pytest.raises(ValueError, match="needs history_dsn"):
        open_history("postgresql", tmp_path / "h", 3600)
    assert open_history("off", tmp_path / "h", 3600) is None
    assert not (tmp_path / "h").exists()


PG_BIN = Path("/usr/lib/postgresql/15/bin")


@pytest.fixture
def postgres() -> Iterator[str]:
    """A PostgreSQL cluster of the test's own in a temp dir, on a Unix socket only; its DSN."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'psycopg[binary]')")
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL's server is not installed ({PG_BIN}/initdb: apt install postgresql)")
    # initdb refuses to run as root: the cluster belongs to the postgres user when we are root.
    as_user: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL as another user")
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="edgeclaw-pg-"))
    if as_user:
        shutil.chown(root, "postgres")
    data = root / "data"
    run = functools.partial(subprocess.run, check=True, capture_output=True, timeout=120)
    run([*as_user, str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"])
    options = f"-c listen_addresses='' -c unix_socket_directories={root} -c fsync=off"
    run(
        [
            *as_user,
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-w",
            "-l",
            str(root / "log"),
            "start",
        ]
    )
    try:
        yield f"host={root} user=postgres dbname=postgres"
    finally:
        subprocess.run([*as_user, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


async def test_postgresql_keeps_the_same_history_with_the_same_queries(tmp_path: Path, postgres: str):
    clock = Clock()
    store = open_history("postgresql", tmp_path / "unused", 3600, postgres)
    assert store is not None
    store.clock = clock
    store.add_health("a", [clock.now - 20, 41.5, 0.25, 30.0])
    store.add("events", "a", {"ts": clock.now - 5, "tool": "i2c"})
    store.add("answers", "b", {"ts": clock.now - 4, "ok": True})
    await store.flush()
    store.close()
    again = open_history("postgresql", tmp_path / "unused", 3600, postgres)  # a restart
    assert again is not None
    again.clock = clock
    assert await again.health("a", 0) == [[clock.now - 20, 41.5, 0.25, 30.0]]  # 64-bit time stamps
    assert [e["tool"] for e in await again.records("events", device="a")] == ["i2c"]
    assert [e["device"] for e in await again.records("answers")] == ["b"]
    clock.now += 3600  # past the retention
    await again.flush()
    assert await again.health("a", 0) == [] and await again.records("events") == []
    again.close()
    assert not (tmp_path / "unused").exists()
    with pytest.raises(ValueError, match="cannot use the PostgreSQL database"):
        open_history(
            "postgresql", tmp_path / "x", 3600, postgres.replace("dbname=postgres", "dbname=nothing")
        )
