"""Two fleet pages on one broker and one PostgreSQL database: a real mosquitto, two real
`edgeclaw run --board sim` daemons, two `edgeclaw fleet serve` in child processes, and a PostgreSQL
server of the test's own.

In a share group (`share_group`) every page shows every device, and each message reaches the history
through one page only; without one, both pages write everything and the unique keys keep each row once.
The same on SQLite, with every message delivered twice, in one process.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fleet_support import (
    TOKEN,
    WAIT_S,
    Fleet,
    PageServer,
    module_broker,  # noqa: F401  (a fixture: the module's broker)
    page_fleet,
)
from tests.mqtt_support import MOSQUITTO, Mosquitto, poll
from tests.postgres_support import postgres  # noqa: F401  (a fixture)

pytestmark = pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed")

BEARER = {"Authorization": f"Bearer {TOKEN}"}
PSYCOPG = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'psycopg[binary]')")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, broker: Mosquitto) -> Iterator[Fleet]:
    f = page_fleet(tmp_path_factory.mktemp("fleet"), broker.port, 2)
    yield f
    f.stop()


def two_pages(root: Path, broker: Mosquitto, dsn: str, **page: Any) -> list[PageServer]:
    settings = {"history_store": "postgresql", "history_dsn": dsn, **page}
    first = PageServer(root / "page-a", broker.port, **settings)
    try:
        return [first, PageServer(root / "page-b", broker.port, **settings)]
    except BaseException:
        first.stop()
        raise


def get(page: PageServer, path: str) -> Any:
    status, _, body = page.request("GET", path, headers=BEARER)
    assert status == 200, (path, status, body[:300])
    return json.loads(body) if not path.startswith("/metrics") else body.decode()


def online(page: PageServer) -> set[str]:
    return {r["device"] for r in get(page, "/api/devices?limit=100")["rows"] if r["state"] == "online"}


def broadcast(page: PageServer, tool: str) -> dict[str, Any]:
    body = json.dumps({"tool": tool, "args": {}, "wait_s": 10}).encode()
    headers = {**BEARER, "Content-Type": "application/json"}
    status, _, answer = page.request("POST", "/api/broadcast", body, headers)
    assert status == 200, answer[:300]
    return json.loads(answer)


def handed(page: PageServer, table: str) -> int:
    """What the page's /metrics says it handed to the history for `table`."""
    for line in get(page, "/metrics").splitlines():
        if line.startswith(f'edgeclaw_page_history_handed_total{{table="{table}"}}'):
            return int(float(line.split()[-1]))
    raise AssertionError(f"no history_handed_total for {table}")


def rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with PSYCOPG.connect(dsn, autocommit=True) as db:
        return db.execute(query).fetchall()


def tool_events(page: PageServer, tool: str, *, kept: bool) -> list[dict[str, Any]]:
    """`tool`'s events: from the kept history, or from the page's live window."""
    events = (
        get(page, "/api/history?kind=events&limit=1000")["records"]
        if kept
        else get(page, "/api/state")["events"]
    )
    return [e for e in events if e.get("tool") == tool]


async def until_both_see_the_fleet(pages: list[PageServer], fleet: Fleet) -> None:
    for page in pages:
        await poll(
            lambda page=page: online(page) == set(fleet.devices), WAIT_S, f"{page.url} to see the fleet"
        )


def health_doubled(dsn: str) -> list[tuple[Any, ...]]:
    """(device, slot, rows) of every slot with more than one point (none, when nothing is doubled)."""
    return rows(dsn, "SELECT device, slot, count(*) FROM health GROUP BY device, slot HAVING count(*) > 1")


