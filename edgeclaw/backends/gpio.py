"""GPIO through gpiozero: devices sit on pins, pins come from a factory.

On a board the factory is gpiozero's default (lgpio, RPi.GPIO...); on the
sim board it is `MockFactory` with PWM-capable mock pins, chosen explicitly
(off a Pi gpiozero would otherwise raise BadPinFactory). Each granted pin
gets the gpiozero device that matches its grant — an input with its pull, an
output, or a PWM output — created on first use and closed on shutdown. Each
pin has its own lock, so a long pulse on one pin does not hold up the others.
"""

from __future__ import annotations

import asyncio
import warnings
from dataclasses import dataclass
from typing import Any

from edgeclaw.backends.base import BusGate, BusTimeout, DeviceUnavailable, missing_library
from edgeclaw.board import GPIOPinGrant
from edgeclaw.errors import BackendError

DEFAULT_PWM_HZ = 100.0


@dataclass(frozen=True)
class PinState:
    pin: int
    level: int  # the electrical level, 0 or 1
    active: bool  # the logical state (an active-low button reads active when pulled to 0)
    value: float  # gpiozero's value: 0/1, or the PWM duty cycle


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

    def frequency(self, pin: int) -> float | None:
        dev = self.device(pin)
        return getattr(dev, "frequency", None)

    def close(self) -> None:
        for dev in self._devices.values():
            dev.close()
        self._devices.clear()
        if self.factory is not None:
            self.factory.close()


class GPIOController:
    """The granted pins as the tools see them: async, one lock per pin, every step bounded."""

    def __init__(self, driver: GpiozeroDriver, *, timeout_s: float, threaded: bool) -> None:
        self.driver = driver
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

    def close(self) -> None:
        for gate in self._gates.values():
            gate.close()  # stops the pin's worker thread (the driver is not the gate's to close)
        self.driver.close()
