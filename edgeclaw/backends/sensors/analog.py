"""A device on one channel of a declared ADC: its voltage, optionally scaled into what it stands for.

value = volts * scale + offset, reported as the device's `quantity` in its
`unit` (a voltage divider: scale 2, "voltage", "V"; a TMP36: scale 100, offset
-50, "temperature", "°C"). The conversion is the ADC's own driver's (its gain,
reference and channel encoding); a failure there is reported for this device,
naming the ADC it went through.
"""

from __future__ import annotations

from edgeclaw.backends.sensors.base import ADCChannelSensor, Reading, SensorError, Value


class AnalogDriver(ADCChannelSensor):
    async def read(self) -> Reading:
        try:
            volts, raw = await self.adc.read_channel(self.channel)
        except SensorError as e:
            raise self.fail(e.kind, f"through {e}") from None
        scale, offset = float(self.device.option("scale")), float(self.device.option("offset"))
        quantity, unit = str(self.device.option("quantity")), str(self.device.option("unit"))
        return self.reading([Value(quantity, volts * scale + offset, unit)], raw)
