"""Twenty real daemons on one broker, run from the fleet page, as a fleet operator would.

`edgeclaw run --board sim` twenty times, one mosquitto, `edgeclaw fleet serve`: a broadcast answered
by every device once, a staged rollout stopped by its broken canary, devices killed with SIGKILL seen
offline through their Last Will, and the broker killed and started again with everything back.
`.ci/run` runs this with the rest of the suite (about 15 s on two cores, the daemons starting at once).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fleet_support import (
    Fleet,
    PageServer,
    module_broker,  # noqa: F401  (a fixture: the module's broker)
    page_fleet,
    release_file_except,
)
from tests.mqtt_support import Mosquitto, needs_mosquitto

pytestmark = needs_mosquitto

SIZE = 20
BROKEN = "dev-13"  # the file the rollout's call reads is missing here
KILLED = ("dev-04", "dev-11", "dev-17")
WAIT_S = 90.0  # twenty daemons starting at once on two shared cores


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, broker: Mosquitto) -> Iterator[Fleet]:
    groups = {i: ["site"] for i in range(SIZE)}
    f = page_fleet(
        tmp_path_factory.mktemp("fleet"),
        broker.port,
        SIZE,
        groups=groups,
        prepare=release_file_except(BROKEN),
    )
    yield f
    f.stop()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory, broker: Mosquitto, fleet: Fleet) -> Iterator[PageServer]:
    server = PageServer(tmp_path_factory.mktemp("page"), broker.port, broadcast_wait_s=30.0)
    try:
        fleet.until(
            lambda: len(server.rows("online")) == SIZE, "all twenty devices online on the page", WAIT_S
        )
        yield server
    finally:
        server.stop()


def broadcast_answered_by_all(page: PageServer, fleet: Fleet) -> None:
    status, body = page.api("POST", "/api/broadcast", {"tool": "hardware_info", "args": {}, "wait_s": 30})
    assert status == 200, body
    devices = [a["device"] for a in body["answers"]]
    assert sorted(devices) == sorted(fleet.devices) and body["missing"] == [], body  # each once
    assert all(a["ok"] for a in body["answers"]), body


def test_a_broadcast_is_answered_by_each_of_twenty_devices_once(page, fleet):
    broadcast_answered_by_all(page, fleet)


def test_a_staged_rollout_is_halted_by_its_broken_canary(page, fleet):
    plan = {
        "tool": "read_file",
        "args": {"path": "release.txt"},
        "group": "site",
        "canary_devices": ["dev-00", BROKEN],
        "batch_size": 6,
        "wait_s": 30,
    }
    status, body = page.api("POST", "/api/rollout", plan)
    assert status == 200, body
    rollout_id = body["rollout"]["id"]
    assert body["rollout"]["waves"] == 4  # two canaries, then 18 in batches of 6

    def ended() -> dict[str, Any] | None:
        view = page.api("GET", f"/api/rollout/{rollout_id}")[1]
        return view if view["state"] != "running" else None

    view = fleet.until(ended, "end of the rollout", WAIT_S)
    assert view["state"] == "halted" and "canary" in view["reason"], view
    assert view["devices"][BROKEN]["state"] == "failed" and view["devices"]["dev-00"]["state"] == "ok"
    counts = {"ok": 1, "failed": 1, "no_answer": 0, "deferred": 0, "skipped": 18, "pending": 0}
    assert view["counts"] == counts


def test_devices_killed_are_seen_offline_through_their_last_will(page, fleet):
    for daemon in fleet.daemons:
        if daemon.device in KILLED:
            daemon.kill()  # SIGKILL: no goodbye; the broker publishes each one's Will
    killed_at = time.monotonic()
    fleet.until(
        lambda: set(page.rows("online")) == set(fleet.devices) - set(KILLED), "the killed devices offline", 30
    )
    assert time.monotonic() - killed_at < 30
    _, body = page.api("GET", "/api/devices?state=offline&limit=100")
    assert {row["device"] for row in body["rows"]} == set(KILLED)
    for daemon in fleet.daemons:
        if daemon.device in KILLED:
            daemon.start()
    fleet.until(lambda: len(page.rows("online")) == SIZE, "the killed devices back online", WAIT_S)


def test_a_broker_killed_and_started_again_is_recovered_by_the_fleet_and_the_page(page, fleet, broker):
    broker.kill()  # every session and retained message gone with it
    time.sleep(1.0)
    restarted = time.time()
    broker.start()  # the same port
    fleet.until(lambda: page.api("GET", "/api/session")[1]["connected"], "the page reconnected", WAIT_S)

    def heard_since() -> bool:  # the page's rows are its last view: each must be heard from anew
        rows = page.api("GET", "/api/devices?state=online&limit=100")[1]["rows"]
        return len([r for r in rows if (r.get("last_seen") or 0) >= restarted]) == SIZE

    fleet.until(heard_since, "twenty devices heard from after the restart", WAIT_S)
    broadcast_answered_by_all(page, fleet)
