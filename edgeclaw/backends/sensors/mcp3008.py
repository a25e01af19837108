"""Microchip MCP3008 8-channel 10-bit ADC on SPI (datasheet DS21295).

A conversion is one full-duplex transfer: the start bit, SGL/DIFF = 1 and the
channel (D2 D1 D0) go out; the part samples, sends a null bit (0) and the ten
result bits MSB first, and — clocked on — the same result LSB first (section
6.1, figure 6-1). The driver clocks five bytes so it gets both copies and
compares them, which catches a corrupted transfer the way a CRC would; a null
bit that reads 1 means nothing drives MISO (no part, or no power). Volts =
code * Vref / 1024 (equation 4-1, inverted), Vref from the device's `vref`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgeclaw.backends.sensors.base import ADCDriver, Reading, SPISensor, Value
from edgeclaw.board import DeviceSpec

if TYPE_CHECKING:
    from edgeclaw.backends.spi import SPIDevice
    from edgeclaw.board import SPIDeviceGrant

CHANNELS = 8
SPEED_HZ = 1_000_000  # under the part's 1.35 MHz limit at 2.7 V
FRAME_BYTES = 5
NULL_BIT = 0x04  # bit 13 of the frame: byte 1, third bit from the right


class FrameError(ValueError):
    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind  # "no_answer" or "check"


def request_frame(channel: int) -> bytes:
    """[start bit, SGL=1 + D2..D0, then clocks] for a single-ended conversion of `channel`."""
    if not 0 <= channel < CHANNELS:
        raise ValueError(f"the MCP3008 has channels 0-{CHANNELS - 1}, got {channel}")
    return bytes((0x01, 0x80 | channel << 4, 0, 0, 0))


def decode_frame(received: bytes) -> int:
    """The 10-bit code from a 5-byte answer, checked against its LSB-first copy."""
    if len(received) != FRAME_BYTES:
        raise FrameError(f"expected {FRAME_BYTES} bytes back, got {len(received)}", kind="check")
    if received[1] & NULL_BIT:
        raise FrameError("no answer: the null bit read 1 (nothing drives MISO)", kind="no_answer")
    code = (received[1] & 0b11) << 8 | received[2]
    # Bits 24..32 of the frame are B1..B9 again, least significant first (B0 is not repeated).
    tail = int.from_bytes(received[3:5], "big") >> 7  # the 9 bits 24..32, in frame order
    repeated = 0
    for k in range(9):
        repeated |= ((tail >> (8 - k)) & 1) << (k + 1)
    if repeated != code & 0x3FE:
        raise FrameError(
            f"the result's two copies differ (MSB first {code:#05x}, LSB first {repeated | (code & 1):#05x})",
            kind="check",
        )
    return code


def volts_from_code(code: int, vref: float) -> float:
    return code * vref / 1024


class MCP3008Driver(SPISensor, ADCDriver):
    """The ADC itself reads all eight inputs; devices on its channels read one each."""

    max_speed_hz = SPEED_HZ
    mode = 0  # the part samples on rising edges: SPI mode 0,0 (or 1,1)

    def __init__(self, device: DeviceSpec, spi: SPIDevice, grant: SPIDeviceGrant) -> None:
        super().__init__(device, spi, grant)
        self.vref = float(device.option("vref"))

    async def read_channel(self, channel: int) -> tuple[float, bytes]:
        received = await self.transfer(request_frame(channel))
        try:
            code = decode_frame(received)
        except FrameError as e:
            raise self.fail("nack" if e.kind == "no_answer" else "crc", f"channel {channel}: {e}") from None
        return volts_from_code(code, self.vref), received

    async def read(self) -> Reading:
        values: list[Value] = []
        raw = bytearray()
        for channel in range(CHANNELS):
            volts, data = await self.read_channel(channel)
            values.append(Value("voltage", volts, "V", f"ch{channel}"))
            raw += data
        return self.reading(values, bytes(raw))
