"""A staged update of twenty real daemons from the fleet page, one of them on a board the new
release does not start on.

Twenty `edgeclaw run --board sim` daemons, each under a supervisor that starts it again when it
exits non-zero (as systemd's Restart=on-failure does), one mosquitto, `edgeclaw fleet serve` holding
the admin key. The release is a signed wheel of this checkout with a newer version, patched to die
at start-up on board revision "b2" (the environment of one device only), served over HTTP on
loopback. The page rolls it out in waves: the canary wave updates one good device (kept: healthy on
the new version) and the broken one (its new version dies, the next start puts the old one back);
the rollout halts there, and the page and its history say which device kept and which rolled back.
Then a small group is updated in waves with nothing failing. `.ci/run` runs this with the suite.
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeclaw import __version__
from tests.fleet_support import (
    FULL_OVER_MQTT,
    Fleet,
    FleetDaemon,
    PageServer,
    module_broker,  # noqa: F401  (a fixture: the module's broker)
    page_fleet,
)
from tests.mqtt_support import Mosquitto, needs_mosquitto
from tests.test_fleet_admin import _patched_copy, sha256_of, signing_key

pytestmark = needs_mosquitto

SIZE = 20
BROKEN = "dev-13"  # board revision b2: the new release dies at start-up there
GOOD_CANARY = "dev-00"
PILOT = ("dev-05", "dev-06", "dev-07")  # a group updated with nothing failing
WAIT_S = 120.0  # twenty daemons on two shared cores
UPDATE_WAIT_S = 300.0  # each device: fetch, install beside the running version, restart, get healthy


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The signed release on a file server: {url, sha256, signature, version, public_key}."""
    root = tmp_path_factory.mktemp("release")
    main = (Path(__file__).resolve().parent.parent / "edgeclaw" / "__main__.py").read_text()
    wheel = _patched_copy(
        root, "rollout", "edgeclaw/__main__.py", main,
        'import os\nif os.environ.get("EC_BOARD_REV") == "b2":\n'
        '    raise SystemExit("this build of edgeclaw does not start on board revision b2")\n' + main,
    )  # fmt: skip
    key, public = signing_key()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(wheel.parent))

    class Quiet(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):  # a client gone mid-answer is not news
            pass

    server = Quiet(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {
        "url": f"http://127.0.0.1:{server.server_address[1]}/{wheel.name}",
        "sha256": sha256_of(wheel),
        "signature": key.sign(wheel.read_bytes()).hex(),
        "version": wheel.name.split("-")[1],
        "public_key": public,
    }
    server.shutdown()


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory, broker: Mosquitto, release: dict[str, Any]
) -> Iterator[Fleet]:
    gateway = (
        "[gateway]\n"
        'update_allow_networks = ["127.0.0.0/8"]\n'
        f'update_public_key = "{release["public_key"]}"\n'
        "health_deadline_s = 90\n"
    )
    groups = {i: ["site", *(["pilot"] if f"dev-{i:02d}" in PILOT else [])] for i in range(SIZE)}

    def prepare(daemon: FleetDaemon) -> None:
        if daemon.device == BROKEN:
            daemon.env["EC_BOARD_REV"] = "b2"

    f = page_fleet(
        tmp_path_factory.mktemp("fleet"),
        broker.port,
        SIZE,
        groups=groups,
        extra=FULL_OVER_MQTT + gateway,
        prepare=prepare,
        supervised=True,
        admin_secret_env="EC_ADMIN",
    )
    yield f
    f.stop()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory, broker: Mosquitto, fleet: Fleet) -> Iterator[PageServer]:
    server = PageServer(tmp_path_factory.mktemp("page"), broker.port, admin=True, call_timeout_s=60.0)
    try:
        fleet.until(
            lambda: len(server.rows("online")) == SIZE, "all twenty devices online on the page", WAIT_S
        )
        yield server
    finally:
        server.stop()


def roll_out(page: PageServer, fleet: Fleet, release: dict[str, Any], **plan: Any) -> dict[str, Any]:
    update = {k: release[k] for k in ("url", "sha256", "signature")}
    body = {"kind": "update", "update": update, "wait_s": UPDATE_WAIT_S, **plan}
    status, started = page.api("POST", "/api/rollout", body)
    assert status == 200, started
    rollout_id = started["rollout"]["id"]
    assert started["rollout"]["kind"] == "update"

    def ended() -> dict[str, Any] | None:
        view = page.api("GET", f"/api/rollout/{rollout_id}")[1]
        return view if view["state"] != "running" else None

    return fleet.until(ended, f"end of rollout {rollout_id}", 3 * UPDATE_WAIT_S)


def kept(page: PageServer, fleet: Fleet, kind: str, match: Any) -> list[dict[str, Any]]:
    def found() -> list[dict[str, Any]]:  # the history is written in batches
        return [r for r in page.api("GET", f"/api/history?kind={kind}&limit=200")[1]["records"] if match(r)]

    return fleet.until(found, f"{kind} in the history", 30)


