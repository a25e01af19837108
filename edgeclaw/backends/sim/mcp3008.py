"""Microchip MCP3008 8-channel 10-bit ADC on SPI, after its datasheet (DS21295).

Modelled bit by bit, as the part sees its clock: with CS low, DIN is idle
until the start bit (the first 1); the next four bits are SGL/DIFF, D2, D1,
D0; the sample period takes one more clock, DOUT then gives a null bit (0)
and the ten result bits MSB first, then — if the master keeps clocking — the
result again LSB first (B1..B9, sharing B0), then zeros. So the usual 3-byte
transaction [0x01, 0x80 | ch << 4, 0x00] returns [?, 0b00000n98, B7..B0],
and any other alignment (leading zero bits, 4-byte frames) works as on the
part. DOUT is high-impedance before the null bit; the sim reads that as 0.

Single-ended: code = 1024 * Vin / Vref (clamped to 0..1023). Differential
(SGL/DIFF = 0) pairs CH0/CH1, CH2/CH3... per datasheet table 5-2 and never
goes below 0. The part samples on rising edges (SPI modes 0 and 3); in modes
1 and 2 the master reads each bit half a clock late, i.e. shifted by one.
"""

from __future__ import annotations

CHANNELS = 8


class MCP3008:
    """A sim SPI driver (`backends.spi.SPIDriver`) for one MCP3008 on one chip select."""

    def __init__(
        self, label: str = "SPI 0.0", vref: float = 3.3, voltages: list[float] | None = None
    ) -> None:
        self.label = label
        self.vref = vref
        self.voltages = list(voltages) if voltages is not None else [0.0] * CHANNELS

    def code(self, single_ended: bool, select: int) -> int:
        if single_ended:
            vin = self.voltages[select]
        else:
            pair = (select & 0b110, (select & 0b110) + 1)
            plus, minus = (pair[1], pair[0]) if select & 1 else pair
            vin = self.voltages[plus] - self.voltages[minus]
        return max(0, min(1023, int(1024 * vin / self.vref)))

    def transfer(self, data: bytes, speed_hz: int, mode: int, bits_per_word: int) -> bytes:
        bits_in = [(byte >> (7 - i)) & 1 for byte in data for i in range(8)]
        bits_out = [0] * len(bits_in)
        start = next((i for i, b in enumerate(bits_in) if b), None)
        if start is not None and start + 4 < len(bits_in):
            single = bool(bits_in[start + 1])
            select = bits_in[start + 2] << 2 | bits_in[start + 3] << 1 | bits_in[start + 4]
            value = self.code(single, select)
            msb_first = [(value >> (9 - k)) & 1 for k in range(10)]
            stream = [0, *msb_first, *msb_first[::-1][1:]]  # null bit, B9..B0, B1..B9
            for k, bit in enumerate(stream):
                at = start + 6 + k
                if at < len(bits_out):
                    bits_out[at] = bit
        if mode in (1, 2):
            bits_out = [*bits_out[1:], 0]
        out = bytearray()
        for i in range(0, len(bits_out), 8):
            byte = 0
            for bit in bits_out[i : i + 8]:
                byte = byte << 1 | bit
            out.append(byte)
        return bytes(out)

    def close(self) -> None:
        pass
