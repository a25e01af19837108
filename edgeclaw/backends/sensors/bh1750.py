"""ROHM BH1750FVI ambient light sensor (datasheet BH1750FVI rev. D).

The part has no registers: one-byte instructions in, the 16-bit result out
(high byte first). The driver keeps it in continuous H-resolution mode (1 lx
steps, up to 180 ms per measurement at the default measurement time of 69),
so a reading is one 2-byte read; lx = count / 1.2 * (69 / MTreg).

A part that lost power comes back powered down with its result at 0, which
reads like darkness. So a 0 — or the first read — puts it back into its mode
and waits out one whole measurement before believing the count.
"""

from __future__ import annotations

import asyncio

from edgeclaw.backends.i2c import I2CBus
from edgeclaw.backends.sensors.base import I2CSensor, Reading
from edgeclaw.board import DeviceSpec

POWER_ON = 0x01
CONTINUOUS_H = 0x10
MT_DEFAULT = 69
MEASUREMENT_MAX_S = 0.180  # H-resolution mode at MTreg 69 (datasheet, electrical characteristics)


def lux_from_count(count: int, mtreg: int = MT_DEFAULT, mode2: bool = False) -> float:
    """The datasheet's conversion: count / 1.2 lx at MTreg 69, scaled by 69 / MTreg, halved in mode 2."""
    lux = count / 1.2 * (MT_DEFAULT / mtreg)
    return lux / 2 if mode2 else lux


class BH1750Driver(I2CSensor):
    def __init__(self, device: DeviceSpec, bus: I2CBus) -> None:
        super().__init__(device, bus)
        self._started = False  # the part has been put into continuous H-resolution mode

    async def _start(self) -> None:
        async with self.transaction() as t:
            await t.write(bytes((POWER_ON,)))
            await t.write(bytes((CONTINUOUS_H,)))
        # The first result is ready after one whole measurement. The bus is not held meanwhile:
        # the part measures on its own, and other devices on the bus need not wait 180 ms.
        await asyncio.sleep(MEASUREMENT_MAX_S)
        self._started = True

    async def _count(self) -> bytes:
        async with self.transaction() as t:
            return await t.read(2)

    async def read(self) -> Reading:
        fresh = not self._started
        if fresh:
            await self._start()
        raw = await self._count()
        if raw == b"\x00\x00" and not fresh:
            # Darkness, or a part that lost power and reads its reset value: start it again and
            # believe the next count (a 0 straight after a start is darkness).
            self._started = False
            await self._start()
            raw = await self._count()
        return self.reading({"illuminance": lux_from_count(raw[0] << 8 | raw[1])}, raw)
