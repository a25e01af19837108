"""The fleet page in a real browser: a real mosquitto, three `edgeclaw run --board sim` daemons, the
page served by `edgeclaw fleet serve`, and headless Chromium driven through chromedriver (Selenium).

Screenshots go to $EDGECLAW_ARTIFACTS/fleet-page (default /tmp/edgeclaw-artifacts/fleet-page).
The refusals (wrong password, no session, no or a wrong CSRF token, another origin) are checked
over plain HTTP as well, where the status codes can be read.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.tools.approval import action_digest
from tests.fleet_support import (
    FULL_OVER_MQTT,
    PASSWORD,
    TOKEN,
    WAIT_S,
    Fleet,
    PageServer,
    module_broker,  # noqa: F401  (a fixture: the module's broker)
    page_fleet,
)
from tests.mqtt_support import MOSQUITTO, Caller, Mosquitto, poll

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

selenium = pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")
pytestmark = [
    pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed (scripts/bootstrap --system)"),
    pytest.mark.skipif(
        not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()),
        reason="chromium and chromium-driver are not installed (scripts/bootstrap --system installs them)",
    ),
]

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

ARTIFACTS = Path(os.environ.get("EDGECLAW_ARTIFACTS", "/tmp/edgeclaw-artifacts")) / "fleet-page"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, broker: Mosquitto) -> Iterator[Fleet]:
    extra = FULL_OVER_MQTT + '[tools.exec]\nask = "always"\n'
    f = page_fleet(
        tmp_path_factory.mktemp("fleet"), broker.port, 3, groups={0: ["north"], 1: ["north"]}, extra=extra
    )
    yield f
    f.stop()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory, broker: Mosquitto, fleet: Fleet) -> Iterator[PageServer]:
    server = PageServer(tmp_path_factory.mktemp("page"), broker.port)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


def start_chromium(profile: Path) -> webdriver.Chrome:
    """Headless Chromium through chromedriver, its profile in `profile`."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,1600",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the page's script errors
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    return driver


def wait(driver: webdriver.Chrome, condition: Callable[[webdriver.Chrome], Any], what: str) -> Any:
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.1).until(condition, f"timed out waiting for {what}")


def screenshot(driver: webdriver.Chrome, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def table(driver: webdriver.Chrome) -> dict[str, dict[str, str]]:
    """device -> column -> text, as the table shows it (read in one go: it is redrawn as updates come)."""
    return driver.execute_script(
        """const out = {};
        for (const tr of document.querySelectorAll('#devices tbody tr')) {
          out[tr.dataset.device] = {};
          for (const td of tr.querySelectorAll('td')) out[tr.dataset.device][td.dataset.key] = td.textContent;
        }
        return out;"""
    )


def rows(driver: webdriver.Chrome) -> dict[str, str]:
    """device -> state."""
    return {device: cells["state"] for device, cells in table(driver).items()}


def log_in(driver: webdriver.Chrome, page: PageServer, secret: str = PASSWORD) -> None:
    driver.get(page.url + "/")
    wait(driver, lambda d: d.find_elements(By.ID, "secret"), "the login form")
    driver.find_element(By.ID, "secret").send_keys(secret)
    driver.find_element(By.ID, "login-button").click()


def click(driver: webdriver.Chrome, selector: str) -> None:
    """Click what `selector` finds, found and clicked in one step in the page: the table and the
    queue are redrawn as updates come, so an element looked up first may be gone by the click."""
    script = "const e = document.querySelector(arguments[0]); if (!e) return false; e.click(); return true;"
    wait(driver, lambda d: d.execute_script(script, selector), selector)


def open_device(driver: webdriver.Chrome, device: str) -> None:
    click(driver, f"#devices tr[data-device='{device}']")
    wait(driver, lambda d: d.find_element(By.ID, "device").is_displayed(), "the device view")


def texts(driver: webdriver.Chrome, selector: str) -> list[str]:
    """The text of each element `selector` finds, read in one step (lists are redrawn as events come)."""
    script = "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent)"
    return driver.execute_script(script, selector)


def answer_text(driver: webdriver.Chrome) -> str:
    return driver.find_element(By.ID, "answer-text").text


# -- in the browser ----------------------------------------------------------------------------
def test_a_wrong_password_is_refused_in_the_browser(browser, page):
    log_in(browser, page, "not the password")
    error = wait(browser, lambda d: d.find_elements(By.ID, "login-error"), "the login error")
    assert "wrong password or token" in error[0].text
    assert browser.get_cookie(f"edgeclaw_fleet_{page.port}") is None
    # Without a session the page itself sends the browser back to the login form.
    browser.get(page.url + "/")
    wait(browser, lambda d: d.find_elements(By.ID, "secret"), "the login form again")
    screenshot(browser, "01-wrong-password")


def test_log_in_and_see_the_three_devices_online(browser, page, fleet):
    log_in(browser, page)
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "body[data-ready=yes]"), "the page")
    shown = wait(
        browser,
        lambda d: r if len(r := rows(d)) == 3 and set(r.values()) == {"online"} else None,
        "three devices online",
    )
    assert set(shown) == set(fleet.devices)
    wait(browser, lambda d: d.find_element(By.ID, "link").text == "live", "the live stream")
    # Versions, boards and figures come from the retained status and health.
    first = table(browser)[fleet.devices[0]]
    assert first["board"] == "sim" and first["groups"] == "north" and first["version"]
    assert first["update"] == "idle"  # where the device is with updates: nothing in progress
    # The filter narrows the table to the group's two devices.
    browser.find_element(By.ID, "filter").send_keys("north")
    wait(browser, lambda d: len(rows(d)) == 2, "two devices in group north")
    browser.find_element(By.ID, "filter").clear()
    browser.find_element(By.ID, "filter").send_keys(" ")
    wait(browser, lambda d: len(rows(d)) == 3, "the whole table again")

    # Sorting: by device name, then the same column again for the other way round.
    def order(d: webdriver.Chrome) -> list[str]:
        return [row.split("online")[0] for row in texts(d, "#devices tbody tr")]

    assert order(browser) == sorted(fleet.devices)
    click(browser, "#devices th[data-key=device]")
    wait(browser, lambda d: order(d) == sorted(fleet.devices, reverse=True), "the table sorted down")
    click(browser, "#devices th[data-key=device]")
    wait(browser, lambda d: order(d) == sorted(fleet.devices), "the table sorted up")
    screenshot(browser, "02-fleet")
    # Readable on a phone: at a phone's width nothing but the table's own box scrolls sideways.
    browser.set_window_size(390, 844)
    wait(
        browser,
        lambda d: d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth"),
        "the page to fit a phone's width",
    )
    screenshot(browser, "02-fleet-phone")
    browser.set_window_size(1280, 1600)


