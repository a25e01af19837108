"""Sensors on a board that is not simulated: the real backends (smbus2 with its ioctl answered by the sim
parts, a 1-Wire sysfs tree at the profile's root), through the `sensor` tool."""

from __future__ import annotations

import pytest
import smbus2.smbus2 as smbus2_impl

from edgeclaw.backends.sim.bme280 import BME280
from edgeclaw.backends.sim.ds18b20 import DS18B20
from edgeclaw.backends.sim.i2c import SimI2CBus
from edgeclaw.backends.sim.onewire import SimOneWireBus
from edgeclaw.backends.sim.sht import SHT3x
from tests.hw_support import call, make_runtime, ok, write_profile
from tests.test_hw_real_drivers import FakeI2CDev


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    sim = SimI2CBus(1, {0x44: SHT3x(23.5, 41.0), 0x77: BME280(20.0, 95_000.0, 33.0)})
    monkeypatch.setattr(smbus2_impl, "ioctl", FakeI2CDev(sim).ioctl)
    node = tmp_path / "i2c-1"
    node.write_bytes(b"")
    return sim, str(node)


def profile(tmp_path, node: str, w1_root: str) -> str:
    return write_profile(
        tmp_path,
        "real-sensors",
        f"""
[[i2c]]
bus = 1
device = "{node}"
read = []
write = []

[onewire]
root = "{w1_root}"

[[devices]]
part = "sht3x"
bus = 1
address = 0x44
name = "porch"

[[devices]]
part = "bme280"
bus = 1
address = 0x77
name = "attic"

[[devices]]
part = "ds18b20"
w1_id = "28-000001020304"
name = "pond"
""",
    )


async def test_sensors_read_through_smbus2_and_the_w1_root_of_the_profile(tmp_path, kernel):
    _, node = kernel
    w1 = SimOneWireBus(tmp_path / "w1", [DS18B20("28-000001020304", temperature_c=8.25)])
    runtime = make_runtime(tmp_path, board=profile(tmp_path, node, str(w1.root)))
    try:
        data = await ok(runtime, "sensor", action="read")
        assert data["errors"] == []
        got = {r["device"]: {v["quantity"]: v["value"] for v in r["values"]} for r in data["readings"]}
        assert got["porch"] == {
            "temperature": pytest.approx(23.5, abs=0.01),
            "humidity": pytest.approx(41.0, abs=0.01),
        }
        assert got["attic"]["pressure"] == pytest.approx(950.0, abs=0.05)
        assert got["pond"] == {"temperature": 8.25}
        # The profile grants no raw reads or writes at these addresses: the sensors need none,
        # and raw access stays refused.
        raw = await call(runtime, "i2c", action="read_byte", bus=1, address=0x44, register=0)
        assert not raw.ok and "not granted" in raw.error
    finally:
        await runtime.aclose()


async def test_a_missing_w1_device_says_where_it_looked(tmp_path, kernel):
    _, node = kernel
    runtime = make_runtime(tmp_path, board=profile(tmp_path, node, str(tmp_path / "no-w1")))
    try:
        outcome = await call(runtime, "sensor", action="read", device="pond")
    finally:
        await runtime.aclose()
    assert not outcome.ok
    assert "'pond' (ds18b20 on 1-Wire as 28-000001020304):" in outcome.error
    assert f"{tmp_path / 'no-w1'}/28-000001020304/w1_slave does not exist" in outcome.error


async def test_a_part_gone_from_a_real_bus_is_a_nack(tmp_path, kernel):
    sim, node = kernel
    sim.inject(0x44, "nack")
    runtime = make_runtime(tmp_path, board=profile(tmp_path, node, str(tmp_path)))
    try:
        outcome = await call(runtime, "sensor", action="read", device="porch")
    finally:
        await runtime.aclose()
    assert not outcome.ok
    assert outcome.error.startswith("sensor: 'porch' (sht3x at 0x44 on I2C bus 1): no acknowledgement")