async def test_a_share_group_shows_every_device_on_both_pages_and_keeps_each_message_once(
    tmp_path: Path,
    broker: Mosquitto,
    fleet: Fleet,
    postgres: str,  # noqa: F811
):
    pages = two_pages(tmp_path, broker, postgres, share_group="fleetpage")
    try:
        a, b = pages
        await until_both_see_the_fleet(pages, fleet)  # the retained status: every page's, not shared
        done = broadcast(a, "hardware_info")
        assert sorted(x["device"] for x in done["answers"]) == fleet.devices and not done["missing"]
        request = {x["request"] for x in done["answers"]}
        assert len(request) == 1
        # The answers came to page a only (its own reply topic), and are kept once: page b reads them.
        await poll(lambda: len(get(b, "/api/history?kind=answers")["records"]) == 2, WAIT_S, "the answers")
        # Every page's live view has both devices' events; the history has each once.
        for page in pages:
            await poll(
                lambda page=page: len(tool_events(page, "hardware_info", kept=False)) == 2, WAIT_S, "events"
            )
        await poll(lambda: len(tool_events(b, "hardware_info", kept=True)) == 2, WAIT_S, "the kept events")
        await asyncio.sleep(12)  # health for more than one slot, and a second flush of everything
        answers = get(b, "/api/history?kind=answers")["records"]
        assert sorted(x["device"] for x in answers) == fleet.devices
        assert {x["request"] for x in answers} == request
        assert len(tool_events(a, "hardware_info", kept=True)) == 2
        # Each event reached the history through one page: what the two handed is what is kept.
        kept = rows(postgres, "SELECT count(*) FROM records WHERE kind = 'events'")[0][0]
        assert handed(a, "events") + handed(b, "events") == kept, (handed(a, "events"), handed(b, "events"))
        assert handed(a, "answers") == 2 and handed(b, "answers") == 0
        # Health: both pages wrote their share, one point a device and slot is kept.
        assert handed(a, "health") > 0 and handed(b, "health") > 0
        assert rows(postgres, "SELECT count(DISTINCT device) FROM health")[0][0] == 2
        assert health_doubled(postgres) == []
        # A device's chart on either page is drawn from the same kept points (and its window's since).
        device = fleet.devices[0]
        points = {ts for (ts,) in rows(postgres, f"SELECT ts FROM health WHERE device = '{device}'")}
        for page in pages:
            assert points <= {p[0] for p in get(page, f"/api/device/{device}")["history"]}
    finally:
        for page in pages:
            page.stop()


async def test_two_pages_without_a_share_group_keep_each_row_once(
    tmp_path: Path,
    broker: Mosquitto,
    fleet: Fleet,
    postgres: str,  # noqa: F811
):
    pages = two_pages(tmp_path, broker, postgres)
    try:
        a, b = pages
        await until_both_see_the_fleet(pages, fleet)
        done = broadcast(b, "hardware_info")
        assert sorted(x["device"] for x in done["answers"]) == fleet.devices
        for page in pages:  # both pages hand every event to the history ...
            await poll(
                lambda page=page: len(tool_events(page, "hardware_info", kept=False)) == 2, WAIT_S, "events"
            )
        await asyncio.sleep(12)
        # ... and the database keeps each once: the events, the answers, one health point a slot.
        assert len(tool_events(a, "hardware_info", kept=True)) == 2
        assert handed(a, "events") >= 2 and handed(b, "events") >= 2
        assert sorted(x["device"] for x in get(a, "/api/history?kind=answers")["records"]) == fleet.devices
        assert rows(postgres, "SELECT count(DISTINCT device) FROM health")[0][0] == 2
        assert health_doubled(postgres) == []
    finally:
        for page in pages:
            page.stop()