def test_a_tool_call_from_the_form_returns_the_i2c_scan(browser, page, fleet):
    device = fleet.devices[1]
    open_device(browser, device)
    Select(browser.find_element(By.ID, "tool")).select_by_value("i2c")
    # The form is built from the i2c tool's JSON schema: an enum for action, a number for bus.
    wait(browser, lambda d: d.find_elements(By.ID, "arg-action"), "the i2c form")
    Select(browser.find_element(By.ID, "arg-action")).select_by_visible_text("scan")
    assert browser.find_element(By.ID, "arg-bus").get_attribute("type") == "number"
    browser.find_element(By.ID, "arg-bus").send_keys("1")
    browser.find_element(By.ID, "call").click()
    text = wait(browser, lambda d: t if "I2C bus 1" in (t := answer_text(d)) else None, "the scan's answer")
    assert "0x48" in text and "TMP102" in text
    data = json.loads(browser.find_element(By.ID, "answer-data").text)
    assert "0x48" in data["addresses"] and data["bus"] == 1
    # The device's health is drawn from the live stream.
    wait(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#charts .chart[data-figure=load_1m] polyline"),
        "the load chart",
    )
    screenshot(browser, "03-tool-call")
    # The board's sensors, in units.
    click(browser, "#sensors-read")
    readings = wait(browser, lambda d: t if len(t := texts(d, "#sensors tr")) > 1 else None, "the readings")
    air = next(r for r in readings if r.startswith("air (bme280)"))
    assert "°C" in air and "hPa" in air and "%RH" in air
    assert any(r.startswith("board temperature (tmp102)") and "°C" in r for r in readings)
    # Chat from the same console: without a model, the slash commands answer.
    browser.find_element(By.ID, "chat-text").send_keys("/status")
    browser.find_element(By.ID, "chat-send").click()
    # The page's conversation is its own: the session belongs to the caller whose key the page signs with.
    text = wait(
        browser, lambda d: t if "session mqtt:command:fleetpage" in (t := answer_text(d)) else None, "/status"
    )
    assert "models: none configured" in text


