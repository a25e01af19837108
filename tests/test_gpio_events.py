"""GPIO edges on the sim board (gpiozero's MockFactory): waiting for one, debounce, edge-triggered jobs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.hw_support import CTX, call, make_runtime

BUTTON = 27  # the sim board's button: pull-up, active low (pressed = pulled to ground)


@pytest.fixture
async def sim(tmp_path):
    runtime = make_runtime(tmp_path)
    yield runtime
    await runtime.aclose()


def button_pin(runtime):
    """The mock pin behind the sim button: what a test's finger presses."""
    return runtime.hardware.gpio().driver.device(BUTTON).pin


async def until(condition: Callable[[], bool], deadline_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not condition():
        assert loop.time() < end, "condition not met in time"
        await asyncio.sleep(0.005)


async def press_while_waiting(runtime, args, press: Callable[[object], None]):
    """Start a `gpio wait`, press once it listens, return the call's outcome."""
    task = asyncio.ensure_future(call(runtime, "gpio", action="wait", **args))
    await until(lambda: runtime.hardware._gpio is not None and runtime.hardware.gpio().watching(BUTTON) > 0)
    press(button_pin(runtime))
    return await task


async def test_wait_sees_a_button_press_as_a_falling_active_edge(sim):
    outcome = await press_while_waiting(
        sim, {"pin": "button", "edge": "falling", "timeout_ms": 10_000}, lambda pin: pin.drive_low()
    )
    assert outcome.ok, outcome.error
    assert outcome.data["seen"] is True
    assert (outcome.data["kind"], outcome.data["level"], outcome.data["active"]) == ("falling", 0, True)
    assert "GPIO 27 (button): falling edge (now active, level 0)" in outcome.for_llm
    assert sim.hardware.gpio().watching(BUTTON) == 0  # the wait let go of the pin


async def test_wait_for_active_follows_the_pins_logic_not_its_level(sim):
    # The button is active low: "active" is the press (falling), and a release does not count.
    def press_and_release(pin) -> None:
        pin.drive_low()

    outcome = await press_while_waiting(
        sim, {"pin": BUTTON, "edge": "active", "timeout_ms": 10_000, "debounce_ms": 0}, press_and_release
    )
    assert outcome.data["active"] is True and outcome.data["kind"] == "falling"
    released = await press_while_waiting(
        sim,
        {"pin": BUTTON, "edge": "active", "timeout_ms": 300, "debounce_ms": 0},
        lambda pin: pin.drive_high(),
    )
    assert released.ok and released.data["seen"] is False


async def test_no_edge_within_the_timeout_is_a_result_not_an_error(sim):
    outcome = await call(sim, "gpio", action="wait", pin="button", timeout_ms=200)
    assert outcome.ok, outcome.error
    assert outcome.data["seen"] is False
    assert outcome.for_llm == "GPIO 27 (button): no edge within 0.2 s"
    falling = await call(sim, "gpio", action="wait", pin="button", edge="falling", timeout_ms=100)
    assert falling.for_llm == "GPIO 27 (button): no falling edge within 0.1 s"


async def test_a_glitch_shorter_than_the_debounce_is_no_edge(sim):
    def glitch(pin) -> None:
        pin.drive_low()
        pin.drive_high()  # back before the debounce time is over

    debounced = await press_while_waiting(
        sim, {"pin": "button", "timeout_ms": 400, "debounce_ms": 100}, glitch
    )
    assert debounced.ok and debounced.data["seen"] is False
    raw = await press_while_waiting(sim, {"pin": "button", "timeout_ms": 2000, "debounce_ms": 0}, glitch)
    assert raw.data["seen"] is True and raw.data["kind"] == "falling"


async def test_a_bouncing_contact_gives_one_edge_once_it_settles(sim):
    gpio = sim.hardware.gpio()
    edges = []
    watch = await gpio.watch(BUTTON, "both", 0.05, edges.append)
    pin = button_pin(sim)
    try:
        for _ in range(5):  # a contact bouncing as it closes
            pin.drive_low()
            pin.drive_high()
        pin.drive_low()
        await until(lambda: len(edges) >= 1)
        await asyncio.sleep(0.2)  # a second edge, if any, would have come by now
        assert [(e.kind, e.active) for e in edges] == [("falling", True)]
        pin.drive_high()
        await until(lambda: len(edges) == 2)
        assert (edges[1].kind, edges[1].active) == ("rising", False)
    finally:
        watch.cancel()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"action": "wait", "pin": "led", "timeout_ms": 100}, "is an output"),
        ({"action": "wait", "pin": "button"}, "'timeout_ms' is required for wait"),
        ({"action": "read", "pin": "button", "edge": "rising"}, "go with the wait action"),
        ({"action": "wait", "pin": 5, "timeout_ms": 100}, "not granted by the sim profile"),
    ],
)
async def test_waits_the_profile_does_not_allow_are_refused(sim, args, words):
    outcome = await call(sim, "gpio", **args)
    assert outcome.refused, outcome.error
    assert words in outcome.error


