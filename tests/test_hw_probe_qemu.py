"""The GDB remote client and the `probe` tool against a real QEMU STM32 (stm32vldiscovery).

QEMU runs the 32-byte image from `backends.qemu.firmware_image()`: a vector
table and a reset handler that counts boots at 0x2000_0100.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from edgeclaw.backends.base import TargetError
from edgeclaw.backends.gdbremote import GdbRemoteClient, decode_payload, escape_binary
from edgeclaw.backends.qemu import BOOT_COUNTER, QemuSTM32, firmware_image, qemu_available
from tests.hw_support import call, make_runtime, ok, write_profile

needs_qemu = pytest.mark.skipif(not qemu_available(), reason="qemu-system-arm is not installed")


def test_payload_decoding_handles_escapes_and_run_length():
    assert decode_payload(b"0* ") == b"0000"  # '*' + chr(29 + 3): three more
    assert decode_payload(b"a}\x03b") == b"a#b"
    assert escape_binary(b"#$}*x") == b"}\x03}\x04}]}\x0ax"


def test_firmware_image_is_a_vector_table():
    sp, reset, _nmi, _hardfault = struct.unpack("<4I", firmware_image()[:16])
    assert sp == 0x2000_2000 and reset == 0x0800_0011 and reset & 1  # Thumb
    assert len(firmware_image()) == 32


@pytest.fixture
async def qemu(tmp_path):
    target = QemuSTM32(tmp_path)
    host, port = await target.start()
    client = GdbRemoteClient(host, port)
    await client.connect()
    yield target, client
    await client.close()
    await target.stop()


async def _run_until_counter(client: GdbRemoteClient, expected: int) -> int:
    """Resume, then halt, until the boot counter shows the reset handler ran (bounded retries)."""
    value = -1
    for _ in range(50):
        await client.resume()
        await asyncio.sleep(0.01)
        await client.halt()
        value = int.from_bytes(await client.read_memory(BOOT_COUNTER, 4), "little")
        if value >= expected:
            break
    return value


@needs_qemu
async def test_gdb_client_against_qemu(qemu):
    _, client = qemu
    assert client.features.get("qXfer:features:read") is True
    assert await client.read_memory(0x0800_0000, 32) == firmware_image()
    await client.write_memory(0x2000_0400, bytes(range(200)))
    assert await client.read_memory(0x2000_0400, 200) == bytes(range(200))
    with pytest.raises(TargetError, match=r"cannot read 8 bytes at 0x60000000: .*nothing is mapped there"):
        await client.read_memory(0x6000_0000, 8)
    registers = await client.read_registers()
    assert registers["sp"] == 0x2000_2000 and registers["pc"] == 0x0800_0010
    assert {"r0", "lr", "xpsr"} <= registers.keys()
    # Run control: the reset handler counts boots in SRAM.
    assert await _run_until_counter(client, 1) == 1
    assert (await client.read_registers())["pc"] == 0x0800_0018  # parked on its `b .`
    with pytest.raises(Exception, match="running; halt it first"):
        await client.resume()
        await client.read_memory(0x0800_0000, 4)
    await client.halt()
    await client.monitor("system_reset")
    assert (await client.read_registers())["pc"] == 0x0800_0010
    assert await _run_until_counter(client, 2) == 2


@needs_qemu
async def test_gdb_flash_writes_and_verifies(qemu):
    _, client = qemu
    image = bytes((i * 7) & 0xFF for i in range(5000))
    steps = []
    method = await client.flash(
        0x0800_1000, image, lambda phase, done, total: steps.append((phase, done, total))
    )
    assert method == "memory writes, verified"
    assert await client.read_memory(0x0800_1000, len(image)) == image
    assert steps[-1] == ("verify", 5000, 5000)


@pytest.fixture
async def sim(tmp_path):
    runtime = make_runtime(tmp_path)
    yield runtime
    await runtime.aclose()


@needs_qemu
async def test_probe_tool_end_to_end_on_the_sim_board(sim):
    vector = await ok(sim, "probe", action="read_memory", address=0x0800_0000, length=8)
    assert vector["words_le"] == [0x2000_2000, 0x0800_0011]
    await ok(sim, "probe", action="write_memory", address="0x20000800", data="01 02 03 04")
    assert (await ok(sim, "probe", action="read_memory", address=0x2000_0800, length=4))[
        "data"
    ] == "01 02 03 04"
    registers = await ok(sim, "probe", action="read_registers")
    assert registers["registers"]["sp"] == 0x2000_2000
    info = await ok(sim, "probe", action="info")
    assert info["state"] == "halted" and "QEMU" in info["via"]
    await ok(sim, "probe", action="resume")
    assert (await ok(sim, "probe", action="halt"))["state"] == "halted"
    await ok(sim, "probe", action="reset")
    assert (await ok(sim, "probe", action="read_registers"))["registers"]["pc"] == 0x0800_0010


@needs_qemu
async def test_probe_tool_flashes_an_image_from_the_workspace(sim):
    image = firmware_image() + bytes(range(256)) * 4
    (sim.workspace / "app.bin").write_bytes(image)
    outcome = await call(sim, "probe", action="flash", path="app.bin")
    assert outcome.ok, outcome.error
    assert "write 100%" in outcome.for_user and "verify 100%" in outcome.for_user
    back = await ok(sim, "probe", action="read_memory", address=0x0800_0000, length=len(image))
    assert bytes.fromhex(back["data"]) == image


@needs_qemu
async def test_probe_tool_reports_unmapped_memory_as_a_tool_error(tmp_path):
    profile = write_profile(
        tmp_path,
        "stm32-wide",
        '[probe]\ntransport = "gdb"\ntarget = "qemu"\ngdb_address = "qemu"\n'
        'regions = [{ name = "fsmc", base = 0x6000_0000, size = 0x1000 }]\n',
    )
    runtime = make_runtime(tmp_path, board=profile)
    try:
        outcome = await call(runtime, "probe", action="read_memory", address=0x6000_0000, length=8)
        refused = await call(runtime, "probe", action="halt")
    finally:
        await runtime.aclose()
    assert not outcome.ok and not outcome.refused
    assert "nothing is mapped there" in outcome.error
    assert refused.refused and "control = false" in refused.error


async def test_flash_bounds_are_checked_before_anything_runs(sim):
    (sim.workspace / "big.bin").write_bytes(b"\x00" * (0x2_0000 + 4))
    too_big = await call(sim, "probe", dry_run=True, action="flash", path="big.bin")
    assert too_big.refused and "does not fit the flash area" in too_big.error
    missing = await call(sim, "probe", dry_run=True, action="flash", path="nope.bin")
    assert not missing.ok and "no such file" in missing.error
    outside = await call(sim, "probe", dry_run=True, action="flash", path="/etc/passwd")
    assert outside.refused and "outside the workspace" in outside.error


class FakeFlashStub:
    """A small GDB stub with a flash memory map, in ack mode, that run-length encodes its replies:
    the path OpenOCD-style servers take (QEMU has no memory map, so it does not exercise it)."""

    MEMORY_MAP = (
        b'<memory-map><memory type="flash" start="0x8000000" length="0x4000">'
        b'<property name="blocksize">0x400</property></memory>'
        b'<memory type="ram" start="0x20000000" length="0x1000"/></memory-map>'
    )

    def __init__(self) -> None:
        self.flash = bytearray(b"\xff" * 0x4000)
        self.erased: list[tuple[int, int]] = []
        self.log: list[bytes] = []

    @staticmethod
    def _unescape(data: bytes) -> bytes:
        out, i = bytearray(), 0
        while i < len(data):
            if data[i] == 0x7D:
                out.append(data[i + 1] ^ 0x20)
                i += 2
            else:
                out.append(data[i])
                i += 1
        return bytes(out)

    @staticmethod
    def _rle(payload: bytes) -> bytes:
        out, i = bytearray(), 0
        while i < len(payload):
            run = 1
            while i + run < len(payload) and payload[i + run] == payload[i] and run < 90:
                run += 1
            if run > 3 and chr(29 + run - 1) not in "#$+-":
                out += bytes((payload[i], 0x2A, 29 + run - 1))
                i += run
            else:
                out.append(payload[i])
                i += 1
        return bytes(out)

    def answer(self, packet: bytes) -> bytes:
        self.log.append(packet[:16])
        if packet.startswith(b"qSupported"):
            return b"PacketSize=200;qXfer:memory-map:read+"
        if packet == b"?":
            return b"S05"
        if packet.startswith(b"qXfer:memory-map:read::"):
            offset, length = (int(x, 16) for x in packet.rsplit(b":", 1)[1].split(b","))
            chunk = self.MEMORY_MAP[offset : offset + length]
            return (b"l" if offset + length >= len(self.MEMORY_MAP) else b"m") + chunk
        if packet.startswith(b"vFlashErase:"):
            start, length = (int(x, 16) for x in packet[12:].split(b","))
            self.erased.append((start, length))
            self.flash[start - 0x800_0000 : start - 0x800_0000 + length] = b"\xff" * length
            return b"OK"
        if packet.startswith(b"vFlashWrite:"):
            head, _, data = packet[12:].partition(b":")
            at = int(head, 16) - 0x800_0000
            data = self._unescape(data)
            self.flash[at : at + len(data)] = data
            return b"OK"
        if packet == b"vFlashDone":
            return b"OK"
        if packet.startswith(b"m"):
            address, length = (int(x, 16) for x in packet[1:].split(b","))
            return self._rle(self.flash[address - 0x800_0000 : address - 0x800_0000 + length].hex().encode())
        return b""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            start = await reader.read(1)
            if not start:
                return
            if start != b"$":
                continue
            body = (await reader.readuntil(b"#"))[:-1]
            await reader.readexactly(2)
            writer.write(b"+")
            reply = self.answer(body)
            writer.write(b"$" + reply + b"#" + b"%02x" % (sum(reply) & 0xFF))
            await writer.drain()
            assert await reader.readexactly(1) == b"+"  # the client acknowledges our packets


async def test_gdb_flash_through_vflash_packets_against_a_stub_with_a_memory_map():
    stub = FakeFlashStub()
    server = await asyncio.start_server(stub.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = GdbRemoteClient("127.0.0.1", port)
    try:
        await client.connect()
        assert client.packet_size == 0x200
        image = bytes(range(256)) * 3 + b"#$}*" * 10 + b"\x00" * 200  # escapes and long runs
        steps = []
        method = await client.flash(0x0800_0100, image, lambda p, d, t: steps.append(p))
        assert method == "vFlash, verified"
        assert stub.erased == [(0x0800_0000, 0x800)]  # the two whole erase blocks under 0x100..0x4ef
        assert bytes(stub.flash[0x100 : 0x100 + len(image)]) == image
        assert stub.flash[0] == 0xFF  # erased, not written
        assert steps[0] == "erase" and steps[-1] == "verify"
    finally:
        await client.close()
        server.close()
        await server.wait_closed()
