"""The ESP32 bridge over a real pty pair, against the reference firmware's protocol handler."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import tty

import pytest

from edgeclaw.backends.base import BusTimeout, DeviceReplyError, DeviceUnavailable
from edgeclaw.backends.esp32 import Esp32Bridge, PeerReset
from edgeclaw.backends.sim.i2c import SimI2CBus
from edgeclaw.backends.sim.tmp102 import TMP102
from edgeclaw.firmware.esp32.host import BridgePeer, HostHal
from edgeclaw.firmware.esp32.protocol import BridgeHandler
from tests.hw_support import call, make_runtime, ok


class Pty:
    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        self.port = os.ttyname(self.slave)

    def close(self) -> None:
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def pty():
    pair = Pty()
    yield pair
    pair.close()


def start_peer(pty: Pty, handle=None, hal: HostHal | None = None) -> BridgePeer:
    return BridgePeer(pty.master, hal or HostHal(), handle).start(announce=True)


# -- the handler alone, as MicroPython would run it ----------------------------------------------
def test_handler_validates_like_the_chip():
    handler = BridgeHandler(HostHal())

    def ask(obj):
        return json.loads(handler.handle_line(json.dumps(obj).encode()))

    assert ask({"id": 1, "op": "hello", "args": {"protocol": 1}})["result"]["protocol"] == 1
    assert (
        ask({"id": 2, "op": "gpio.write", "args": {"pin": 34, "value": 1}})["error"]
        == "GPIO 34 is input-only"
    )
    assert "SPI flash" in ask({"id": 3, "op": "gpio.read", "args": {"pin": 6}})["error"]
    assert "not an ADC1 pin" in ask({"id": 4, "op": "adc.read", "args": {"pin": 4}})["error"]
    assert ask({"id": 5, "op": "reboot"})["error"] == "unknown op 'reboot'"
    assert json.loads(handler.handle_line(b"not json"))["id"] is None
    assert handler.handle_line(b"   ") is None


# -- the bridge client over a pty -----------------------------------------------------------------
async def test_handshake_and_commands(pty):
    hal = HostHal({0: _i2c_bus()})
    hal.adc_millivolts[34] = 1000
    peer = start_peer(pty, hal=hal)
    bridge = Esp32Bridge(pty.port, 115200, timeout_s=2)
    try:
        info = await bridge.request("info")
        assert info["protocol"] == 1 and bridge.peer["firmware"].startswith("edgeclaw-esp32")
        await bridge.request("gpio.write", {"pin": 2, "value": 1})
        assert (await bridge.request("gpio.read", {"pin": 2}))["value"] == 1
        assert (await bridge.request("adc.read", {"pin": 34}))["millivolts"] == 1000
        assert (await bridge.request("i2c.scan", {"bus": 0}))["addresses"] == [0x48]
        with pytest.raises(DeviceReplyError, match="input-only"):
            await bridge.request("gpio.write", {"pin": 35, "value": 1})
    finally:
        await bridge.close()
        peer.stop()


def _i2c_bus():
    from edgeclaw.backends.sim.esp32 import SimI2CForBridge

    return SimI2CForBridge(SimI2CBus(0, {0x48: TMP102(24.0)}))


async def test_silent_peer_times_out_and_a_late_reply_is_not_mistaken(pty):
    handler = BridgeHandler(HostHal())
    state: dict[str, bytes | None] = {"late": None, "delayed": b""}

    def handle(line: bytes):
        reply = handler.handle_line(line) or b""
        if b'"gpio.read"' in line and not state["delayed"]:
            state["delayed"], state["late"] = b"yes", reply  # answer it later, before the next reply
            return None
        late, state["late"] = state["late"], None
        return (late or b"") + reply

    peer = start_peer(pty, handle)
    bridge = Esp32Bridge(pty.port, 115200, timeout_s=2)  # the answers that do come fit on a busy machine
    try:
        with pytest.raises(BusTimeout, match=r"did not answer 'gpio\.read' within 2 s"):
            await bridge.request("gpio.read", {"pin": 4})
        # The stale gpio.read reply arrives first now; its id is old, so it is dropped.
        result = await bridge.request("adc.read", {"pin": 34})
        assert result == {"pin": 34, "raw": 0, "millivolts": 0}
    finally:
        await bridge.close()
        peer.stop()


async def test_peer_reset_mid_request_fails_fast_and_recovers(pty):
    peer_box: list[BridgePeer] = []
    hal = HostHal()
    handler = BridgeHandler(hal)
    resets = threading.Event()

    def handle(line: bytes):
        if b'"info"' in line and not resets.is_set():
            resets.set()
            peer_box[0].reset()  # the chip reboots instead of answering
            return None
        return handler.handle_line(line)

    peer_box.append(start_peer(pty, handle, hal))
    bridge = Esp32Bridge(pty.port, 115200, timeout_s=5)
    try:
        await bridge.request("gpio.read", {"pin": 0})
        with pytest.raises(PeerReset, match="reset during the request"):
            await bridge.request("info")
        assert bridge.resets_seen == 1 and bridge.peer["reset_cause"] == "hard reset"
        assert (await bridge.request("info"))["reset_cause"] == "hard reset"  # handshake redone, then served
    finally:
        await bridge.close()
        peer_box[0].stop()


def _echo_peer(pty: Pty) -> BridgePeer:
    """A peer that answers `echo` requests of any length with the length it received."""
    handler = BridgeHandler(HostHal())

    def handle(line: bytes):
        if b'"op":"echo"' in line and line.endswith(b"}"):  # a fragment goes to the real handler
            request = json.loads(line)
            reply = {"id": request["id"], "ok": True, "result": {"length": len(request["args"]["blob"])}}
            return (json.dumps(reply) + "\n").encode()
        return handler.handle_line(line)

    return BridgePeer(pty.master, HostHal(), handle).start(announce=False)


async def test_a_line_longer_than_the_port_buffer_goes_out_whole(pty):
    peer = _echo_peer(pty)
    bridge = Esp32Bridge(pty.port, 115200, timeout_s=5)
    blob = "x" * 60_000  # far more than a tty's buffer holds: the write has to wait for room
    try:
        assert (await bridge.request("echo", {"blob": blob}))["length"] == len(blob)
        assert bridge.is_open
    finally:
        await bridge.close()
        peer.stop()


async def test_a_line_cut_by_its_deadline_does_not_spoil_the_next_request(pty):
    peer = _echo_peer(pty)
    bridge = Esp32Bridge(pty.port, 115200, timeout_s=2)  # the answers that do come fit on a busy machine
    try:
        await bridge.request("info")  # handshake done
        peer.stop()  # the chip stops reading (held in reset, flow control...): the buffer fills
        with pytest.raises(BusTimeout):
            await bridge.request("echo", {"blob": "y" * 60_000})
        peer = _echo_peer(pty)  # it reads again, starting with the fragment left in the buffer
        assert (await bridge.request("echo", {"blob": "short"}))["length"] == 5
    finally:
        await bridge.close()
        peer.stop()


async def test_protocol_mismatch_is_refused(pty):
    handler = BridgeHandler(HostHal())

    def handle(line: bytes):
        reply = json.loads(handler.handle_line(line))
        if "result" in reply and "protocol" in reply["result"]:
            reply["result"]["protocol"] = 2
        return (json.dumps(reply) + "\n").encode()

    peer = start_peer(pty, handle)
    bridge = Esp32Bridge(pty.port, 115200, timeout_s=2)
    try:
        with pytest.raises(DeviceUnavailable, match="speaks bridge protocol 2, this edgeclaw speaks 1"):
            await bridge.request("info")
    finally:
        await bridge.close()
        peer.stop()


async def test_a_firmware_without_the_handshake_is_refused_in_plain_words(pty):
    handler = BridgeHandler(HostHal())
    del handler.ops["hello"]  # an older or foreign firmware: it answers, but knows no hello
    peer = BridgePeer(pty.master, handler.hal, handler.handle_line).start(announce=False)
    bridge = Esp32Bridge(pty.port, 115200, timeout_s=2)
    try:
        with pytest.raises(DeviceUnavailable, match=r"does not shake hands .*unknown op 'hello'.*flash the"):
            await bridge.request("info")
    finally:
        await bridge.close()
        peer.stop()


async def test_missing_port_is_a_clear_error(tmp_path):
    bridge = Esp32Bridge(str(tmp_path / "ttyUSB9"), 115200, timeout_s=1)
    with pytest.raises(DeviceUnavailable, match="cannot open the ESP32 serial port"):
        await bridge.request("info")


# -- the esp32 tool on the sim board (the same firmware handler behind a pty) ---------------------
async def test_esp32_tool_end_to_end(tmp_path):
    runtime = make_runtime(tmp_path)
    try:
        version = await ok(runtime, "esp32", action="version")
        assert version["protocol"] == 1
        await ok(runtime, "esp32", action="gpio_write", pin="esp-led", value=True)
        assert (await ok(runtime, "esp32", action="gpio_read", pin=2))["value"] == 1
        assert (await ok(runtime, "esp32", action="gpio_read", pin="boot-button"))["value"] == 1
        assert (await ok(runtime, "esp32", action="adc_read", pin="soil-moisture"))["millivolts"] == 1650
        assert (await ok(runtime, "esp32", action="i2c_scan", bus=0))["addresses"] == ["0x48"]
        temp = await ok(runtime, "esp32", action="i2c_read", bus=0, address="0x48", register=0, length=2)
        assert temp["data"] == "18 00"  # 24.0 °C in TMP102 format
        info = await call(runtime, "esp32", action="info")
        assert info.ok and "ESP32 (simulated)" in info.for_llm
    finally:
        await runtime.aclose()