# -- edges as job triggers ------------------------------------------------------------------------


class SessionOutlet:
    """The `cli` channel's way into its sessions, as a channel registers one: records what arrives."""

    def __init__(self) -> None:
        self.shown: list[tuple[str, str]] = []

    def has_session(self, session_key: str) -> bool:
        return session_key.startswith("cli:")

    async def to_session(self, session_key: str, text: str) -> str:
        self.shown.append((session_key, text))
        return f"shown in {session_key}"

    async def to_target(self, target: str, message) -> str:
        raise AssertionError("not used")


@pytest.fixture
async def daemon(tmp_path):
    """The sim board's runtime with its scheduler running (as `edgeclaw run` has it)."""
    from edgeclaw.daemon.scheduler import scheduler_service

    runtime = make_runtime(tmp_path, automation={"clock_sync": "off"})
    outlet = SessionOutlet()
    runtime.outlets.register("cli", outlet)
    async with scheduler_service(runtime):
        yield runtime, outlet
    await runtime.aclose()


async def cron(runtime, **args):
    return await runtime.registry.execute("cron", args, CTX)


def scheduler(runtime):
    return runtime.automation.scheduler


async def add_edge_job(runtime, **args) -> str:
    outcome = await cron(runtime, action="add", **args)
    assert outcome.ok, outcome.error
    job_id = outcome.data["job"]["id"]
    await until(lambda: scheduler(runtime).edge_watched(job_id))
    return job_id


async def runs(runtime, job_id) -> list[dict]:
    outcome = await cron(runtime, action="runs", id=job_id)
    assert outcome.ok, outcome.error
    return outcome.data["runs"]


async def test_a_button_press_runs_the_job_and_its_notice_reaches_the_session(daemon):
    runtime, outlet = daemon
    job_id = await add_edge_job(
        runtime,
        name="doorbell",
        on_edge={"pin": "button", "edge": "falling", "debounce_ms": 0},
        tool="gpio",
        args={"action": "read", "pin": "button"},
        to="message:session:cli:alice",
    )
    listed = await cron(runtime, action="list")
    assert "on falling edge of GPIO 'button' (debounce 0 ms)" in listed.for_llm
    assert "next at the next edge" in listed.for_llm
    pin = button_pin(runtime)
    pin.drive_low()  # pressed
    await until(lambda: len(outlet.shown) == 1)
    session, text = outlet.shown[0]
    assert session == "cli:alice"
    assert "[job doorbell] GPIO 27 (button): falling edge (now active, level 0)" in text
    assert "GPIO 27 (button) reads active (level 0)" in text  # what the job's call found
    pin.drive_high()  # released: not the edge the job waits for
    await scheduler(runtime).idle()
    done = await runs(runtime, job_id)
    assert [(r["trigger"], r["outcome"]) for r in done] == [("edge", "ok")]
    assert len(outlet.shown) == 1


async def test_edges_during_a_run_are_one_skipped_record_counting_them(daemon):
    runtime, _outlet = daemon
    job_id = await add_edge_job(
        runtime,
        on_edge={"pin": 27, "edge": "falling", "debounce_ms": 0},
        tool="gpio",
        # Long enough that the three presses below are seen while it runs, on a busy machine too.
        args={"action": "pulse", "pin": "led", "duration_ms": 4000},
        to="none",
    )
    pin = button_pin(runtime)
    pin.drive_low()
    await until(lambda: scheduler(runtime).job_state(job_id) == "running")
    for _ in range(3):  # pressed three more times while the LED pulse runs
        pin.drive_high()
        pin.drive_low()
    await until(lambda: scheduler(runtime).job_state(job_id) == "")
    await scheduler(runtime).idle()
    done = await runs(runtime, job_id)
    assert sorted((r["trigger"], r["outcome"]) for r in done) == [("edge", "ok"), ("edge", "skipped")]
    skipped = next(r for r in done if r["outcome"] == "skipped")
    assert "the previous run was still going (3 edges in all)" in skipped["detail"]