def test_an_exec_approval_appears_in_the_queue_and_is_approved_from_the_page(browser, page, fleet):
    device = fleet.devices[0]
    open_device(browser, device)
    Select(browser.find_element(By.ID, "tool")).select_by_value("exec")
    wait(browser, lambda d: d.find_elements(By.ID, "arg-command"), "the exec form")
    browser.find_element(By.ID, "arg-command").send_keys("echo approved-from-the-page")
    browser.find_element(By.ID, "call").click()
    wait(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, f"#approval-list li[data-device='{device}']"),
        "the approval in the queue",
    )
    text = browser.execute_script("return document.querySelector('#approval-list li').textContent")
    assert "exec" in text and "echo approved-from-the-page" in text
    screenshot(browser, "04-approval-waiting")
    click(browser, f"#approval-list li[data-device='{device}'] button[data-decision=allow-once]")
    text = wait(
        browser, lambda d: t if "approved-from-the-page" in (t := answer_text(d)) else None, "exec's output"
    )
    assert "failed" not in browser.find_element(By.ID, "answer").get_attribute("class")
    assert "approved-from-the-page" in text
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, "#approval-list li"), "an empty queue")
    # The decision is on the device's events, by the approver key the server holds.
    events = wait(
        browser,
        lambda d: [line for line in texts(d, "#device-events li") if "allow-once" in line],
        "the approval event",
    )
    assert "by mqtt:approver" in events[0]
    screenshot(browser, "05-approved")


def test_a_broadcast_collects_three_answers(browser, page, fleet):
    Select(browser.find_element(By.ID, "bc-tool")).select_by_value("hardware_info")
    browser.find_element(By.ID, "bc-send").click()
    summary = wait(
        browser,
        lambda d: t if "answers" in (t := d.find_element(By.ID, "bc-summary").text) else None,
        "answers",
    )
    assert summary.startswith("3 answers (3 ok)"), summary
    answered = {
        tr.get_attribute("data-device") for tr in browser.find_elements(By.CSS_SELECTOR, "#bc-results tr")
    }
    assert answered == set(fleet.devices)
    # To a group: only its two members answer.
    Select(browser.find_element(By.ID, "bc-group")).select_by_value("north")
    browser.find_element(By.ID, "bc-send").click()
    wait(
        browser,
        lambda d: d.find_element(By.ID, "bc-summary").text.startswith("2 answers (2 ok)"),
        "two answers from group north",
    )
    screenshot(browser, "06-broadcast")


def test_a_rollout_in_waves_shows_each_device_done(browser, page, fleet):
    Select(browser.find_element(By.ID, "bc-group")).select_by_value("")
    Select(browser.find_element(By.ID, "bc-tool")).select_by_value("hardware_info")
    browser.find_element(By.ID, "bc-waves").click()
    browser.find_element(By.ID, "bc-batch").clear()
    browser.find_element(By.ID, "bc-batch").send_keys("1")
    browser.find_element(By.ID, "bc-send").click()
    head = wait(
        browser,
        lambda d: next(
            (e.text for e in d.find_elements(By.CSS_SELECTOR, ".rollout.done .rollout-head")), None
        ),
        "a finished rollout",
    )
    assert head.startswith("hardware_info to every device: done") and "3 ok, 0 failed" in head, head
    browser.find_element(By.CSS_SELECTOR, ".rollout.done summary").click()
    waves = {
        tr.get_attribute("data-device"): tr.text
        for tr in browser.find_elements(By.CSS_SELECTOR, ".rollout.done tr")
    }
    assert sorted(waves) == sorted(fleet.devices)
    assert [waves[d].split()[1:4] for d in sorted(waves)] == [
        ["wave", "1", "ok"],
        ["wave", "2", "ok"],
        ["wave", "3", "ok"],
    ]
    screenshot(browser, "07-rollout")
    browser.find_element(By.ID, "bc-waves").click()  # back to a plain broadcast


def test_a_killed_device_is_shown_offline_within_seconds(browser, page, fleet):
    victim = fleet.daemons[2]
    wait(browser, lambda d: rows(d).get(victim.device) == "online", "the device online first")
    victim.kill()
    killed = time.monotonic()
    wait(browser, lambda d: rows(d).get(victim.device) == "offline", "the device offline")
    took = time.monotonic() - killed
    assert took < 15, f"shown offline {took:.1f} s after the kill"
    others = {k: v for k, v in rows(browser).items() if k != victim.device}
    assert set(others.values()) == {"online"}
    screenshot(browser, "07-offline")


def test_the_page_says_when_the_broker_is_gone_and_back(tmp_path, browser):
    own = Mosquitto(tmp_path / "broker").start()
    server = PageServer(tmp_path / "page", own.port)
    try:
        log_in(browser, server)
        wait(browser, lambda d: d.find_element(By.ID, "link").text == "live", "live")
        own.stop()
        wait(browser, lambda d: d.find_element(By.ID, "link").text == "broker unreachable", "the broker gone")
        screenshot(browser, "08-broker-gone")
        own.start()  # same port: the server reconnects by itself
        wait(browser, lambda d: d.find_element(By.ID, "link").text == "live", "live again")
    finally:
        server.stop()
        own.stop()


