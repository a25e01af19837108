"""Staged rollouts from the fleet page: real `edgeclaw run` daemons on a real mosquitto, the page
served by `edgeclaw fleet serve`, a tool call rolled out in waves, one device made to fail (the
file the call reads is missing on it), the rollout halted, and what the page and its history say.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fleet_support import (
    FULL_OVER_MQTT,
    WAIT_S,
    Fleet,
    PageServer,
    module_broker,  # noqa: F401  (a fixture: the module's broker)
    page_fleet,
    release_file_except,
)
from tests.mqtt_support import MOSQUITTO, Mosquitto

pytestmark = pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed")

SIZE = 6
BROKEN = "dev-03"  # its workspace lacks the file every other device has
READ = {"tool": "read_file", "args": {"path": "release.txt"}}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, broker: Mosquitto) -> Iterator[Fleet]:
    extra = FULL_OVER_MQTT + '[tools.exec]\nask = "always"\n'
    groups = {i: ["east"] for i in range(SIZE)}
    f = page_fleet(
        tmp_path_factory.mktemp("fleet"),
        broker.port,
        SIZE,
        groups=groups,
        extra=extra,
        prepare=release_file_except(BROKEN),
    )
    yield f
    f.stop()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory, broker: Mosquitto, fleet: Fleet) -> Iterator[PageServer]:
    server = PageServer(tmp_path_factory.mktemp("page"), broker.port)
    fleet.until(lambda: len(server.rows("online")) == SIZE, "the fleet online on the page", 60)
    yield server
    server.stop()


def finished(page: PageServer, rollout_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S * 2
    while True:
        status, view = page.api("GET", f"/api/rollout/{rollout_id}")
        assert status == 200, view
        if view["state"] != "running":
            return view
        assert time.monotonic() < deadline, f"rollout still running: {view}"
        time.sleep(0.2)


def start(page: PageServer, **plan: Any) -> dict[str, Any]:
    status, body = page.api("POST", "/api/rollout", {**READ, "group": "east", "wait_s": 20, **plan})
    assert status == 200, body
    return body["rollout"]


def outcomes(view: dict[str, Any]) -> dict[str, str]:
    return {device: o["state"] for device, o in view["devices"].items()}


def test_a_canary_that_fails_halts_the_rollout_before_the_rest_are_called(page, fleet):
    rollout = start(page, canary_devices=[BROKEN], batch_size=2)
    assert rollout["canary"] == [BROKEN] and rollout["waves"] == 4  # the canary, then 5 in batches of 2
    view = finished(page, rollout["id"])
    assert view["state"] == "halted" and "canary" in view["reason"], view
    assert outcomes(view) == {d: ("failed" if d == BROKEN else "skipped") for d in fleet.devices}
    assert "release.txt" in view["devices"][BROKEN]["error"]
    assert view["counts"] == {"ok": 0, "failed": 1, "no_answer": 0, "deferred": 0, "skipped": 5, "pending": 0}


def test_a_failure_in_a_later_wave_halts_it_after_that_wave(page, fleet):
    # dev-00 the canary, then [01, 02], [03, 04], [05]: the broken one is in the third wave.
    view = finished(page, start(page, canary=1, batch_size=2)["id"])
    assert view["state"] == "halted" and "wave 3" in view["reason"], view
    states = outcomes(view)
    assert states == {
        "dev-00": "ok",
        "dev-01": "ok",
        "dev-02": "ok",
        BROKEN: "failed",
        "dev-04": "ok",  # called in the same wave as the failing one
        "dev-05": "skipped",
    }
    assert [view["devices"][d]["wave"] for d in fleet.devices] == [1, 2, 2, 3, 3, 4]


def test_a_failure_within_the_threshold_lets_the_rollout_finish(page, fleet):
    view = finished(page, start(page, canary=2, batch_size=3, max_failures=1)["id"])
    assert view["state"] == "done", view
    assert view["counts"] == {"ok": 5, "failed": 1, "no_answer": 0, "deferred": 0, "skipped": 0, "pending": 0}


def test_each_device_outcome_and_the_end_are_in_the_history(page, fleet):
    rollout = start(page, canary_devices=[BROKEN])
    finished(page, rollout["id"])

    def kept(kind: str, match: Any) -> list[dict[str, Any]]:
        deadline = time.monotonic() + WAIT_S  # the history is written in batches
        while True:
            status, body = page.api("GET", f"/api/history?kind={kind}&limit=100")
            assert status == 200, body
            found = [r for r in body["records"] if match(r)]
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.2)

    mine = kept("answers", lambda r: r.get("rollout") == rollout["id"])
    # One record per device, each once: the failure, and the five never called.
    assert sorted((r["device"], r["state"]) for r in mine) == sorted(
        (d, "failed" if d == BROKEN else "skipped") for d in fleet.devices
    )
    ends = kept("events", lambda r: r.get("event") == "rollout" and r.get("id") == rollout["id"])
    assert len(ends) == 1 and ends[0]["state"] == "halted" and ends[0]["counts"]["skipped"] == 5


def test_a_rollout_waiting_on_its_devices_is_stopped_from_the_page(page, fleet):
    # exec asks for approval on these devices and nobody approves: the calls wait.
    rollout = start(page, tool="exec", args={"command": "true"}, canary=3, wait_s=60)
    time.sleep(1.0)
    status, body = page.api("POST", "/api/rollout/stop", {"id": rollout["id"]})
    assert status == 200, body
    view = body["rollout"]
    assert view["state"] == "stopped"
    assert set(outcomes(view).values()) == {"skipped"}
    status, listed = page.api("GET", "/api/rollouts")
    assert [r["state"] for r in listed["rollouts"] if r["id"] == rollout["id"]] == ["stopped"]


def test_a_bad_plan_is_refused_naming_what_is_wrong(page):
    for plan, words in (
        ({"batch_size": 0}, "batch_size must be a whole number >= 1"),
        ({"max_failures": -1}, "max_failures"),
        ({"wait_s": 10_000}, "wait_s"),
        ({"args": "x"}, "args must be a JSON object"),
        ({"tool": "no tool"}, "tool must be a name"),
    ):
        status, body = page.api("POST", "/api/rollout", {**READ, "group": "east", **plan})
        assert status == 400 and words in body["error"], (plan, body)
    status, body = page.api("POST", "/api/rollout", {**READ, "group": "nobody-here"})
    assert status == 409 and "no device online in group 'nobody-here'" in body["error"]
    status, body = page.api("POST", "/api/rollout", {**READ, "group": "east", "canary_devices": ["dev-99"]})
    assert status == 409 and "dev-99" in body["error"]


def test_an_update_rollout_needs_the_admin_key_and_a_well_formed_update(page):
    update = {"url": "http://127.0.0.1:9/edgeclaw-9.9.9-py3-none-any.whl", "sha256": "a" * 64}
    plan = {"kind": "update", "group": "east", "update": update}
    for bad, words in (
        ({"url": "file:///etc/passwd"}, "update.url must be the http(s) URL"),
        ({"sha256": "abc"}, "update.sha256 must be the file's SHA-256"),
        ({"signature": "not hex"}, "update.signature must be the file's Ed25519 signature"),
        ({"force": "yes"}, "update.force must be true or false"),
        ({"upload": "u1"}, "update: unknown field(s) upload"),
    ):
        status, body = page.api("POST", "/api/rollout", {**plan, "update": {**update, **bad}})
        assert status == 400 and words in body["error"], (bad, body)
    status, body = page.api("POST", "/api/rollout", {**plan, "kind": "deploy"})
    assert status == 400 and "kind must be one of tool, update" in body["error"]
    # Well formed, but this page holds no admin key: refused before any device is sent anything.
    status, body = page.api("POST", "/api/rollout", plan)
    assert status == 409 and "holds no admin key" in body["error"], body
    assert page.api("GET", "/api/session")[1]["updates"] is False  # the page hides its update form


def test_unknown_rollouts_are_not_found(page):
    assert page.api("GET", "/api/rollout/ro-nope")[0] == 404
    assert page.api("POST", "/api/rollout/stop", {"id": "ro-nope"})[0] == 404


def test_rollouts_need_a_session_its_csrf_token_and_the_page_s_own_origin(page):
    plan = json.dumps({**READ, "group": "east"})
    before = len(page.api("GET", "/api/rollouts")[1]["rollouts"])
    for method, path, body in (
        ("GET", "/api/rollouts", b""),
        ("GET", "/api/rollout/ro-any", b""),
        ("POST", "/api/rollout", plan),
        ("POST", "/api/rollout/stop", '{"id": "ro-any"}'),
    ):
        status, _, _ = page.request(method, path, body, {"Content-Type": "application/json"})
        assert status == 401, (method, path)
    cookie, csrf = page.login()
    json_post = {"Content-Type": "application/json", "Cookie": cookie}
    status, _, body = page.request("POST", "/api/rollout", plan, json_post)
    assert status == 403 and "CSRF" in json.loads(body)["error"]
    status, _, _ = page.request(
        "POST", "/api/rollout", plan, {**json_post, "X-CSRF-Token": csrf, "Origin": "http://evil.example"}
    )
    assert status == 403
    assert len(page.api("GET", "/api/rollouts")[1]["rollouts"]) == before  # none of those started one