async def test_a_removed_or_disabled_edge_job_stops_watching_its_pin(daemon):
    runtime, _outlet = daemon
    gpio = runtime.hardware.gpio()
    job_id = await add_edge_job(
        runtime, on_edge={"pin": "button"}, tool="gpio", args={"action": "read", "pin": "button"}, to="none"
    )
    assert gpio.watching(BUTTON) == 1
    assert (await cron(runtime, action="update", id=job_id, enabled=False)).ok
    assert gpio.watching(BUTTON) == 0 and not scheduler(runtime).edge_watched(job_id)
    assert (await cron(runtime, action="update", id=job_id, enabled=True)).ok
    await until(lambda: gpio.watching(BUTTON) == 1)
    assert (await cron(runtime, action="remove", id=job_id)).ok
    assert gpio.watching(BUTTON) == 0
    button_pin(runtime).drive_low()
    await scheduler(runtime).idle()
    assert runtime.automation.store.runs(job_id) == []  # the press after the removal ran nothing


async def test_an_edge_job_is_watched_again_after_a_restart(tmp_path):
    from edgeclaw.daemon.scheduler import scheduler_service

    first = make_runtime(tmp_path, automation={"clock_sync": "off"})
    async with scheduler_service(first):
        job_id = await add_edge_job(
            first, on_edge={"pin": "button", "edge": "active"}, prompt="The button was pressed.", to="none"
        )
    await first.aclose()
    second = make_runtime(tmp_path, automation={"clock_sync": "off"})
    try:
        async with scheduler_service(second):
            await until(lambda: scheduler(second).edge_watched(job_id))
            assert scheduler(second).status()["edge_jobs_watched"] == 1
    finally:
        await second.aclose()


@pytest.mark.parametrize(
    ("on_edge", "words"),
    [
        ({"pin": "led"}, "is an output"),
        ({"pin": 5}, "GPIO 5 is not granted by the sim profile"),
        ({"pin": "button", "edge": "sideways"}, "edge"),
        ({"pin": "button", "debounce_ms": 60_000}, "debounce_ms"),
    ],
)
async def test_an_edge_trigger_that_cannot_be_watched_is_refused_when_made(daemon, on_edge, words):
    runtime, _outlet = daemon
    outcome = await cron(
        runtime, action="add", on_edge=on_edge, tool="gpio", args={"action": "list"}, to="none"
    )
    assert outcome.refused, outcome.error
    assert words in outcome.error
    assert (await cron(runtime, action="list")).data["jobs"] == []


async def test_a_job_gives_exactly_one_trigger(daemon):
    runtime, _outlet = daemon
    outcome = await cron(
        runtime,
        action="add",
        every="5m",
        on_edge={"pin": "button"},
        tool="gpio",
        args={"action": "list"},
    )
    assert outcome.refused
    assert "exactly one of 'cron', 'every', 'at' or 'on_edge'" in outcome.error


def test_cron_add_on_edge_from_the_command_line(tmp_path):
    import json
    import subprocess
    import sys

    config = tmp_path / "edgeclaw.toml"
    config.write_text(f'board = "sim"\nstate_dir = "{tmp_path / "state"}"\n')

    def cli(*words: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "edgeclaw", "cron", *words, "--config", str(config)]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    added = cli("add", "--on-edge", "button:falling:30", "--tool", "gpio", "--args", '{"action":"list"}')
    assert added.returncode == 0, added.stderr
    listed = cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    (job,) = json.loads(listed.stdout)["data"]["jobs"]
    assert job["schedule"]["kind"] == "edge"
    assert json.loads(job["schedule"]["spec"]) == {"pin": "button", "edge": "falling", "debounce_ms": 30}
    refused = cli("add", "--on-edge", "led", "--tool", "gpio", "--args", '{"action":"list"}')
    assert refused.returncode == 2 and "is an output" in refused.stderr + refused.stdout


async def test_a_pin_the_profile_no_longer_grants_is_an_error_on_the_jobs_record(tmp_path):
    from edgeclaw.daemon.scheduler import scheduler_service
    from tests.hw_support import write_profile

    first = make_runtime(tmp_path, automation={"clock_sync": "off"})
    async with scheduler_service(first):
        job_id = await add_edge_job(
            first, on_edge={"pin": "button"}, tool="gpio", args={"action": "list"}, to="none"
        )
    await first.aclose()
    # The board's profile changes: the button is gone.
    profile = write_profile(
        tmp_path, "no-button", 'simulated = true\n[[gpio]]\npin = 17\nname = "led"\ndirection = "out"\n'
    )
    second = make_runtime(tmp_path, board=profile, automation={"clock_sync": "off"})
    try:
        async with scheduler_service(second):
            await until(lambda: bool(second.automation.store.runs(job_id)))
            (run,) = second.automation.store.runs(job_id)
            assert not scheduler(second).edge_watched(job_id)
    finally:
        await second.aclose()
    assert (run.trigger, run.outcome) == ("edge", "error")
    assert "cannot watch GPIO button: GPIO 'button' is not granted by the no-button profile" in run.detail