def test_a_share_group_that_is_not_one_topic_level_is_refused(tmp_path: Path, broker: Mosquitto):
    config = tmp_path / "page.toml"
    config.write_text(f"[mqtt]\nport = {broker.port}\n")
    for group, says in [("a/b", "--share-group"), ("#", "--share-group")]:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "edgeclaw",
                "fleet",
                "serve",
                "--config",
                str(config),
                "--share-group",
                group,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and says in done.stderr and "one topic level" in done.stderr, done.stderr
    config.write_text(
        f'[mqtt]\nport = {broker.port}\n[fleet_page]\nhistory_store = "off"\nshare_group = "g"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "edgeclaw", "fleet", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "fleet_page.share_group" in done.stderr, done.stderr


async def test_on_sqlite_a_message_delivered_twice_is_one_row_and_each_page_writes_its_share(tmp_path: Path):
    """Two pages' broker sides in this process, in one share group on a real mosquitto, writing to one
    SQLite file; each message published twice, as the broker delivers one again after a reconnect."""
    from edgeclaw.fleetpage.access import Access
    from edgeclaw.fleetpage.broker import FleetBroker
    from edgeclaw.fleetpage.history import HistoryStore
    from edgeclaw.fleetpage.server import FleetPage
    from edgeclaw.fleetpage.window import FleetWindow
    from edgeclaw.net.mqtt_connection import ConnectionSettings
    from tests.mqtt_support import Caller

    mosquitto = Mosquitto(tmp_path / "broker").start()
    pages, runners = [], []
    try:
        for name in ("a", "b"):
            window = FleetWindow()
            settings = ConnectionSettings(host="127.0.0.1", port=mosquitto.port, client_id=f"page-{name}")
            history = HistoryStore(tmp_path / "history.sqlite3", retention_s=86400)
            page: list[FleetPage] = []
            fleet = FleetBroker(
                settings,
                window,
                share_group="fleetpage",
                on_update=lambda updates, page=page: page[0].publish(updates),
                on_history=lambda updates, page=page: page[0].record(updates),
            )
            page.append(FleetPage(window, fleet, Access(token="t" * 24), history=history))
            pages.append(page[0])
            runners.append(asyncio.create_task(fleet.run()))
        for page in pages:
            assert await page.broker.connection.wait_connected(20)
        await asyncio.sleep(0.5)  # both SUBSCRIBEs made
        now = time.time()
        async with Caller(mosquitto.port, []) as device:
            for n in range(8):  # a health report every 2 s: 14 s span two 10 s slots, whatever the clock
                health = {
                    "ts": now - 16 + 2 * n,
                    "cpu_temp_c": 40.0 + n,
                    "load_1m": 0.1,
                    "mem_used_pct": 20.0,
                }
                for _ in range(2):
                    await device.publish("edgeclaw/dev-00/health", health, qos=1)
            event = {"ts": now, "tool": "i2c", "ok": True}
            for _ in range(2):
                await device.publish("edgeclaw/dev-00/events", event, qos=1)
        # Every page's window has every copy; the history gets each message through one page.
        await poll(lambda: all(len(p.window.events) == 2 for p in pages), WAIT_S, "both windows' events")
        await poll(
            lambda: sum(p.metrics.history["events"] + p.metrics.history["health"] for p in pages) == 18,
            WAIT_S,
            "the shares handed to the history",
        )
        for page in pages:
            assert page.history is not None
            await page.history.flush()
        store = pages[0].history
        assert store is not None
        assert [e["tool"] for e in await store.records("events")] == ["i2c"]
        points = await store.health("dev-00", 0)
        slots = {int(p[0] // 10) for p in points}
        assert len(points) == len(slots) >= 2, points  # one point a slot, whichever page wrote it
        assert {p[0] for p in points} <= {now - 16 + 2 * n for n in range(8)}
    finally:
        for page, runner in zip(pages, runners, strict=False):
            await page.broker.connection.stop(runner)
            if page.history is not None:
                page.history.close()
        mosquitto.stop()


def broker_with_the_shipped_acl(root: Path, users: dict[str, str]) -> Mosquitto:
    from tests.mqtt_support import write_password_file

    acl = root / "acl"
    acl.write_text((Path(__file__).resolve().parent.parent / "deploy" / "mosquitto" / "acl").read_text())
    passwd = write_password_file(root / "passwd", users)
    return Mosquitto(root / "broker", password_file=passwd, acl_file=acl).start()


async def test_the_shipped_acl_lets_the_page_share_what_it_may_read_and_nobody_else(tmp_path: Path):
    """mosquitto judges a `$share/GROUP/...` subscription by the topic it names: the page's user of
    deploy/mosquitto/acl gets its share unchanged, and a device gets none of another's events."""
    from tests.mqtt_support import Caller

    users = {"fleet-page": "pw-page", "dev-a": "pw-a", "dev-b": "pw-b"}
    mosquitto = broker_with_the_shipped_acl(tmp_path, users)
    shared = ["$share/fleetpage/edgeclaw/+/health", "$share/fleetpage/edgeclaw/+/events"]
    try:
        async with (
            Caller(mosquitto.port, shared, username="fleet-page", password=users["fleet-page"]) as page,
            Caller(mosquitto.port, shared, username="dev-b", password=users["dev-b"]) as other,
            Caller(mosquitto.port, [], username="dev-a", password=users["dev-a"]) as device,
        ):
            await asyncio.sleep(0.5)
            for n in range(4):  # the page and dev-b share the group: dev-b is handed some, reads none
                await device.publish("edgeclaw/dev-a/events", {"n": n}, qos=1)
            await device.publish("edgeclaw/dev-a/health", {"ts": 1.0}, qos=1)
            await page.wait_for(lambda: len(page.received) >= 1, 10, "the page's share")
            await asyncio.sleep(1.0)
            assert {r.topic for r in page.received} <= {"edgeclaw/dev-a/events", "edgeclaw/dev-a/health"}
            assert other.received == []
    finally:
        mosquitto.stop()
