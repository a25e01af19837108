"""The GDB remote client and the `probe` tool against a real QEMU STM32 (stm32vldiscovery).

QEMU runs the 32-byte image from `backends.qemu.firmware_image()`: a vector
table and a reset handler that counts boots at 0x2000_0100.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from edgeclaw.backends import qemu as qemu_module
from edgeclaw.backends.base import DeviceReplyError
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


# -- the QEMU process is never left behind -----------------------------------------------------------
FAKE_QEMU = """\
import os, signal, socket, sys, time
# A stand-in for qemu-system-arm: records its pid, listens on the -gdb port unless told not to,
# and (like a wedged emulator) ignores SIGTERM unless told to honour it.
open(os.environ["FAKE_QEMU_PID"], "w").write(str(os.getpid()))
if os.environ.get("FAKE_QEMU_TERM") != "honour":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ.get("FAKE_QEMU_LISTEN") != "no":
    port = int(sys.argv[sys.argv.index("-gdb") + 1].rsplit(":", 1)[1])
    server = socket.create_server(("127.0.0.1", port))
while True:
    time.sleep(1)
"""


@pytest.fixture
def fake_qemu(tmp_path, monkeypatch):
    script = tmp_path / "fake-qemu-system-arm"
    script.write_text(f"#!{sys.executable}\n" + FAKE_QEMU)
    script.chmod(0o755)
    pid_file = tmp_path / "fake-qemu.pid"
    monkeypatch.setattr(qemu_module, "QEMU_BINARY", str(script))
    monkeypatch.setenv("FAKE_QEMU_PID", str(pid_file))
    return script, pid_file


def _gone(pid: int) -> bool:
    """The process has exited (reaped, or a zombie waiting to be)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between open and read
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not _gone(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # do not leave it behind whatever the test says
            return False
        time.sleep(0.02)
    return True


async def test_a_cancelled_stop_still_kills_qemu(tmp_path, fake_qemu):
    _, pid_file = fake_qemu
    target = QemuSTM32(tmp_path)
    await target.start()
    pid = int(pid_file.read_text())
    stopping = asyncio.create_task(target.stop())
    await asyncio.sleep(0.3)  # SIGTERM sent and ignored: stop() is waiting for it to exit
    stopping.cancel()  # a shutdown deadline runs out
    with contextlib.suppress(asyncio.CancelledError):
        await stopping
    assert _wait_gone(pid), "QEMU outlived a cancelled stop()"
    assert not target.running


async def test_a_cancelled_start_leaves_no_half_started_qemu(tmp_path, fake_qemu, monkeypatch):
    _, pid_file = fake_qemu
    monkeypatch.setenv("FAKE_QEMU_LISTEN", "no")  # never ready: start() keeps polling its port
    target = QemuSTM32(tmp_path)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(target.start(), 0.5)
    assert pid_file.exists()
    assert _wait_gone(int(pid_file.read_text())), "a half-started QEMU was left running"
    assert not target.running


def test_qemu_dies_with_a_daemon_that_is_killed(tmp_path, fake_qemu, monkeypatch):
    script, pid_file = fake_qemu
    monkeypatch.setenv("FAKE_QEMU_TERM", "honour")  # like the real one: SIGTERM ends it
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import asyncio, pathlib
                from edgeclaw.backends import qemu
                qemu.QEMU_BINARY = {str(script)!r}
                async def main():
                    await qemu.QemuSTM32(pathlib.Path({str(tmp_path)!r})).start()
                    print("started", flush=True)
                    await asyncio.sleep(60)
                asyncio.run(main())
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    try:
        assert daemon.stdout is not None and daemon.stdout.readline().strip() == "started"
        pid = int(pid_file.read_text())
        daemon.kill()  # SIGKILL: no shutdown code runs
        daemon.wait(5)
        assert _wait_gone(pid), "QEMU outlived the daemon"
    finally:
        daemon.kill()
        daemon.wait(5)


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
    with pytest.raises(
        DeviceReplyError, match=r"cannot read 8 bytes at 0x60000000: .*nothing is mapped there"
    ):
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
    assert "write 100%" in outcome.for_llm and "verify 100%" in outcome.for_llm
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


async def test_gdb_flash_refuses_an_image_that_runs_past_the_flash_region():
    # Falling back to plain memory writes would have written whatever lies after the flash region.
    stub = FakeFlashStub()
    server = await asyncio.start_server(stub.serve, "127.0.0.1", 0)
    client = GdbRemoteClient("127.0.0.1", server.sockets[0].getsockname()[1])
    try:
        await client.connect()
        with pytest.raises(DeviceReplyError, match="runs past the end of the target's flash region"):
            await client.flash(0x0800_3F00, b"\x11" * 0x200)
        assert not any(p.startswith((b"vFlash", b"M", b"X")) for p in stub.log)  # nothing written
    finally:
        await client.close()
        server.close()
        await server.wait_closed()


class FakeRegisterStub(FakeFlashStub):
    """A stub without a target description; `p` answers per register, or not at all."""

    def __init__(self, p_packet: bool, g_reply: bytes = b"") -> None:
        super().__init__()
        self.p_packet = p_packet
        self.g_reply = g_reply

    def answer(self, packet: bytes) -> bytes:
        if packet.startswith(b"p"):
            if not self.p_packet:
                return b""
            regnum = int(packet[1:], 16)
            return b"xxxxxxxx" if regnum == 12 else (0x1000 + regnum).to_bytes(4, "little").hex().encode()
        if packet == b"g":
            return self.g_reply
        return super().answer(packet)


async def _registers_from(stub: FakeRegisterStub) -> dict[str, int]:
    server = await asyncio.start_server(stub.serve, "127.0.0.1", 0)
    client = GdbRemoteClient("127.0.0.1", server.sockets[0].getsockname()[1])
    try:
        await client.connect()
        return await client.read_registers()
    finally:
        await client.close()
        server.close()
        await server.wait_closed()


async def test_registers_the_stub_marks_unavailable_are_left_out():
    registers = await _registers_from(FakeRegisterStub(p_packet=True))
    assert registers["r0"] == 0x1000 and registers["pc"] == 0x100F and registers["xpsr"] == 0x1019
    assert "r12" not in registers  # 'xxxxxxxx': unavailable, not a crash and not a made-up value


async def test_the_g_fallback_never_makes_up_values():
    with pytest.raises(DeviceReplyError, match="supports neither 'p' nor 'g'"):
        await _registers_from(FakeRegisterStub(p_packet=False))
    with pytest.raises(DeviceReplyError, match="register reply is short"):
        await _registers_from(FakeRegisterStub(p_packet=False, g_reply=b"00112233" * 4))
    full = b"".join(i.to_bytes(4, "little").hex().encode() for i in range(16))
    registers = await _registers_from(
        FakeRegisterStub(p_packet=False, g_reply=full.replace(b"0c000000", b"xxxxxxxx"))
    )
    assert registers["r1"] == 1 and registers["pc"] == 15 and "r12" not in registers
