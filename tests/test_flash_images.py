"""Flashing Intel HEX and ELF images (and raw binaries) through the probe, with progress on every channel.

The images are built here: HEX with `intelhex`, ELF as bytes with `struct` (pyelftools only reads),
so what each holds — and where — is known exactly. They go into the sim board's QEMU STM32
(stm32vldiscovery) over the GDB path and are read back through the `probe` tool.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
from intelhex import IntelHex

from edgeclaw.backends.firmware_image import ImageError, detect_format, parse_image
from edgeclaw.backends.qemu import firmware_image, qemu_available
from edgeclaw.tools.base import ToolContext
from tests.hw_support import CTX, call, make_runtime, ok
from tests.mqtt_support import Caller, needs_mosquitto, poll
from tests.test_console import console, llm  # noqa: F401 - the console fixtures

needs_qemu = pytest.mark.skipif(not qemu_available(), reason="qemu-system-arm is not installed")

PT_LOAD, PT_NOTE = 1, 4
EM_ARM = 40
SRAM_A, SRAM_B = 0x2000_0400, 0x2000_0C00
FLASH_APP = 0x0800_4000


def make_hex(runs: dict[int, bytes]) -> bytes:
    """An Intel HEX file holding `runs` (address: bytes), extended linear address records and all."""
    hexfile = IntelHex()
    for address, data in runs.items():
        hexfile.puts(address, data)
    out = io.StringIO()
    hexfile.write_hex_file(out)
    return out.getvalue().encode("ascii")


def make_elf(
    segments: list[tuple[int, int, int, bytes, int]], entry: int = 0x0800_0011, elf_class: int = 1
) -> bytes:
    """A minimal little-endian ARM ELF executable: program headers only, as a linker's output holds
    them. Each segment is (p_type, p_vaddr, p_paddr, file bytes, p_memsz)."""
    header_size, ph_size = 52, 32
    offset = header_size + ph_size * len(segments)
    headers, bodies = b"", b""
    for p_type, vaddr, paddr, body, memsz in segments:
        headers += struct.pack("<8I", p_type, offset + len(bodies), vaddr, paddr, len(body), memsz, 5, 4)
        bodies += body
    ident = b"\x7fELF" + bytes((elf_class, 1, 1)) + bytes(9)
    elf_header = ident + struct.pack(
        "<HHIIIIIHHHHHH", 2, EM_ARM, 1, entry, header_size, 0, 0x0500_0000, header_size, ph_size,
        len(segments), 40, 0, 0,
    )  # fmt: skip
    return elf_header + headers + bodies


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * seed + seed) & 0xFF for i in range(n))


@pytest.fixture
async def sim(tmp_path):
    runtime = make_runtime(tmp_path)
    yield runtime
    await runtime.aclose()


async def memory(runtime: Any, address: int, length: int) -> bytes:
    """Read back through the `probe` tool, in the reads it allows (4 KiB each)."""
    out = b""
    while len(out) < length:
        n = min(4096, length - len(out))
        data = await ok(runtime, "probe", action="read_memory", address=address + len(out), length=n)
        out += bytes.fromhex(data["data"])
    return out


# -- reading images ------------------------------------------------------------------------------------
def test_a_hex_file_becomes_its_runs_of_data_at_their_addresses():
    data = make_hex({0x0800_1000: b"\x01\x02\x03", SRAM_A: pattern(300, 3)})
    assert detect_format(data, "app.txt") == "hex"  # by content, whatever the name
    image = parse_image(data, "app.hex")
    assert image.format == "hex"
    assert [(s.address, s.data) for s in image.segments] == [
        (0x0800_1000, b"\x01\x02\x03"),
        (SRAM_A, pattern(300, 3)),
    ]


def test_an_elf_file_becomes_its_loadable_segments_at_their_load_addresses():
    data = make_elf(
        [
            (PT_LOAD, 0x0800_0000, 0x0800_0000, b"\xaa" * 16, 16),
            (PT_LOAD, 0x2000_0000, 0x0800_0010, b"\xbb" * 8, 8),  # .data: runs in RAM, stored in flash
            (PT_LOAD, 0x2000_0100, 0x2000_0100, b"", 0x80),  # .bss: nothing to write
            (PT_NOTE, 0, 0, b"note", 4),
        ]
    )
    image = parse_image(data, "app.elf")
    assert image.format == "elf" and image.entry == 0x0800_0011
    assert [(s.address, s.data) for s in image.segments] == [
        (0x0800_0000, b"\xaa" * 16),
        (0x0800_0010, b"\xbb" * 8),
    ]


def test_damaged_images_are_errors_that_say_what_is_wrong():
    good = make_hex({0x0800_0000: b"\x01\x02\x03\x04"}).decode()
    first, rest = good.split("\n", 1)
    broken_sum = first[:-2] + ("00" if first[-2:] != "00" else "01")
    with pytest.raises(ImageError, match=r"not a valid Intel HEX file: .*checksum"):
        parse_image((broken_sum + "\n" + rest).encode(), "app.hex")
    elf = make_elf([(PT_LOAD, 0x2000_0000, 0x2000_0000, b"\x01" * 64, 64)])
    with pytest.raises(ImageError, match=r"app\.elf is (truncated|not a valid ELF file)"):
        parse_image(elf[:-10], "app.elf")
    with pytest.raises(ImageError, match=r"64-bit ELF file"):
        parse_image(make_elf([(PT_LOAD, 0, 0, b"\x01", 1)], elf_class=2), "x.elf")
    with pytest.raises(ImageError, match=r"without loadable segments"):
        parse_image(make_elf([(PT_NOTE, 0, 0, b"note", 4)]), "x.elf")
    with pytest.raises(ImageError, match=r"carries its own addresses: 'base' applies only to raw binary"):
        parse_image(make_hex({0x0800_0000: b"\x01"}), "app.hex", base=0x0800_0000)
    with pytest.raises(ImageError, match=r"outside the target's 32-bit address space"):
        parse_image(b"\x00" * 16, "app.bin", base=0xFFFF_FFF8)


# -- what the profile lets an image do ----------------------------------------------------------------
async def test_a_segment_outside_the_granted_areas_refuses_the_whole_image_before_anything_is_written(sim):
    # One good segment in SRAM and one in the read-only peripherals: nothing may be written at all.
    (sim.workspace / "bad.hex").write_bytes(make_hex({SRAM_A: b"\x11" * 8, 0x4000_0000: b"\x22" * 4}))
    dry = await call(sim, "probe", dry_run=True, action="flash", path="bad.hex")
    assert (
        dry.refused
        and "segment at 0x40000000 lies neither in the flash area 0x08000000-0x0801ffff" in dry.error
    )
    assert "nor inside a rw target region of the sim profile (rw: sram 0x20000000-0x20001fff)" in dry.error
    (sim.workspace / "wide.bin").write_bytes(b"\x00" * 0x100)
    past = await call(sim, "probe", dry_run=True, action="flash", path="wide.bin", base=0x0801_FF80)
    assert past.refused and "does not fit the flash area" in past.error
    hexed = await call(sim, "probe", dry_run=True, action="flash", path="bad.hex", base=0x0800_0000)
    assert not hexed.ok and "'base' applies only to raw binary images" in hexed.error


def _profile(tmp_path: Path, name: str, flash: bool) -> str:
    profile = tmp_path / f"{name}.toml"
    profile.write_text(
        f'[board]\nname = "{name}"\n[probe]\ntransport = "gdb"\ntarget = "qemu"\ngdb_address = "qemu"\n'
        f"flash = {'true' if flash else 'false'}\nflash_base = 0x0800_0000\nflash_size = 0x2_0000\n"
        'regions = [{ name = "sram", base = 0x2000_0000, size = 0x2000, access = "rw" }]\n'
    )
    return str(profile)


async def test_reset_after_flashing_needs_control(tmp_path):
    runtime = make_runtime(tmp_path, board=_profile(tmp_path, "no-control", flash=True))
    try:
        (runtime.workspace / "app.bin").write_bytes(b"\x00" * 16)
        refused = await call(runtime, "probe", dry_run=True, action="flash", path="app.bin", reset=True)
        allowed = await call(runtime, "probe", dry_run=True, action="flash", path="app.bin")
    finally:
        await runtime.aclose()
    assert refused.refused and "reset after flashing is not granted" in refused.error
    assert allowed.ok


async def test_without_the_flash_grant_only_ram_segments_load(tmp_path):
    runtime = make_runtime(tmp_path, board=_profile(tmp_path, "no-flash", flash=False))
    try:
        (runtime.workspace / "app.bin").write_bytes(b"\x00" * 16)
        (runtime.workspace / "mixed.hex").write_bytes(make_hex({0x0800_0000: b"\x01", SRAM_A: b"\x02"}))
        (runtime.workspace / "ram.hex").write_bytes(make_hex({SRAM_A: b"\x02" * 32}))
        binary = await call(runtime, "probe", dry_run=True, action="flash", path="app.bin")
        mixed = await call(runtime, "probe", dry_run=True, action="flash", path="mixed.hex")
        ram = await call(runtime, "probe", dry_run=True, action="flash", path="ram.hex")
    finally:
        await runtime.aclose()
    assert binary.refused and "flashing the target is not granted" in binary.error
    assert mixed.refused and "flashing the target is not granted" in mixed.error
    assert ram.ok, ram.error


async def test_an_image_file_larger_than_any_the_profile_has_room_for_is_not_read(sim):
    # Room: 128 KiB of flash and 8 KiB of SRAM; a file may hold four times that plus 1 MiB (HEX text,
    # ELF debug sections). A sparse file: its size is what is judged, on the descriptor.
    with (sim.workspace / "huge.elf").open("wb") as f:
        f.truncate(4 * (0x2_0000 + 0x2000) + (1 << 20) + 1)
    huge = await call(sim, "probe", dry_run=True, action="flash", path="huge.elf")
    assert huge.refused and "is larger than any image the sim profile has room for" in huge.error


# -- into QEMU over the GDB path -----------------------------------------------------------------------
@needs_qemu
async def test_a_hex_image_is_written_to_flash_and_sram_and_reads_back(sim):
    runs = {FLASH_APP: pattern(5000, 7), SRAM_A: pattern(600, 11)}
    (sim.workspace / "app.hex").write_bytes(make_hex(runs))
    outcome = await call(sim, "probe", action="flash", path="app.hex")
    assert outcome.ok, outcome.error
    assert outcome.data["format"] == "hex" and outcome.data["bytes"] == 5600
    assert [(s["address"], s["to"]) for s in outcome.data["segments"]] == [
        ("0x08004000", "flash"),
        ("0x20000400", "ram"),
    ]
    assert "write 100% (5600/5600 bytes)" in outcome.for_llm and "verify 100%" in outcome.for_llm
    assert "in 2 segments" in outcome.for_llm
    for address, data in runs.items():
        assert await memory(sim, address, len(data)) == data


@needs_qemu
async def test_an_elf_image_loads_into_sram_at_its_load_addresses_and_reads_back(sim):
    a, b = pattern(700, 5), pattern(256, 13)
    elf = make_elf(
        [
            (PT_LOAD, SRAM_A, SRAM_A, a, len(a)),
            (PT_LOAD, 0x0000_0000, SRAM_B, b, len(b) + 64),  # run address elsewhere: the load address counts
            (PT_LOAD, 0x2000_1000, 0x2000_1000, b"", 0x100),  # .bss: left alone
        ]
    )
    before_bss = await memory(sim, 0x2000_1000, 16)
    (sim.workspace / "app.elf").write_bytes(elf)
    done = await ok(sim, "probe", action="flash", path="app.elf")
    assert done["format"] == "elf" and [s["to"] for s in done["segments"]] == ["ram", "ram"]
    assert await memory(sim, SRAM_A, len(a)) == a
    assert await memory(sim, SRAM_B, len(b)) == b
    assert await memory(sim, 0x2000_1000, 16) == before_bss


@needs_qemu
async def test_an_elf_flashed_with_reset_starts_from_its_own_vector_table(sim):
    # The sim firmware with another initial stack pointer: after the reset the core has loaded it.
    app = struct.pack("<I", 0x2000_1800) + firmware_image()[4:]
    (sim.workspace / "boot.elf").write_bytes(make_elf([(PT_LOAD, 0x0800_0000, 0x0800_0000, app, len(app))]))
    done = await ok(sim, "probe", action="flash", path="boot.elf", reset=True)
    assert done["reset"] is True
    registers = (await ok(sim, "probe", action="read_registers"))["registers"]
    assert registers["sp"] == 0x2000_1800 and registers["pc"] == 0x0800_0010


@needs_qemu
async def test_progress_goes_to_the_callers_sink_and_only_grows(sim):
    seen: list[tuple[float, float | None, str]] = []
    ctx = ToolContext(channel="cli", session_key="hw-test", progress=lambda *u: seen.append(u))
    (sim.workspace / "big.bin").write_bytes(pattern(64 * 1024, 3))
    outcome = await sim.registry.execute("probe", {"action": "flash", "path": "big.bin"}, ctx)
    assert outcome.ok, outcome.error
    assert seen, "no progress reached the caller"
    figures = [done for done, _, _ in seen]
    assert figures == sorted(figures) and len(set(figures)) == len(figures)
    assert all(total == 2 * 64 * 1024 for _, total, _ in seen)
    assert seen[0][2].startswith("flashing big.bin: write ")
    quiet = await call(sim, "probe", action="flash", path="big.bin")  # nobody listening: still fine
    assert quiet.ok and CTX.progress is None


# -- progress on MQTT, correlated with the request -------------------------------------------------------
@needs_qemu
@needs_mosquitto
async def test_flashing_over_mqtt_sends_progress_messages_before_the_answer(tmp_path, broker):
    from tests.test_mqtt import ANSWERS, BASE, daemon_config, running_daemon

    async with (
        running_daemon(daemon_config(tmp_path, broker.port)) as d,
        Caller(broker.port, [ANSWERS, f"{BASE}/tool/result"]) as c,
    ):
        workspace = Path(d.runtime.workspace)
        (workspace / "app.hex").write_bytes(
            make_hex({FLASH_APP: pattern(96 * 1024, 5), SRAM_A: b"\x5a" * 64})
        )
        request = {"id": "fw-1", "tool": "probe", "args": {"action": "flash", "path": "app.hex"}}
        await c.publish(f"{BASE}/tool/call", request, response_topic=ANSWERS, correlation=b"corr-fw")
        await poll(lambda: any("ok" in m.json for m in c.on(ANSWERS)), 120, "the flash call's answer")
        messages = c.on(ANSWERS)
        progress = [m.json for m in messages if "ok" not in m.json]
        answer = messages[-1].json  # the answer is the last message of the call
        assert answer["ok"] is True, answer
        assert answer["id"] == "fw-1" and answer["data"]["bytes"] == 96 * 1024 + 64
        assert progress, "no progress message before the answer"
        assert all(m.correlation == b"corr-fw" for m in messages)
        assert [p["seq"] for p in progress] == list(range(len(progress)))
        assert all(p["id"] == "fw-1" and p["tool"] == "probe" for p in progress)
        assert all(0 < p["progress"] <= p["total"] == 2 * (96 * 1024 + 64) for p in progress)
        assert "flashing app.hex: write" in progress[0]["message"]
        assert not c.on(f"{BASE}/tool/result")  # nothing went to the fallback topic


@pytest.fixture
def broker(tmp_path: Path):
    from tests.mqtt_support import Mosquitto

    b = Mosquitto(tmp_path / "broker").start()
    yield b
    b.kill()


# -- progress in `edgeclaw tool call` ------------------------------------------------------------------
def test_the_bar_fills_with_the_fraction_done_and_fits_the_terminal():
    from edgeclaw.channels.cli_progress import bar_line

    assert bar_line(50, 200, "write", 80) == "[######..................]  25%  write"
    assert bar_line(300, 200, "x", 80).startswith("[" + "#" * 24 + "] 100%")
    assert bar_line(7, None, "scanning", 80) == "[" + "?" * 24 + "] 7  scanning"
    assert len(bar_line(1, 2, "m" * 500, 60)) == 59


def _workspace_image(state_env: dict[str, str]) -> int:
    workspace = Path(state_env["EDGECLAW_STATE_DIR"]) / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    data = make_hex({FLASH_APP: pattern(96 * 1024, 9), SRAM_A: b"\x33" * 64})
    (workspace / "app.hex").write_bytes(data)
    return 96 * 1024 + 64


FLASH_ARGS = '{"action": "flash", "path": "app.hex"}'


@needs_qemu
def test_tool_call_prints_progress_lines_on_stderr_when_not_on_a_terminal(state_env, run_cli):
    size = _workspace_image(state_env)
    out = run_cli("tool", "call", "probe", FLASH_ARGS, "--board", "sim", timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"flashed {size} bytes in 2 segments from 0x08004000" in out.stdout
    lines = [line for line in out.stderr.splitlines() if line.startswith("progress ")]
    assert lines and all(": flashing app.hex: " in line for line in lines), out.stderr
    assert "progress" not in out.stdout.replace('progress":', "")  # the answer alone on stdout
    quiet = run_cli("tool", "call", "probe", FLASH_ARGS, "--board", "sim", "--json", timeout=120)
    assert json.loads(quiet.stdout)["ok"] is True and "progress " not in quiet.stderr


@needs_qemu
def test_tool_call_draws_a_progress_bar_on_a_terminal_and_wipes_it_before_the_answer(state_env):
    import pexpect

    size = _workspace_image(state_env)
    term = pexpect.spawn(
        sys.executable,
        ["-m", "edgeclaw", "tool", "call", "probe", FLASH_ARGS, "--board", "sim"],
        env=state_env,
        encoding="utf-8",
        timeout=120,
        dimensions=(24, 100),
    )
    term.expect(pexpect.EOF)
    term.close()
    shown = term.before
    assert re.search(r"\r\x1b\[K\[#*\.*\] +\d+%  flashing app\.hex: write \d+%", shown), shown
    answer = shown.rsplit("\r\x1b[K", 1)[1]  # after the last wipe: the answer, and no bar left
    assert not re.search(r"\[[#.]{24}\]", answer)
    assert answer.startswith("write ") and f"flashed {size} bytes" in answer
    assert term.exitstatus == 0


# -- progress on the serial console ----------------------------------------------------------------
@needs_qemu
def test_the_console_shows_a_progress_line_while_flashing_and_wipes_it_before_the_answer(console):  # noqa: F811
    from tests.test_console import PROMPT, login

    daemon, (port,) = console(with_llm=False)
    assert daemon.runtime is not None
    size = 96 * 1024 + 64
    data = make_hex({FLASH_APP: pattern(96 * 1024, 3), SRAM_A: b"\x44" * 64})
    (Path(daemon.runtime.workspace) / "app.hex").write_bytes(data)
    term = port.terminal()
    term.timeout = 120
    login(term)
    term.send('/call probe {"action": "flash", "path": "app.hex"}\r')
    term.expect_exact(PROMPT)
    shown = term.before
    assert re.search(r"\r\x1b\[K\[#*\.*\] +\d+%  flashing app\.hex: write \d+%", shown), shown
    answer = shown.rsplit("\r\x1b[K", 1)[1]  # after the last wipe: the answer, no bar left over
    assert not re.search(r"\[[#.]{24}\]", answer)
    assert f"flashed {size} bytes in 2 segments" in re.sub(r"\r\n *", "", answer)


# -- the pyocd path, faked at pyocd's API --------------------------------------------------------------
class FakeRegion:
    def __init__(self, start: int, length: int, is_flash: bool) -> None:
        self.start, self.end, self.is_flash = start, start + length, is_flash


class FakePyocdTarget:
    """Flash at 0x0800_0000 that only pyocd's loader writes (memory writes there do nothing), RAM
    at 0x2000_0000; `corrupt` makes one flash byte read back wrong."""

    def __init__(self) -> None:
        self.memory = bytearray(0x1_0000)  # flash
        self.ram = bytearray(0x2000)
        self.regions = [FakeRegion(0x0800_0000, 0x1_0000, True), FakeRegion(0x2000_0000, 0x2000, False)]
        self.corrupt: int | None = None
        self.memory_map = self
        self.halted = False

    def halt(self) -> None:
        self.halted = True

    def get_region_for_address(self, address: int) -> FakeRegion | None:
        return next((r for r in self.regions if r.start <= address < r.end), None)

    def _where(self, address: int) -> tuple[bytearray, int]:
        return (
            (self.memory, address - 0x0800_0000)
            if address < 0x2000_0000
            else (self.ram, address - 0x2000_0000)
        )

    def write_memory_block8(self, address: int, data: list[int]) -> None:
        if address >= 0x2000_0000:
            store, at = self._where(address)
            store[at : at + len(data)] = bytes(data)

    def read_memory_block8(self, address: int, size: int) -> list[int]:
        store, at = self._where(address)
        out = list(store[at : at + size])
        if self.corrupt is not None and address <= self.corrupt < address + size:
            out[self.corrupt - address] ^= 0xFF
        return out


def _fake_pyocd_loader(monkeypatch, target: FakePyocdTarget, threads: list[int]) -> None:
    import sys
    import threading
    import types

    class FlashLoader:
        def __init__(self, session: Any, progress: Any = None) -> None:
            self.progress, self.data = progress, []

        def add_data(self, address: int, data: list[int]) -> None:
            if not target.get_region_for_address(address).is_flash:
                raise ValueError("no flash region")  # pyocd's loader takes flash only
            self.data.append((address, bytes(data)))

        def commit(self) -> None:
            threads.append(threading.get_ident())
            for i, (address, data) in enumerate(self.data):
                start = address - 0x0800_0000
                target.memory[start : start + len(data)] = data
                self.progress((i + 1) / len(self.data))

    loader = types.ModuleType("pyocd.flash.loader")
    loader.FlashLoader = FlashLoader  # type: ignore[attr-defined]
    for name in ("pyocd", "pyocd.flash"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "pyocd.flash.loader", loader)


async def test_the_pyocd_path_programs_flash_with_its_loader_loads_ram_and_verifies(monkeypatch):
    import threading

    from edgeclaw.backends.firmware_image import Segment
    from edgeclaw.backends.probe import PyocdProbe
    from edgeclaw.errors import BackendError

    target, threads = FakePyocdTarget(), []
    _fake_pyocd_loader(monkeypatch, target, threads)
    probe = PyocdProbe("stm32f401retx", "", timeout_s=5, flash_timeout_s=10)
    probe._session = type("Session", (), {"board": type("Board", (), {"target": target})()})()
    seen: list[tuple[int, str, int, int, int]] = []
    segments = [Segment(0x0800_0100, pattern(5000, 3)), Segment(0x2000_0040, b"\x77" * 100)]
    try:
        method = await probe.program(segments, lambda *u: seen.append((*u, threading.get_ident())))
        assert method == "pyocd flash algorithm, memory writes, verified" and target.halted
        assert bytes(target.memory[0x100 : 0x100 + 5000]) == pattern(5000, 3)
        assert bytes(target.ram[0x40 : 0x40 + 100]) == b"\x77" * 100
        assert threads and threads[0] != threading.get_ident()  # pyocd ran on the worker thread...
        assert {t for *_, t in seen} == {threading.get_ident()}  # ...its progress came to the loop
        assert (0, "verify", 5000, 5000) in [u[:4] for u in seen]
        target.corrupt = 0x0800_0100 + 4097
        with pytest.raises(BackendError, match="verify failed at 0x08001101"):
            await probe.program(segments, lambda *u: None)
    finally:
        probe._session = None
        await probe.close()


@needs_qemu
def test_edgeclaw_chat_shows_a_progress_bar_on_a_terminal_and_the_answer_after_it(state_env, run_cli):
    import pexpect

    size = _workspace_image(state_env)
    line = f"/call probe {FLASH_ARGS}"
    term = pexpect.spawn(
        sys.executable,
        ["-m", "edgeclaw", "chat", "--message", line],
        env=state_env,
        encoding="utf-8",
        timeout=120,
    )
    term.expect(pexpect.EOF)
    term.close()
    shown = term.before
    assert re.search(r"\r\x1b\[K\[#*\.*\] +\d+%  flashing app\.hex: write \d+%", shown), shown
    answer = shown.rsplit("\r\x1b[K", 1)[1]
    assert not re.search(r"\[[#.]{24}\]", answer) and f"flashed {size} bytes" in answer
    piped = run_cli("chat", "--message", line, timeout=120)  # not a terminal: the answer alone
    assert piped.returncode == 0 and "\x1b[K" not in piped.stdout and f"flashed {size} bytes" in piped.stdout


@needs_qemu
def test_a_model_turn_in_edgeclaw_chat_wipes_the_bar_before_the_streamed_answer(state_env, llm):  # noqa: F811
    import pexpect

    from tests.llm_server import openai_text, openai_tools

    _workspace_image(state_env)
    llm.stream_replies = True
    Path(state_env["EDGECLAW_CONFIG"]).write_text(
        'board = "sim"\n[agent]\nproviders = ["local"]\nprovider_attempts = 1\n'
        f'[providers.local]\nkind = "openai"\nmodel = "m"\nbase_url = "{llm.url}/v1"\ntimeout_s = 30\n'
    )
    llm.reply(openai_tools(("probe", json.loads(FLASH_ARGS))), openai_text("Flashed it."))
    term = pexpect.spawn(
        sys.executable,
        ["-m", "edgeclaw", "chat", "--message", "flash app.hex"],
        env=state_env,
        encoding="utf-8",
        timeout=120,
    )
    term.expect(pexpect.EOF)
    term.close()
    shown = term.before
    frames = list(re.finditer(r"\r\x1b\[K\[[#.]{24}\] +\d+%  flashing app\.hex: [^\r\n\x1b]*", shown))
    assert frames, shown  # the model's call of the tool showed its progress
    tail = shown[frames[-1].end() :]
    assert tail.startswith("\r\x1b[K") and "Flashed it." in tail  # wiped, then the streamed answer


async def test_progress_messages_are_scrubbed_and_shown_without_control_sequences(tmp_path):
    from edgeclaw.channels.cli_progress import TerminalProgress, bar_line
    from edgeclaw.tools.base import Tool

    key = "sk-" + "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6kM9nP2rS5uX8"

    class Chatty(Tool):
        name = "chatty"
        group = "automation"
        description = "Reports progress with a secret and an escape sequence in it."

        async def execute(self, args, ctx):
            ctx.progress(1, 2, f"using key {key} \x1b[2J\x1b]0;owned\x07 now")
            return "done"

    runtime = make_runtime(tmp_path)
    try:
        runtime.registry.register(Chatty())
        seen: list[str] = []
        ctx = ToolContext(channel="cli", session_key="hw-test", progress=lambda p, t, m: seen.append(m))
        assert (await runtime.registry.execute("chatty", {}, ctx)).ok
    finally:
        await runtime.aclose()
    assert seen and key not in seen[0] and "[REDACTED]" in seen[0]  # scrubbed for every channel
    frame = bar_line(1, 2, seen[0], 200)
    assert "\x1b" not in frame and "\x07" not in frame
    out = io.StringIO()
    TerminalProgress(out, tty=False)(1, 2, "a\x1b[31mred\x1b[0m line")
    assert out.getvalue() == "progress 50%: a?[31mred?[0m line\n"


async def test_the_mqtt_progress_publisher_names_the_device_and_survives_a_failing_publish():
    from edgeclaw.channels.mqtt.progress import ProgressPublisher

    sent: list[dict[str, Any]] = []
    failures = [True]  # the first publish fails (the broker went away), the rest go out

    async def publish(payload: bytes) -> None:
        if failures and failures.pop():
            raise ConnectionError("broker gone")
        sent.append(json.loads(payload))

    head = {"id": "c-1", "tool": "probe"}
    progress = ProgressPublisher(publish, head, lambda text: text.replace("secret", "[X]"), "dev-7")
    progress(1, 4, "first")
    progress(2, 4, "second secret")
    progress(3, None, "third")
    assert await progress.close() == 2
    progress(4, 4, "after the answer")  # never published: the answer was the last message
    await asyncio.sleep(0)
    assert sent == [
        {
            "id": "c-1",
            "tool": "probe",
            "progress": 2,
            "total": 4,
            "message": "second [X]",
            "seq": 0,
            "device": "dev-7",
        },
        {"id": "c-1", "tool": "probe", "progress": 3, "message": "third", "seq": 1, "device": "dev-7"},
    ]


@needs_qemu
@needs_mosquitto
async def test_a_chat_turn_that_flashes_sends_progress_messages_before_its_answer(tmp_path, broker, llm):  # noqa: F811
    from tests.llm_server import openai_text, openai_tools
    from tests.test_mqtt import BASE, daemon_config, running_daemon

    llm.reply(openai_tools(("probe", {"action": "flash", "path": "app.hex"})), openai_text("Flashed."))
    config = daemon_config(
        tmp_path,
        broker.port,
        top={
            "agent": {"providers": ["local"], "provider_attempts": 1},
            "providers": {"local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1"}},
        },
    )
    topic = "test/chat"
    async with running_daemon(config) as d, Caller(broker.port, [topic]) as c:
        data = make_hex({FLASH_APP: pattern(96 * 1024, 7), SRAM_A: b"\x12" * 64})
        (Path(d.runtime.workspace) / "app.hex").write_bytes(data)
        request = {"text": "flash app.hex", "id": "f1", "session": "ops"}
        await c.publish(f"{BASE}/chat/in", request, response_topic=topic, correlation=b"f1")
        await poll(lambda: any("ok" in m.json for m in c.on(topic)), 120, "the chat answer")
        messages = c.on(topic)
    *progress, answer = [m.json for m in messages]
    assert answer["text"] == "Flashed." and answer["ok"] is True
    assert progress and all(m.correlation == b"f1" for m in messages)
    assert all(p["session"] == "mqtt:ops" and p["in_reply_to"] == "f1" and "text" not in p for p in progress)
    assert [p["seq"] for p in progress] == list(range(len(progress)))
    assert "flashing app.hex: write" in progress[0]["message"]
