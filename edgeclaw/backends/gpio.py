"""GPIO through gpiozero: devices sit on pins, pins come from a factory.

On a board the factory is gpiozero's default (lgpio, RPi.GPIO...); on the
sim board it is `MockFactory` with PWM-capable mock pins, chosen explicitly
(off a Pi gpiozero would otherwise raise BadPinFactory). Each granted pin
gets the gpiozero device that matches its grant — an input with its pull, an
output, or a PWM output — created on first use and closed on shutdown. Each
pin has its own lock, so a long pulse on one pin does not hold up the others.

Edges on input pins reach the event loop from gpiozero's callbacks (its own
thread on a board, the caller's thread for a mock pin) through
`call_soon_threadsafe`. Each `EdgeWatch` debounces them on its own: a level
counts only once it has held for the watch's debounce time, so a bouncing
contact gives one edge, and two watchers with different debounce times do
not disturb each other. Waiting for an edge does not hold the pin's lock.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Callable
from typing import Any, Literal

from edgeclaw.backends.base import BusGate, BusTimeout, DeviceUnavailable, missing_library
from edgeclaw.board import GPIOPinGrant
from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

DEFAULT_PWM_HZ = 100.0
EDGES = ("rising", "falling", "both", "active", "inactive")
EdgeFilter = Literal["rising", "falling", "both", "active", "inactive"]


@dataclass(frozen=True)
class PinState:
    pin: int
    level: int  # the electrical level, 0 or 1
    active: bool  # the logical state (an active-low button reads active when pulled to 0)
    value: float  # gpiozero's value: 0/1, or the PWM duty cycle


@dataclass(frozen=True)
class Edge:
    """A debounced change of an input pin."""

    pin: int
    kind: Literal["rising", "falling"]  # the electrical change
    level: int  # the level after it
    active: bool  # the logical state after it
    at: float  # Unix time of the change that settled

    def describe(self) -> str:
        state = "active" if self.active else "inactive"
        return f"{self.kind} edge (now {state}, level {self.level})"


def edge_matches(wanted: EdgeFilter, edge: Edge) -> bool:
    if wanted == "both":
        return True
    if wanted in ("active", "inactive"):
        return edge.active == (wanted == "active")
    return edge.kind == wanted


class GpiozeroDriver:
    """The granted pins as gpiozero devices on one pin factory."""

    def __init__(self, grants: list[GPIOPinGrant], *, mock: bool) -> None:
        try:
            import gpiozero
        except ImportError:
            raise missing_library("gpiozero", "hw") from None
        self._gz = gpiozero
        self.grants = {g.pin: g for g in grants}
        # None = gpiozero's default factory (lgpio, RPi.GPIO...), resolved when the first pin is used.
        self.factory: Any = None
        if mock:
            from gpiozero.pins.mock import MockFactory, MockPWMPin

            self.factory = MockFactory(pin_class=MockPWMPin)
        self._devices: dict[int, Any] = {}

    def device(self, pin: int) -> Any:
        dev = self._devices.get(pin)
        if dev is not None:
            return dev
        g = self.grants[pin]
        gz, f = self._gz, self.factory
        try:
            with warnings.catch_warnings():
                # Off a Pi, gpiozero warns once per factory it tries; the error below says it in one line.
                warnings.simplefilter("ignore", gz.PinFactoryFallback)
                dev = self._make_device(g, f)
        except gz.BadPinFactory:
            raise DeviceUnavailable(
                "no GPIO pin library works on this machine (install lgpio or RPi.GPIO, or use the sim board)"
            ) from None
        except gz.GPIOZeroError as e:
            raise BackendError(f"GPIO {pin}: {e}") from None
        self._devices[pin] = dev
        return dev

    def _make_device(self, g: GPIOPinGrant, f: Any) -> Any:
        gz, pin = self._gz, g.pin
        if g.direction == "in":
            pull = {"up": True, "down": False, "none": None}[g.pull]
            if pull is None:
                return gz.DigitalInputDevice(pin, pull_up=None, active_state=g.active_high, pin_factory=f)
            # gpiozero derives the active state from the pull: pull-up means active low.
            return gz.DigitalInputDevice(pin, pull_up=pull, pin_factory=f)
        if g.pwm:
            return gz.PWMOutputDevice(pin, active_high=g.active_high, frequency=DEFAULT_PWM_HZ, pin_factory=f)
        return gz.DigitalOutputDevice(pin, active_high=g.active_high, pin_factory=f)

    def read(self, pin: int) -> PinState:
        dev = self.device(pin)
        value = float(dev.value)
        level = int(bool(dev.pin.state))
        return PinState(pin, level, bool(value), value)

    def write(self, pin: int, active: bool) -> PinState:
        dev = self.device(pin)
        dev.value = 1 if active else 0
        return self.read(pin)

    def set_duty(self, pin: int, duty: float, frequency_hz: float | None) -> PinState:
        dev = self.device(pin)
        if frequency_hz is not None and dev.frequency != frequency_hz:
            dev.frequency = frequency_hz
        dev.value = duty
        return self.read(pin)

    def listen(self, pin: int, notify: Callable[[int, int, bool], None]) -> PinState:
        """Call `notify(pin, level, active)` on every change of an input pin (from gpiozero's thread)."""
        dev = self.device(pin)

        def changed(active: bool) -> None:
            notify(pin, int(bool(dev.pin.state)), active)

        dev.when_activated = lambda: changed(True)
        dev.when_deactivated = lambda: changed(False)
        return self.read(pin)

    def frequency(self, pin: int) -> float | None:
        dev = self.device(pin)
        return getattr(dev, "frequency", None)

    def close(self) -> None:
        for dev in self._devices.values():
            dev.close()
        self._devices.clear()
        if self.factory is not None:
            self.factory.close()


class EdgeWatch:
    """One listener's view of an input pin: its debounce, its filter, its callback."""

    def __init__(
        self,
        controller: GPIOController,
        pin: int,
        wanted: EdgeFilter,
        debounce_s: float,
        callback: Callable[[Edge], None],
        level: int,
    ) -> None:
        self.controller = controller
        self.pin = pin
        self.wanted = wanted
        self.debounce_s = debounce_s
        self.callback = callback
        self.stable = level  # the last level that held for the debounce time
        self._timer: asyncio.TimerHandle | None = None

    def raw(self, level: int, active: bool, at: float) -> None:
        """A change as the pin reported it: counted once it has held for the debounce time."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.debounce_s <= 0:
            self._settle(level, active, at)
        else:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.debounce_s, self._settle, level, active, at)

    def _settle(self, level: int, active: bool, at: float) -> None:
        self._timer = None
        if level == self.stable:
            return  # it bounced back: no edge
        self.stable = level
        edge = Edge(self.pin, "rising" if level else "falling", level, active, at)
        if edge_matches(self.wanted, edge):
            self.callback(edge)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.controller._unwatch(self)


class GPIOController:
    """The granted pins as the tools see them: async, one lock per pin, every step bounded."""

    def __init__(self, driver: GpiozeroDriver, *, timeout_s: float, threaded: bool) -> None:
        self.driver = driver
        self._watches: dict[int, set[EdgeWatch]] = {}
        self._listening: set[int] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        # The gates share one driver, closed once by `close()`; each owns its worker thread.
        self._gates = {
            pin: BusGate(
                driver, label=f"GPIO {pin}", timeout_s=timeout_s, threaded=threaded, owns_driver=False
            )
            for pin in driver.grants
        }

    def _gate(self, pin: int) -> BusGate[GpiozeroDriver]:
        gate = self._gates.get(pin)
        if gate is None:
            raise BackendError(f"GPIO {pin} is not one of this board's pins")
        return gate

    async def read(self, pin: int) -> PinState:
        return await self._gate(pin).run(GpiozeroDriver.read, pin)

    async def write(self, pin: int, active: bool) -> PinState:
        return await self._gate(pin).run(GpiozeroDriver.write, pin, active)

    async def pulse(self, pin: int, seconds: float) -> PinState:
        """Active for `seconds`, then inactive; the pin stays locked for the whole pulse."""
        gate = self._gate(pin)
        try:
            # Waiting for the pin (another pulse on it) is bounded like every other operation.
            async with asyncio.timeout(gate.timeout_s):
                await gate.lock.acquire()
        except TimeoutError:
            raise BusTimeout(f"GPIO {pin}: busy (another pulse?) for over {gate.timeout_s:g} s") from None
        try:
            await gate.call(GpiozeroDriver.write, pin, True)
            try:
                await asyncio.sleep(seconds)
            finally:
                # Even when cancelled mid-pulse, the output must not be left on.
                await asyncio.shield(gate.call(GpiozeroDriver.write, pin, False))
            return await gate.call(GpiozeroDriver.read, pin)
        finally:
            gate.lock.release()

    async def pwm(self, pin: int, duty: float, frequency_hz: float | None) -> PinState:
        return await self._gate(pin).run(GpiozeroDriver.set_duty, pin, duty, frequency_hz)

    async def watch(
        self, pin: int, wanted: EdgeFilter, debounce_s: float, callback: Callable[[Edge], None]
    ) -> EdgeWatch:
        """Call `callback(edge)` on the event loop for each debounced edge of an input pin that
        matches `wanted`, until the returned watch is cancelled."""
        grant = self.driver.grants.get(pin)
        if grant is None or grant.direction != "in":
            raise BackendError(f"GPIO {pin} is not an input pin of this board: no edges to watch")
        self._loop = asyncio.get_running_loop()
        if pin in self._listening:
            state = await self.read(pin)
        else:
            state = await self._gate(pin).run(GpiozeroDriver.listen, pin, self._notify)
            self._listening.add(pin)
        watch = EdgeWatch(self, pin, wanted, debounce_s, callback, state.level)
        self._watches.setdefault(pin, set()).add(watch)
        return watch

    async def wait_edge(
        self, pin: int, wanted: EdgeFilter, timeout_s: float, debounce_s: float
    ) -> Edge | None:
        """The next matching edge within `timeout_s`, else None. An edge, not a level: a button
        already held down is not a press until it is released and pressed again."""
        found: asyncio.Future[Edge] = asyncio.get_running_loop().create_future()
        watch = await self.watch(pin, wanted, debounce_s, lambda e: found.done() or found.set_result(e))
        try:
            async with asyncio.timeout(timeout_s):
                return await found
        except TimeoutError:
            return None
        finally:
            watch.cancel()

    def watching(self, pin: int) -> int:
        """How many watches listen to a pin (status, tests)."""
        return len(self._watches.get(pin, ()))

    def _notify(self, pin: int, level: int, active: bool) -> None:
        # From gpiozero's thread (or the one driving a mock pin): onto the loop, in order.
        loop, at = self._loop, time.time()
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._dispatch, pin, level, active, at)

    def _dispatch(self, pin: int, level: int, active: bool, at: float) -> None:
        for watch in list(self._watches.get(pin, ())):
            watch.raw(level, active, at)

    def _unwatch(self, watch: EdgeWatch) -> None:
        self._watches.get(watch.pin, set()).discard(watch)

    def close(self) -> None:
        for watches in self._watches.values():
            for watch in list(watches):
                watch.cancel()
        self._watches.clear()
        for gate in self._gates.values():
            gate.close()  # stops the pin's worker thread (the driver is not the gate's to close)
        self.driver.close()
