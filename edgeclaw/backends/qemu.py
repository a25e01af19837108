"""The sim board's STM32: qemu-system-arm emulating an STM32VLDISCOVERY, reached over its GDB stub.

QEMU needs a `-kernel` image; a Cortex-M boots from its vector table, so a
few bytes do: the initial stack pointer (top of the 8 KiB SRAM), a reset
vector pointing at a five-instruction handler that counts boots in SRAM and
then parks on `b .`, and the NMI and HardFault vectors pointing at that `b .`.
The image is written to the state directory on first use (`firmware_image()`
is also what `scripts/make_stm32_firmware.py` writes out).

QEMU is started lazily, frozen at reset (`-S`) with its GDB stub on a free
loopback port, and stopped on shutdown. A start or stop that is cancelled
half way (a deadline, the daemon stopping) kills the process rather than
leave it behind. As a safety net for a daemon that dies without shutting
down, the child asks the kernel for SIGTERM when its parent goes away
(PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgeclaw.backends.base import DeviceUnavailable

log = logging.getLogger("edgeclaw.backends.qemu")

QEMU_BINARY = "qemu-system-arm"
SRAM_TOP = 0x2000_2000  # STM32F100RB: 8 KiB SRAM at 0x2000_0000
FLASH_BASE = 0x0800_0000
CODE_OFFSET = 0x10  # the loop follows the four vectors
START_TIMEOUT_S = 10.0


BOOT_COUNTER = 0x2000_0100  # the firmware counts its boots here


def firmware_image() -> bytes:
    """32 bytes: the vector table (SP, Reset, NMI, HardFault) and a reset handler that counts boots.

    At 0x0800_0010 (Thumb): ldr r0, =BOOT_COUNTER; ldr r1, [r0]; adds r1, #1; str r1, [r0]; b .
    SRAM survives a system reset, so the counter shows a resume ran the code and a reset restarted it.
    """
    reset = (FLASH_BASE + CODE_OFFSET) | 1  # Thumb bit set: Cortex-M only runs Thumb code
    hang = (FLASH_BASE + CODE_OFFSET + 8) | 1  # the `b .`
    vectors = struct.pack("<4I", SRAM_TOP, reset, hang, hang)
    code = struct.pack(
        "<8H",
        0x4802,  # ldr r0, [pc, #8]  -> the literal at 0x1c
        0x6801,  # ldr r1, [r0]
        0x3101,  # adds r1, #1
        0x6001,  # str r1, [r0]
        0xE7FE,  # b .
        0xBF00,  # nop (aligns the literal)
        BOOT_COUNTER & 0xFFFF,
        BOOT_COUNTER >> 16,
    )
    return vectors + code


def qemu_available() -> bool:
    return shutil.which(QEMU_BINARY) is not None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PR_SET_PDEATHSIG = 1
_prctl: Any = None


def _die_with_parent() -> Callable[[], None] | None:
    """What the child runs between fork and exec: ask for SIGTERM when the daemon goes away.

    libc's prctl is looked up here, in the parent: loading a library in the child of a
    threaded process (the buses' worker threads) can deadlock on a lock held at the fork.
    """
    global _prctl
    if _prctl is None:
        try:
            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            return None
    prctl, parent = _prctl, os.getpid()

    def in_child() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:
            os._exit(1)  # the daemon died before the request took effect: nobody would stop us

    return in_child


class QemuSTM32:
    """One qemu-system-arm process with its GDB stub on 127.0.0.1:`port`."""

    def __init__(self, state_dir: Path, machine: str = "stm32vldiscovery") -> None:
        self.state_dir = state_dir / "sim"
        self.machine = machine
        self.port = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._start_lock = asyncio.Lock()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self) -> tuple[str, int]:
        """Start QEMU if it is not running; returns the GDB stub's (host, port)."""
        async with self._start_lock:
            if self.running:
                return "127.0.0.1", self.port
            binary = shutil.which(QEMU_BINARY)
            if binary is None:
                raise DeviceUnavailable(
                    f"the sim board's STM32 needs {QEMU_BINARY} (apt install qemu-system-arm)"
                )
            self.state_dir.mkdir(parents=True, exist_ok=True)
            image = self.state_dir / "stm32-vector-table.bin"
            image.write_bytes(firmware_image())
            log_path = self.state_dir / "qemu.log"
            last_error = ""
            for _ in range(3):  # the free port can be taken between our check and QEMU's bind
                self.port = _free_port()
                log_file = log_path.open("wb")  # a local file, opened once per start
                with log_file:
                    self._proc = await asyncio.create_subprocess_exec(
                        binary, "-M", self.machine, "-S", "-gdb", f"tcp:127.0.0.1:{self.port}",
                        "-kernel", str(image), "-display", "none", "-monitor", "none", "-serial", "null",
                        stdin=asyncio.subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                        preexec_fn=_die_with_parent(),
                    )  # fmt: skip
                try:
                    listening = await self._wait_listening()
                except BaseException:
                    self.kill_now()  # cancelled while it starts: no half-started QEMU left behind
                    raise
                if listening:
                    log.info(
                        "started %s (pid %d), GDB stub on port %d", QEMU_BINARY, self._proc.pid, self.port
                    )
                    return "127.0.0.1", self.port
                last_error = log_path.read_text(errors="replace").strip()[-300:]
                await self.stop()
            raise DeviceUnavailable(f"{QEMU_BINARY} did not start: {last_error or 'no output'}")

    async def _wait_listening(self) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT_S
        while loop.time() < deadline:
            if self._proc is None or self._proc.returncode is not None:
                return False
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.02)
                continue
            # QEMU's stub takes one client; this probe connection is closed at once so the real one fits.
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True
        return False

    async def stop(self) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            self._proc = None
            return
        try:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 3.0)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        except BaseException:
            self.kill_now()  # cancelled mid-stop (a shutdown deadline): never leave it running
            raise
        self._proc = None
        log.info("stopped %s (pid %d)", QEMU_BINARY, proc.pid)

    def kill_now(self) -> None:
        """Synchronous last resort: SIGKILL, without waiting (the event loop's child watcher reaps it)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            log.warning("killed %s (pid %d)", QEMU_BINARY, proc.pid)
