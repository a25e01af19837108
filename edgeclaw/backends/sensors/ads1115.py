"""TI ADS1115 16-bit 4-channel ADC (datasheet SBAS444).

Each reading is one single-shot conversion of one input against GND: write
the config register (OS = 1 starts it; MUX = 100 + channel; PGA from the
device's `gain`, the full-scale range in volts; MODE = single-shot; 860
samples per second, so it is ready in 1.16 ms; comparator off), wait one data
period, poll OS until the part says it is idle, read the conversion register
(a signed count, LSB = FS / 32768). The config read back must still select
the channel and gain that were written: another program talking to the part
in between would otherwise hand us its conversion.
"""

from __future__ import annotations

from edgeclaw.backends.i2c import I2CBus
from edgeclaw.backends.sensors.base import ADCDriver, I2CSensor, Reading, Value
from edgeclaw.board import DeviceSpec

REG_CONVERSION = 0x00
REG_CONFIG = 0x01
OS = 1 << 15
MODE_SINGLE = 1 << 8
COMP_DISABLED = 0b11
GAINS_V = (6.144, 4.096, 2.048, 1.024, 0.512, 0.256)  # PGA codes 0..5
DATA_RATES = (8, 16, 32, 64, 128, 250, 475, 860)
DATA_RATE_CODE = 7  # 860 SPS
CONVERSION_S = 1 / DATA_RATES[DATA_RATE_CODE]
CHANNELS = 4
MUX_PGA_MASK = 0x7E00  # bits 14:9


def pga_code(gain_v: float) -> int:
    for code, full_scale in enumerate(GAINS_V):
        if abs(full_scale - gain_v) < 1e-9:
            return code
    raise ValueError(
        f"gain must be one of {', '.join(f'{g:g}' for g in GAINS_V)} (volts full scale), got {gain_v!r}"
    )


def config_word(channel: int, gain_v: float) -> int:
    """The config register value that starts a single-shot conversion of AINchannel against GND."""
    if not 0 <= channel < CHANNELS:
        raise ValueError(f"the ADS1115 has channels 0-{CHANNELS - 1}, got {channel}")
    return (
        OS
        | (0b100 | channel) << 12
        | pga_code(gain_v) << 9
        | MODE_SINGLE
        | DATA_RATE_CODE << 5
        | COMP_DISABLED
    )


def volts_from_code(register: int, gain_v: float) -> float:
    """The conversion register (16-bit two's complement) in volts at the given full scale."""
    count = register - 0x10000 if register & 0x8000 else register
    return count * gain_v / 32768


class ADS1115Driver(I2CSensor, ADCDriver):
    """The ADC itself reads all four inputs; devices on its channels read one each."""

    def __init__(self, device: DeviceSpec, bus: I2CBus) -> None:
        super().__init__(device, bus)
        self.gain_v = float(device.option("gain"))
        try:
            pga_code(self.gain_v)  # refused when the profile is loaded; checked again for direct use
        except ValueError as e:
            raise self.fail("bad_data", str(e)) from None

    async def read_channel(self, channel: int) -> tuple[float, bytes]:
        config = config_word(channel, self.gain_v)
        async with self.transaction() as t:
            await t.write(bytes((REG_CONFIG, config >> 8, config & 0xFF)))
            await t.wait(CONVERSION_S)
            status = await t.read_register(REG_CONFIG, 2)
            # The data rate may be up to 10% slow (electrical characteristics): poll until idle.
            while not status[0] & (OS >> 8):
                await t.wait(CONVERSION_S / 4)
                status = await t.read_register(REG_CONFIG, 2)
            result = await t.read_register(REG_CONVERSION, 2)
        seen = status[0] << 8 | status[1]
        if seen & MUX_PGA_MASK != config & MUX_PGA_MASK:
            raise self.fail(
                "bad_data",
                f"the config register reads 0x{seen:04x} after the conversion, not the channel and gain"
                f" written (0x{config:04x}): another program may be using the ADC",
            )
        raw = status + result
        return volts_from_code(result[0] << 8 | result[1], self.gain_v), raw

    async def read(self) -> Reading:
        values: list[Value] = []
        raw = bytearray()
        for channel in range(CHANNELS):
            volts, data = await self.read_channel(channel)
            values.append(Value("voltage", volts, "V", f"ch{channel}"))
            raw += data
        return self.reading(values, bytes(raw))