def test_the_page_raised_no_script_errors_on_the_way(browser):
    # Everything the browser logged since the first test; a refused login's 401 is the one expected.
    errors = [
        e["message"]
        for e in browser.get_log("browser")
        if e["level"] == "SEVERE" and "status of 401" not in e["message"]
    ]
    assert errors == []


# -- refusals over plain HTTP ---------------------------------------------------------------------------
def test_a_host_name_the_page_does_not_serve_is_refused(tmp_path, broker):
    """DNS rebinding: a browser page from another name, resolved to the page's address, gets nothing."""
    named = PageServer(tmp_path, broker.port, allowed_hosts=["fleet.example.net"])
    try:
        for host, served in [
            ("evil.example", False),
            ("fleet.example.net", True),
            (f"127.0.0.1:{named.port}", True),
            (f"localhost:{named.port}", True),
            ("fleet.example.net.evil.example", False),
        ]:
            status, _, body = named.request("GET", "/login", headers={"Host": host})
            assert (status != 421) == served, (host, status, body[:200])
            if not served:
                assert b"allowed_hosts" in body
    finally:
        named.stop()


def test_a_wrong_password_gets_no_session(page):
    status, headers, body = page.request(
        "POST", "/login", "secret=guess", {"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert status == 401 and "set-cookie" not in headers and b"wrong password or token" in body


def call_body(device: str) -> str:
    return json.dumps({"device": device, "tool": "hardware_info", "args": {}})


def test_a_post_without_a_session_is_refused(page, fleet):
    status, _, body = page.request(
        "POST", "/api/call", call_body(fleet.devices[0]), {"Content-Type": "application/json"}
    )
    assert status == 401 and "log in" in json.loads(body)["error"]
    status, _, _ = page.request("GET", "/api/state")
    assert status == 401
    # A cookie the server never gave out is no session either.
    status, _, _ = page.request(
        "GET", "/api/state", headers={"Cookie": f"edgeclaw_fleet_{page.port}=made-up"}
    )
    assert status == 401


def test_a_post_without_the_csrf_token_is_refused(page, fleet):
    cookie, csrf = page.login()
    json_post = {"Content-Type": "application/json", "Cookie": cookie}
    for token in ({}, {"X-CSRF-Token": ""}, {"X-CSRF-Token": csrf[:-1] + ("A" if csrf[-1] != "A" else "B")}):
        status, _, body = page.request(
            "POST", "/api/call", call_body(fleet.devices[0]), {**json_post, **token}
        )
        assert status == 403 and "CSRF" in json.loads(body)["error"], token
    # Logging out also needs it.
    status, _, _ = page.request("POST", "/logout", "", {"Cookie": cookie})
    assert status == 403
    # With it, the same call goes through.
    status, _, body = page.request(
        "POST", "/api/call", call_body(fleet.devices[0]), {**json_post, "X-CSRF-Token": csrf}
    )
    assert status == 200 and json.loads(body)["answer"]["ok"] is True
    # Another site's page cannot post even with the token (the browser names it in Origin).
    status, _, _ = page.request(
        "POST",
        "/api/call",
        call_body(fleet.devices[0]),
        {**json_post, "X-CSRF-Token": csrf, "Origin": "http://evil.example"},
    )
    assert status == 403


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus is not installed")
def test_prometheus_scrapes_the_page_with_its_token(page, fleet, tmp_path):
    from tests.test_metrics import Prometheus, promtool_check

    assert page.request("GET", "/metrics")[0] == 401  # like the API: a session or the token
    headers = {"Authorization": f"Bearer {TOKEN}"}
    before = page.request("GET", "/metrics", headers=headers)[2].decode()
    status, _, body = page.request(
        "POST", "/api/call", call_body(fleet.devices[0]), {"Content-Type": "application/json", **headers}
    )
    assert status == 200, body
    status, _, body = page.request("GET", "/metrics", headers=headers)
    assert status == 200
    checked = promtool_check(body)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    text = body.decode()
    counted = 'edgeclaw_page_commands_total{kind="call",outcome="ok"}'

    def value(exposition: str, series: str) -> float:
        return next(
            (float(line.split()[-1]) for line in exposition.splitlines() if line.startswith(series)), 0.0
        )

    assert value(text, counted) == value(before, counted) + 1
    token = tmp_path / "token"
    token.write_text(TOKEN)
    prometheus = Prometheus(tmp_path, f"127.0.0.1:{page.port}", token_file=token)
    try:
        held = prometheus.wait_for("sum(edgeclaw_page_devices) == 3")
        assert float(held[0]["value"][1]) == 3
        assert prometheus.wait_for("edgeclaw_page_broker_connected == 1")
        assert prometheus.wait_for(f"{counted} >= 1")
    finally:
        prometheus.stop()


def test_the_token_opens_a_session_and_works_as_a_bearer(page, fleet):
    cookie, csrf = page.login(TOKEN)
    assert cookie.startswith(f"edgeclaw_fleet_{page.port}=") and csrf
    status, _, body = page.request(
        "POST",
        "/api/call",
        call_body(fleet.devices[0]),
        {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
    )
    assert status == 200 and json.loads(body)["ok"]
    status, _, _ = page.request(
        "POST",
        "/api/call",
        call_body(fleet.devices[0]),
        {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}x"},
    )
    assert status == 401


def test_the_page_is_served_with_a_strict_content_security_policy(page):
    status, headers, _ = page.request("GET", "/login")
    assert status == 200
    policy = headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    # Only the shipped files, by plain name.
    assert page.request("GET", "/static/app.js")[0] == 200
    assert page.request("GET", "/static/../service.py")[0] == 404
    assert page.request("GET", "/static/%2e%2e%2fservice.py")[0] == 404


def test_without_a_configured_secret_the_run_makes_a_token_of_its_own(tmp_path, broker, fleet):
    server = PageServer(tmp_path / "page", broker.port, login=False, session_ttl_s=2)
    try:
        words = server.log.read_text().split("log in with this run's token ", 1)
        assert len(words) == 2, server.log.read_text()
        token = words[1].split()[0]
        assert len(token) >= 20
        assert server.status_of_login("") == 401
        assert server.status_of_login(PASSWORD) == 401
        assert server.status_of_login(token) == 303
        assert server.request("GET", "/api/state")[0] == 401
        # Its sessions end session_ttl_s after the login, used or not.
        cookie, _ = server.login(token)
        deadline = time.monotonic() + WAIT_S
        while server.request("GET", "/api/state", headers={"Cookie": cookie})[0] == 200:
            assert time.monotonic() < deadline, "the session did not end"
            time.sleep(0.2)
        assert server.request("GET", "/api/state", headers={"Cookie": cookie})[0] == 401
    finally:
        server.stop()


def waiting_approval(page: PageServer, cookie: str, device: str, text: str) -> str:
    """The id of the approval question of `device` whose summary holds `text`, once the page has it."""
    deadline = time.monotonic() + WAIT_S
    while True:
        state = json.loads(page.request("GET", "/api/state", headers={"Cookie": cookie})[2])
        waiting = [
            q
            for q in state["approvals"]
            if q["device"] == device and text in q["summary"] and q["trust"] == "verified"
        ]
        if waiting:
            return waiting[0]["id"]
        assert time.monotonic() < deadline, "the approval never appeared"
        time.sleep(0.1)


def call_in_background(
    page: PageServer, headers: dict[str, str], device: str, command: str
) -> tuple[threading.Thread, dict[str, Any]]:
    """`exec command` on `device` through /api/call, in a thread (it waits for an approval); the
    result dict gets the HTTP status and the parsed body when the call returns."""
    result: dict[str, Any] = {}

    def call() -> None:
        body = json.dumps({"device": device, "tool": "exec", "args": {"command": command}})
        result["status"], _, raw = page.request("POST", "/api/call", body, headers)
        result["body"] = json.loads(raw)

    caller = threading.Thread(target=call)
    caller.start()
    return caller, result


def test_a_call_denied_from_the_api_is_answered_denied(page, fleet):
    cookie, csrf = page.login()
    headers = {"Content-Type": "application/json", "Cookie": cookie, "X-CSRF-Token": csrf}
    device = fleet.devices[1]
    caller, result = call_in_background(page, headers, device, "echo never-runs")
    question = waiting_approval(page, cookie, device, "never-runs")
    bad = json.dumps({"device": device, "id": question, "decision": "yes please"})
    status, _, body = page.request("POST", "/api/approve", bad, headers)
    assert status == 400 and "allow-once" in json.loads(body)["error"]
    deny = json.dumps({"device": device, "id": question, "decision": "deny"})
    status, _, body = page.request("POST", "/api/approve", deny, headers)
    assert status == 200 and json.loads(body)["answer"]["ok"] is True
    caller.join(WAIT_S)
    answer = result["body"]["answer"]
    assert result["status"] == 200 and answer["ok"] is False and "never-runs" not in answer.get("for_llm", "")
    assert "denied" in answer["error"]


def test_approve_always_is_stored_on_the_device_for_that_command(page, fleet):
    cookie, csrf = page.login()
    headers = {"Content-Type": "application/json", "Cookie": cookie, "X-CSRF-Token": csrf}
    device = fleet.devices[0]  # devices[2] was killed by the offline test before
    daemon = next(d for d in fleet.daemons if d.device == device)
    caller, result = call_in_background(page, headers, device, "echo always-from-the-page")
    question = waiting_approval(page, cookie, device, "always-from")
    always = json.dumps({"device": device, "id": question, "decision": "allow-always"})
    status, _, body = page.request("POST", "/api/approve", always, headers)
    assert status == 200 and json.loads(body)["answer"]["ok"] is True
    caller.join(WAIT_S)
    answer = result["body"]["answer"]
    assert answer["ok"] is True and "always-from-the-page" in answer["for_llm"]
    # The device keeps the decision (edgeclaw approvals list on the device itself shows it).
    listed = subprocess.run(
        [sys.executable, "-m", "edgeclaw", "approvals", "list"],
        env=daemon.env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "echo" in listed.stdout


# -- another client publishing in a device's name (docs/fleet.md#device-keys) ------------------------
def open_page(driver: webdriver.Chrome, page: PageServer) -> None:
    """The page, logged in (again, when the session of the earlier tests is gone)."""
    driver.get(page.url + "/")
    found = wait(
        driver, lambda d: d.find_elements(By.ID, "secret") or d.find_elements(By.ID, "approvals"), "it"
    )
    if found[0].get_attribute("id") == "secret":
        log_in(driver, page)


def page_state(page: PageServer, cookie: str) -> dict[str, Any]:
    return json.loads(page.request("GET", "/api/state", headers={"Cookie": cookie})[2])


async def test_a_forged_question_and_a_forged_decision_change_nothing_the_page_acts_on(
    browser, page, fleet, broker
):
    cookie, csrf = page.login()
    headers = {"Content-Type": "application/json", "Cookie": cookie, "X-CSRF-Token": csrf}
    device = fleet.devices[1]
    caller, result = call_in_background(page, headers, device, "touch PWNED_APPROVAL")
    real = await asyncio.to_thread(waiting_approval, page, cookie, device, "PWNED_APPROVAL")
    harmless = {
        "id": real,
        "tool": "exec",
        "summary": "ls -la",
        "expires_at": time.time() + 60,
        "action_digest": action_digest("exec", {"command": "ls -la"}),
    }
    decided = {"kind": "approval", "decision": "deny", "approval": real, "by": "mqtt:approver"}
    async with Caller(broker.port, []) as attacker:  # any client of the broker, without the device's key
        await attacker.publish(f"edgeclaw/{device}/approval/request", harmless)
        await attacker.publish(f"edgeclaw/{device}/approval/request", {**harmless, "id": "forged-only"})
        await attacker.publish(f"edgeclaw/{device}/events", decided)

    def forged() -> list[dict[str, Any]]:
        return [q for q in page_state(page, cookie)["approvals"] if q["trust"] == "forged"]

    assert len(await poll(lambda: forged() if len(forged()) == 2 else None, 30, "the forgeries")) == 2
    state = page_state(page, cookie)
    mine = [q for q in state["approvals"] if q["device"] == device]
    assert {(q["id"], q["summary"].split("\n")[0], q["trust"]) for q in mine} == {
        (real, "touch PWNED_APPROVAL", "verified"),  # the forged "decided" event hid nothing
        (real, "ls -la", "forged"),
        ("forged-only", "ls -la", "forged"),
    }
    row = next(r for r in state["devices"] if r["device"] == device)
    assert row["trust"] == "verified" and row["forged"] >= 1  # the forged event, dropped and counted
    # In the browser: the forgeries in red, without a button; the device's own question answerable.
    await asyncio.to_thread(open_page, browser, page)
    await asyncio.to_thread(
        wait,
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#approval-list li[data-trust=forged]"),
        "forged",
    )
    assert "FORGED" in texts(browser, "#approval-list li[data-trust=forged]")[0]
    assert not browser.find_elements(By.CSS_SELECTOR, "#approval-list li[data-trust=forged] button")
    assert browser.find_elements(By.CSS_SELECTOR, "#approval-list li[data-trust=verified] button")
    screenshot(browser, "08-forged-question")

    # A question only a forger asked cannot be answered from the page.
    approve = json.dumps({"device": device, "id": "forged-only", "decision": "allow-once"})
    status, _, body = await asyncio.to_thread(page.request, "POST", "/api/approve", approve, headers)
    assert status == 409 and "signed by" in json.loads(body)["error"]
    # The real question is answered for the action the device asked about (its digest): denied here.
    deny = json.dumps({"device": device, "id": real, "decision": "deny"})
    status, _, body = await asyncio.to_thread(page.request, "POST", "/api/approve", deny, headers)
    assert status == 200 and json.loads(body)["answer"]["ok"] is True
    await asyncio.to_thread(caller.join, WAIT_S)
    answer = result["body"]["answer"]
    assert answer["ok"] is False and "denied by mqtt:approver" in answer["error"]


async def test_a_broadcast_answer_in_another_devices_name_is_dropped(page, fleet, broker):
    cookie, csrf = page.login()
    headers = {"Content-Type": "application/json", "Cookie": cookie, "X-CSRF-Token": csrf}
    # The device killed before (pinned, offline): any answer in its name can only be someone else's.
    victim = fleet.daemons[2]
    assert not victim.running
    victim = victim.device

    # To a group no device online is in: the page collects for the whole wait, so the lie is judged.
    async with Caller(broker.port, ["edgeclaw/_group/south/tool/call"]) as attacker:
        body = json.dumps({"group": "south", "tool": "hardware_info", "args": {}, "wait_s": 3})
        broadcast = asyncio.create_task(
            asyncio.to_thread(page.request, "POST", "/api/broadcast", body, headers)
        )
        [request] = await attacker.answers("edgeclaw/_group/south/tool/call", 1, WAIT_S)
        # It answers at once, in the victim's name, on the page's answer topic with its correlation.
        lie = {"id": request.json["id"], "ok": True, "for_llm": "forged", "device": victim}
        assert request.response_topic is not None
        await attacker.publish(request.response_topic, lie, correlation=request.correlation)
        status, _, raw = await broadcast
    assert status == 200
    answers = {a["device"]: a for a in json.loads(raw)["answers"]}
    assert answers == {}
    assert f"dropped a broadcast answer in the name of {victim}" in page.log.read_text()


def test_the_device_list_is_served_in_pages_behind_the_login(page, fleet):
    assert page.request("GET", "/api/devices")[0] == 401
    cookie, _ = page.login()
    status, _, body = page.request(
        "GET", "/api/devices?offset=0&limit=2&sort=-device", headers={"Cookie": cookie}
    )
    listing = json.loads(body)
    assert status == 200 and listing["matched"] >= 3 and len(listing["rows"]) == 2
    assert [r["device"] for r in listing["rows"]] == sorted(fleet.devices, reverse=True)[:2]
    assert listing["counts"]["devices"] == listing["total"]
    status, _, body = page.request("GET", f"/api/devices?q={fleet.devices[1]}", headers={"Cookie": cookie})
    assert [r["device"] for r in json.loads(body)["rows"]] == [fleet.devices[1]]
    for query, error in [
        ("limit=0", "limit must be"),
        ("limit=100000", "limit must be at most"),
        ("offset=-1", "offset must be"),
        ("sort=secret", "sort must be one of"),
        ("state=nope", "state must be one of"),
    ]:
        status, _, body = page.request("GET", f"/api/devices?{query}", headers={"Cookie": cookie})
        assert status == 400 and error in json.loads(body)["error"], query


async def test_the_page_shows_where_each_device_is_with_updates(tmp_path, broker):
    server = PageServer(tmp_path / "page", broker.port)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    waiting = {
        "state": "deferred",
        "version": "0.3.0",
        "reason": "the update lock is held by tool call stm32_flash",
    }
    try:
        async with Caller(broker.port, []) as device_side:
            for device, update in (("upd-busy", waiting), ("upd-calm", {"state": "idle", "slot": "base"})):
                body = {"state": "online", "version": "0.2.0", "update": update}
                await device_side.publish(f"edgeclaw/{device}/status", body, retain=True)

        def listed() -> list[dict[str, Any]]:
            got = json.loads(server.request("GET", "/api/devices?q=upd-&sort=update", headers=bearer)[2])
            return got["rows"] if len(got["rows"]) == 2 else []

        rows = await poll(listed, WAIT_S)
        assert [r["device"] for r in rows] == ["upd-busy", "upd-calm"]
        assert rows[0]["update"] == "deferred" and rows[0]["update_version"] == "0.3.0"
        assert rows[0]["update_reason"] == waiting["reason"] and rows[1]["update"] == "idle"
        found = json.loads(server.request("GET", "/api/devices?q=deferred", headers=bearer)[2])["rows"]
        assert [r["device"] for r in found] == ["upd-busy"]
        detail = json.loads(server.request("GET", "/api/device/upd-busy", headers=bearer)[2])
        assert detail["status"]["update"] == waiting  # what the device view shows in its facts
    finally:
        server.stop()


async def test_the_history_is_still_served_after_a_restart(tmp_path, broker):
    device = "history-keeper"
    server = PageServer(tmp_path / "page", broker.port)
    try:
        now = time.time()
        async with Caller(broker.port, []) as device_side:
            await device_side.publish(f"edgeclaw/{device}/status", {"state": "online"}, retain=True)
            for ago in (120, 60, 0):  # three health reports, a minute apart
                point = {"ts": now - ago, "cpu_temp_c": 50.0 - ago / 60}
                await device_side.publish(f"edgeclaw/{device}/health", point, retain=True)
            await device_side.publish(
                f"edgeclaw/{device}/events", {"ts": now, "tool": "i2c", "outcome": "ok"}
            )
        path = f"/api/history?kind=events&device={device}"
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        await poll(lambda: json.loads(server.request("GET", path, headers=bearer)[2])["records"], WAIT_S)
    finally:
        server.stop()
    server.log.unlink()  # the next run's "fleet page on" is the one to wait for
    again = PageServer(tmp_path / "page", broker.port)  # the same state directory
    try:
        [event] = json.loads(again.request("GET", path, headers=bearer)[2])["records"]
        assert event["tool"] == "i2c" and event["device"] == device
        for query, error in [("kind=passwords", "kind must be one of"), ("device=../x", "device must be")]:
            status, _, body = again.request("GET", f"/api/history?{query}", headers=bearer)
            assert status == 400 and error in json.loads(body)["error"], query
        assert again.request("GET", "/api/history")[0] == 401

        def detail_now() -> dict[str, Any] | None:
            d = json.loads(again.request("GET", f"/api/device/{device}", headers=bearer)[2])
            return d if "history" in d else None

        detail = await poll(detail_now, WAIT_S)
        # The retained health alone is one point: the two before it come from the kept history.
        assert [p[1] for p in detail["history"]] == [48.0, 49.0, 50.0]
        assert [e["tool"] for e in detail["events"]] == ["i2c"]
    finally:
        again.stop()


async def test_a_large_fleet_is_drawn_only_where_it_is_on_screen(tmp_path, browser):
    own = Mosquitto(tmp_path / "broker").start()
    server = PageServer(tmp_path / "page", own.port)
    try:
        async with Caller(own.port, []) as devices:
            for i in range(600):
                status = {"state": "online" if i % 3 else "offline", "board": "sim", "version": "1.0"}
                await devices.publish(f"edgeclaw/many-{i:03d}/status", status, retain=True)
        log_in(browser, server)
        wait(
            browser, lambda d: d.find_element(By.ID, "counts").text == "400 online, 200 offline", "the counts"
        )
        shown = wait(browser, lambda d: r if len(r := rows(d)) else None, "the first rows")
        assert "many-000" in shown and len(shown) < 100  # what is on screen and a few more, not 600
        # Scrolled to the end, the last rows are fetched and drawn, the first ones dropped.
        browser.execute_script(
            "const b = document.getElementById('device-list'); b.scrollTop = b.scrollHeight"
        )
        wait(browser, lambda d: "many-599" in rows(d), "the last row")
        assert "many-000" not in rows(browser) and len(rows(browser)) < 100
        # The filter is the server's: only the offline ones, all 200 of them reachable.
        browser.find_element(By.ID, "filter").send_keys("offline")
        wait(browser, lambda d: set(rows(d).values()) == {"offline"}, "only offline devices")
        assert "(200 shown)" in browser.find_element(By.ID, "counts").text
    finally:
        server.stop()
        own.stop()


async def test_the_stream_sends_batches_and_keeps_up_with_a_flood(tmp_path):
    own = Mosquitto(tmp_path / "broker").start()
    server = PageServer(tmp_path / "page", own.port)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT_S)
    try:
        conn.request("GET", "/api/stream", headers={"Authorization": f"Bearer {TOKEN}"})
        stream = conn.getresponse()
        assert stream.status == 200
        last: dict[str, float] = {}
        started = time.monotonic()
        async with Caller(own.port, []) as devices:
            for n in range(10):  # 300 devices, ten reports each, as fast as the broker takes them
                for i in range(300):
                    last[f"flood-{i:03d}"] = ts = 1000.0 + n
                    await devices.publish(f"edgeclaw/flood-{i:03d}/health", {"ts": ts}, retain=True)
        kinds: list[str] = []
        held: dict[str, float] = {}

        def read_until_all_held() -> None:
            kind = ""
            while held != last:
                line = stream.fp.readline().decode()
                assert line, "the stream ended"
                if line.startswith("event: "):
                    kind = line[7:].strip()
                    kinds.append(kind)
                elif line.startswith("data: ") and kind == "devices":
                    held.update((r["device"], r["last_seen"]) for r in json.loads(line[6:])["rows"])

        await asyncio.wait_for(asyncio.to_thread(read_until_all_held), WAIT_S)
        took = time.monotonic() - started
        # The stream may open before the page's own broker connection is up: one `link` event then
        # tells the page it came up. It is not a device update.
        kinds = [k for k in kinds if k != "link"]
        # 3,000 messages, one `devices` event each 250 ms at most: never one event a message.
        assert kinds[0] == "snapshot" and set(kinds[1:]) == {"devices"}
        assert len(kinds) - 1 <= took / 0.25 + 2, (len(kinds), took)
    finally:
        conn.close()
        server.stop()
        own.stop()
