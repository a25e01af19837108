"""edgeclaw.testing as a user's own tests take it: the sim board with faults, the HTTP seam."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import httpx
import pytest

from edgeclaw.agent.messages import Message
from edgeclaw.agent.providers.openai import OpenAIProvider
from edgeclaw.backends.base import BusTimeout
from edgeclaw.backends.i2c import I2CNoAcknowledge
from edgeclaw.backends.sensors.base import SensorError
from edgeclaw.backends.sim.board import I2C_BUS1_PARTS
from edgeclaw.board import read_profile
from edgeclaw.config.schema import HardwareConfig
from edgeclaw.testing import SimBoard, mock_client

MY_BOARD = """
[board]
name = "my-board"
simulated = true
[[i2c]]
bus = 1
read = [{ first = 0x08, last = 0x77 }]
[[devices]]
part = "tmp102"
bus = 1
address = 0x4B
name = "outside"
"""


async def test_a_sensor_reads_what_the_sim_part_holds(tmp_path: Path) -> None:
    async with SimBoard(tmp_path) as board:
        first = await board.sensors().read("board temperature")
        board.parts.device("board temperature").temperature_c = -4.5
        second = await board.sensors().read("board temperature")
    assert first.value("temperature").value == 21.5  # type: ignore[union-attr]
    assert second.value("temperature").value == -4.5  # type: ignore[union-attr]


async def test_an_injected_nack_fails_the_read_with_its_errno_then_heals(tmp_path: Path) -> None:
    async with SimBoard(tmp_path) as board:
        board.inject(0x48, "nack")
        with pytest.raises(SensorError) as caught:
            await board.sensors().read("board temperature")
        with pytest.raises(I2CNoAcknowledge) as raw:
            await board.backends.i2c(1).read_byte_data(0x48, 0)
        board.inject(0x48, None)
        healed = await board.sensors().read("board temperature")
    assert caught.value.kind == "nack" and caught.value.errno == errno.EREMOTEIO
    assert str(raw.value) == "no device acknowledged at 0x48 on bus 1"
    assert raw.value.errno == errno.EREMOTEIO
    assert healed.value("temperature").value == 21.5  # type: ignore[union-attr]


async def test_an_injected_timeout_is_a_bus_timeout_carrying_etimedout(tmp_path: Path) -> None:
    async with SimBoard(tmp_path) as board:
        board.inject(0x76, "timeout")
        with pytest.raises(BusTimeout) as caught:
            await board.backends.i2c(1).read_byte_data(0x76, 0xD0)
        with pytest.raises(SensorError) as sensor:
            await board.sensors().read("air")
    assert "bus 1 timed out at 0x76" in str(caught.value) and caught.value.errno == errno.ETIMEDOUT
    assert sensor.value.kind == "timeout"


async def test_a_hung_bus_is_cut_off_by_the_deadline_on_a_threaded_board(tmp_path: Path) -> None:
    config = HardwareConfig(op_timeout_s=0.3)
    async with SimBoard(tmp_path, config=config, threaded=True) as board:
        board.inject(0x23, "hang")
        try:
            with pytest.raises(SensorError) as caught:
                await board.sensors().read("light")
        finally:
            board.release()
    assert caught.value.kind == "timeout" and "no answer within 0.3 s" in str(caught.value)


async def test_a_corrupted_read_is_caught_by_the_parts_crc(tmp_path: Path) -> None:
    async with SimBoard(tmp_path) as board:
        board.inject(0x44, "corrupt")
        with pytest.raises(SensorError) as caught:
            await board.sensors().read("greenhouse")
    assert caught.value.kind == "crc"


async def test_the_sim_board_answers_where_its_profile_wires_it(tmp_path: Path) -> None:
    async with SimBoard(tmp_path) as board:
        scan = await board.backends.i2c(1).scan(range(0x08, 0x78))
        chip_id = await board.backends.i2c(1).read_byte_data(0x76, 0xD0)
    assert list(scan.found) == sorted(I2C_BUS1_PARTS)
    assert {0x48, 0x50, 0x76} <= set(scan.found)  # the fixed TMP102, 24C32 and BME280
    assert chip_id == 0x60


async def test_the_sim_can_answer_for_the_devices_of_your_own_profile(tmp_path: Path) -> None:
    path = tmp_path / "my-board.toml"
    path.write_text(MY_BOARD)
    profile = read_profile(path)
    # On the sim board's own wiring nothing sits at 0x4b: the declared device does not answer.
    async with SimBoard(tmp_path / "sim", profile) as board:
        with pytest.raises(SensorError) as caught:
            await board.sensors().read("outside")
    assert caught.value.kind == "nack"
    # Built from this profile's [[devices]]: a TMP102 at 0x4b, beside the sim's fixed parts.
    async with SimBoard(tmp_path / "mine", profile, devices=profile.devices) as board:
        board.parts.device("outside").temperature_c = 7.25
        reading = await board.sensors().read("outside")
        scan = await board.backends.i2c(1).scan(range(0x08, 0x78))
    assert reading.value("temperature").value == 7.25  # type: ignore[union-attr]
    assert list(scan.found) == [0x48, 0x4B, 0x50, 0x76]


async def test_a_provider_talks_to_a_mock_transport(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200,
            json={
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "hello"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            },
        )

    client = mock_client(answer)
    try:
        provider = OpenAIProvider("o", client, model="m", base_url="http://llm.invalid/v1")
        completion = await provider.complete("", [Message("user", "hi")], [])
    finally:
        await client.aclose()
    assert completion.text == "hello"
    assert str(seen[0].url) == "http://llm.invalid/v1/chat/completions"
    assert json.loads(seen[0].content)["messages"][-1] == {"role": "user", "content": "hi"}
