"""The fleet page at thousands of devices: the table served in pages, searched, sorted and filtered
on the server, and the rows changed sent to the browser in batches."""

from __future__ import annotations

import json
from typing import Any

import pytest

from edgeclaw.fleetpage.stream import MAX_WAITING, PageOutbox
from edgeclaw.fleetpage.window import FleetWindow


def status(state: str = "online", **more: object) -> bytes:
    return json.dumps({"state": state, "version": "1.0", "board": "sim", **more}).encode()


def fleet_of(n: int) -> FleetWindow:
    w = FleetWindow()
    for i in range(n):
        w.take(
            f"edgeclaw/dev-{i:05d}/status", status("offline" if i % 10 == 0 else "online", board=f"b{i % 3}")
        )
        w.take(
            f"edgeclaw/dev-{i:05d}/health",
            json.dumps({"ts": 100.0 + i, "cpu_temp_c": float(i % 70)}).encode(),
        )
    return w


def test_the_table_is_served_one_page_at_a_time():
    w = fleet_of(2500)
    page = w.page(offset=0, limit=50)
    assert page["total"] == page["matched"] == 2500
    assert [r["device"] for r in page["rows"]] == [f"dev-{i:05d}" for i in range(50)]
    assert all("trust_note" in r for r in page["rows"])
    last = w.page(offset=2480, limit=50)
    assert [r["device"] for r in last["rows"]] == [f"dev-{i:05d}" for i in range(2480, 2500)]
    assert w.page(offset=3000, limit=50)["rows"] == []
    assert w.counts() == {"devices": 2500, "online": 2250, "offline": 250, "unknown": 0}


def test_search_filter_and_sort_happen_on_the_server():
    w = fleet_of(300)
    found = w.page(q="DEV-0012")
    assert [r["device"] for r in found["rows"]] == [f"dev-{i:05d}" for i in range(120, 130)]
    assert found["matched"] == 10 and found["total"] == 300
    assert w.page(q="b2", limit=1000)["matched"] == 100  # the board is searched too
    offline = w.page(state="offline", limit=1000)
    assert offline["matched"] == 30 and {r["state"] for r in offline["rows"]} == {"offline"}
    hottest = w.page(sort="-cpu_temp_c", limit=3)["rows"]
    assert [r["cpu_temp_c"] for r in hottest] == [69.0, 69.0, 69.0]
    assert [r["device"] for r in hottest] == ["dev-00279", "dev-00209", "dev-00139"]
    coolest = w.page(sort="cpu_temp_c", limit=1)["rows"][0]
    assert coolest["cpu_temp_c"] == 0.0 and coolest["device"] == "dev-00000"
    assert w.page(state="unverifiable", limit=1)["matched"] == 300  # nothing here signs


def test_each_devices_update_state_is_shown_searched_and_sorted():
    w = FleetWindow()
    waiting = {"state": "deferred", "version": "0.3.0", "reason": "the update lock is held by job flash (j1)"}
    w.take("edgeclaw/busy/status", status(update=waiting))
    w.take("edgeclaw/calm/status", status(update={"state": "idle", "slot": "base"}))
    w.take("edgeclaw/given-up/status", status(update={"state": "deferred_expired", "version": "0.3.0"}))
    w.take("edgeclaw/old/status", status())  # a daemon that does not report updates
    # The update's state and its version are searched.
    assert [r["device"] for r in w.page(q="deferred 0.3.0")["rows"]] == ["busy", "given-up"]
    [busy] = w.page(q="b deferred 0.3")["rows"]
    assert busy["device"] == "busy" and busy["update"] == "deferred" and busy["update_version"] == "0.3.0"
    assert busy["update_reason"] == waiting["reason"]
    assert [r["device"] for r in w.page(q="deferred_expired")["rows"]] == ["given-up"]
    assert [r["device"] for r in w.page(sort="update")["rows"]] == ["busy", "given-up", "calm", "old"]
    assert [r["device"] for r in w.page(sort="-update")["rows"]] == ["calm", "given-up", "busy", "old"]
    assert w.page(q="old")["rows"][0]["update"] is None


def test_rows_without_the_figure_sort_last_either_way():
    w = fleet_of(3)
    w.take("edgeclaw/quiet/status", status())
    assert w.page(sort="cpu_temp_c")["rows"][-1]["device"] == "quiet"
    assert w.page(sort="-cpu_temp_c")["rows"][-1]["device"] == "quiet"


@pytest.mark.parametrize(
    ("query", "error"),
    [({"sort": "password"}, "sort must be one of"), ({"state": "exploded"}, "state must be one of")],
)
def test_a_wrong_sort_or_filter_is_named(query, error):
    with pytest.raises(ValueError, match=error):
        FleetWindow().page(**query)


def test_ten_thousand_devices_fit_by_default():
    w = fleet_of(10_000)
    assert len(w.devices) == 10_000


async def test_a_page_is_sent_the_rows_changed_once_a_batch_however_many_messages():
    w = fleet_of(50)
    outbox = PageOutbox()
    for _ in range(20):  # 1,000 messages: 50 devices reporting 20 times within one batch
        for i in range(50):
            for kind, data in w.take(f"edgeclaw/dev-{i:05d}/health", json.dumps({"ts": 1.0}).encode()):
                outbox.add(kind, data)
    assert outbox.ready.is_set() and not outbox.behind
    events = parse(outbox.drain(w.counts()))
    assert [kind for kind, _ in events] == ["devices"]
    batch = events[0][1]
    assert len(batch["rows"]) == 50 and len(batch["points"]) == 1000
    assert batch["counts"]["devices"] == 50
    assert outbox.drain(w.counts()) == b"" and not outbox.ready.is_set()
    # A device retired within the batch is sent as gone, not as a row.
    outbox.add("device", w.page(limit=1)["rows"][0])
    outbox.add("gone", {"device": "dev-00000"})
    batch = parse(outbox.drain(w.counts()))[0][1]
    assert batch["rows"] == [] and batch["gone"] == ["dev-00000"]


async def test_events_keep_their_order_and_a_page_too_far_behind_is_let_go():
    outbox = PageOutbox()
    outbox.add("event", {"device": "a", "n": 1})
    outbox.add("approval", {"device": "a", "id": "q"})
    assert [kind for kind, _ in parse(outbox.drain({}))] == ["event", "approval"]
    for n in range(MAX_WAITING):
        outbox.add("event", {"device": "a", "n": n})
    assert not outbox.behind
    outbox.add("event", {"device": "a", "n": -1})
    assert outbox.behind


def parse(raw: bytes) -> list[tuple[str, Any]]:
    out = []
    for chunk in raw.decode().split("\n\n"):
        if chunk:
            kind, data = chunk.split("\n")
            out.append((kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out