def test_the_canary_catches_a_release_that_does_not_start_and_the_rollout_halts(page, fleet, release):
    view = roll_out(page, fleet, release, group="site", canary_devices=[GOOD_CANARY, BROKEN], batch_size=6)
    assert view["state"] == "halted" and "canary" in view["reason"], view
    devices = view["devices"]
    assert devices[GOOD_CANARY]["state"] == "ok", devices[GOOD_CANARY]
    assert devices[BROKEN]["state"] == "failed" and "rolled back" in devices[BROKEN]["error"], devices[BROKEN]
    assert view["counts"] == {
        "ok": 1,
        "failed": 1,
        "no_answer": 0,
        "deferred": 0,
        "skipped": 18,
        "pending": 0,
    }

    # The page's table: the canary on the new version, the broken device back on the old one, every
    # other device untouched.
    def settled() -> dict[str, dict[str, Any]] | None:
        table = page.rows("online")
        ok = len(table) == SIZE and table[BROKEN]["update"] == "idle"
        return table if ok and table[GOOD_CANARY]["version"] == release["version"] else None

    table = fleet.until(settled, "the canary on the new version and the broken device idle again", WAIT_S)
    assert table[BROKEN]["version"] == __version__
    assert {d for d, row in table.items() if row["version"] == release["version"]} == {GOOD_CANARY}
    broken = next(d for d in fleet.daemons if d.device == BROKEN)
    log = broken.log.read_text(errors="replace")
    assert "does not start on board revision b2" in log and "rolled back" in log, log[-3000:]
    assert any(code != 0 for code in broken.exits)  # it died on the new version, and was started again
    untouched = [d for d in fleet.daemons if d.device not in (GOOD_CANARY, BROKEN)]
    assert not [d.device for d in untouched if (d.state / "venvs").exists()]  # never sent the update

    # The history: each device's outcome once, and the halt.
    mine = kept(page, fleet, "answers", lambda r: r.get("rollout") == view["id"])
    states = {r["device"]: r["state"] for r in mine}
    assert len(mine) == SIZE and states[GOOD_CANARY] == "ok" and states[BROKEN] == "failed", mine
    ends = kept(page, fleet, "events", lambda r: r.get("event") == "rollout" and r.get("id") == view["id"])
    assert len(ends) == 1 and ends[0]["state"] == "halted" and ends[0]["kind"] == "update", ends


def test_a_group_is_updated_in_waves_from_the_page_and_each_keeps_the_new_version(
    page, fleet, release, tmp_path
):
    """Started from the page's form in a browser, as an operator would."""
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from tests import test_fleet_page as ui

    if not (Path(ui.CHROMIUM).exists() and Path(ui.CHROMEDRIVER).exists()):
        pytest.skip("chromium and chromium-driver are not installed")
    driver = ui.start_chromium(tmp_path / "chromium-profile")
    try:
        ui.log_in(driver, page)
        ui.wait(driver, lambda d: d.find_element(By.ID, "update-form").is_displayed(), "the update form")
        ui.wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#up-group option[value=pilot]"), "groups")
        for field, value in (("up-url", release["url"]), ("up-sha", release["sha256"]),
                             ("up-signature", release["signature"])):  # fmt: skip
            driver.find_element(By.ID, field).send_keys(value)
        Select(driver.find_element(By.ID, "up-group")).select_by_value("pilot")
        driver.find_element(By.ID, "up-batch").clear()
        driver.find_element(By.ID, "up-batch").send_keys("2")
        driver.find_element(By.ID, "up-send").click()

        def ended(d: Any) -> str | None:  # the list also shows the earlier rollout, to the whole site
            heads = ui.texts(d, ".rollout:not(.running) .rollout-head")
            return next((h for h in heads if h.startswith("update to group pilot")), None)

        head = WebDriverWait(driver, 3 * UPDATE_WAIT_S, poll_frequency=0.5).until(
            ended, "timed out waiting for the update rollout to end on the page"
        )
        ui.screenshot(driver, "09-update-rollout")
    finally:
        driver.quit()
    assert head.startswith("update to group pilot: done") and "3 ok, 0 failed" in head, head
    [view] = [r for r in page.api("GET", "/api/rollouts")[1]["rollouts"] if r["group"] == "pilot"]
    assert view["waves"] == 2 and view["kind"] == "update", view

    def on_new_version() -> dict[str, dict[str, Any]] | None:
        table = page.rows("online")
        return table if all(table[d]["version"] == release["version"] for d in PILOT) else None

    table = fleet.until(on_new_version, "the pilot group on the new version", WAIT_S)
    assert all(table[d]["update"] == "idle" for d in PILOT)
