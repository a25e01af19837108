"""A PostgreSQL server of a test's own: `initdb` and `pg_ctl` in a temp dir, on a Unix socket only.

Used as the `postgres` fixture (its DSN) by tests/test_fleet_page_history.py and
tests/test_fleet_page_shared.py.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

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
