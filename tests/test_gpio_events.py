"""GPIO edges on the sim board (gpiozero's MockFactory): waiting for one, debounce, edge-triggered jobs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.hw_support import call, make_runtime

BUTTON = 27  # the sim board's button: pull-up, active low (pressed = pulled to ground)


@pytest.fixture
async def sim(tmp_path):
    runtime = make_runtime(tmp_path)
    yield runtime
    await runtime.aclose()


def button_pin(runtime):
    """The mock pin behind the sim button: what a test's finger presses."""
    return runtime.hardware.gpio().driver.device(BUTTON).pin


async def until(condition: Callable[[], bool], deadline_s: float = 10.0) -> None:
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
    assert outcome.for_llm == "GPIO 27 (button): no both edge within 0.2 s"


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
