"""Debug probes: a target's memory, core registers and run control, and flashing it.

Two implementations of one protocol:

* `GdbProbe` speaks the GDB remote protocol to any GDB server (OpenOCD,
  pyocd gdbserver, probe-rs, QEMU). On the sim board it first starts QEMU
  itself (`backends.qemu`).
* `PyocdProbe` drives a CMSIS-DAP / ST-LINK / J-Link probe through pyocd,
  imported lazily (an optional extra of ~70 MB) and always asked with
  `blocking=False`, so "no probe attached" is an error, not a hang. pyocd
  blocks, so its calls run on the probe's own worker thread.

The connection is made on first use and kept; a dropped connection is
re-made on the next call. One lock per probe: concurrent calls queue.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from edgeclaw.backends.base import BusGate, BusTimeout, DeviceReplyError, DeviceUnavailable, missing_library
from edgeclaw.backends.firmware_image import Segment
from edgeclaw.backends.gdbremote import GdbRemoteClient
from edgeclaw.backends.qemu import START_TIMEOUT_S as QEMU_START_TIMEOUT_S
from edgeclaw.backends.qemu import QemuSTM32
from edgeclaw.errors import BackendError

T = TypeVar("T")

# Cortex-M Application Interrupt and Reset Control Register: VECTKEY | SYSRESETREQ (ARMv7-M ARM B3.2.6).
AIRCR = 0xE000_ED0C
AIRCR_SYSRESETREQ = 0x05FA_0004
CORE_REGISTERS = (*(f"r{i}" for i in range(13)), "sp", "lr", "pc", "xpsr")
# A program's progress: (segment index, phase "erase" | "write" | "verify", done, total) in bytes.
SegmentProgress = Callable[[int, str, int, int], None]
VERIFY_STEP = 4096


class DebugProbe(Protocol):
    description: str

    async def read_memory(self, address: int, length: int) -> bytes: ...
    async def write_memory(self, address: int, data: bytes) -> None: ...
    async def read_registers(self) -> dict[str, int]: ...
    async def state(self) -> str: ...
    async def halt(self) -> str: ...
    async def resume(self) -> None: ...
    async def reset(self) -> None: ...
    async def program(self, segments: Sequence[Segment], progress: SegmentProgress) -> str:
        """Write every segment (flash through the probe's flash path, RAM with memory writes), read
        each back and compare; one call, so no other call runs in between. Returns how."""
        ...

    async def close(self) -> None: ...


class GdbProbe:
    """A target behind a GDB server at host:port, or behind a QEMU the probe starts itself."""

    def __init__(
        self,
        address: str,
        *,
        timeout_s: float,
        flash_timeout_s: float,
        reset_command: str = "",
        qemu: QemuSTM32 | None = None,
    ) -> None:
        self.qemu = qemu
        self.address = address
        self.timeout_s = timeout_s
        self.flash_timeout_s = flash_timeout_s
        self.reset_command = reset_command
        self.description = "GDB remote (QEMU, started on first use)" if qemu else f"GDB remote at {address}"
        self._client: GdbRemoteClient | None = None
        self._lock = asyncio.Lock()

    async def _connected(self) -> GdbRemoteClient:
        if self._client is not None and self._client.connected:
            return self._client
        if self.qemu is not None:
            host, port = await self.qemu.start()
            self.description = f"GDB remote at {host}:{port} (QEMU, started by the daemon)"
        else:
            host, _, port_text = self.address.rpartition(":")
            port = int(port_text)
        client = GdbRemoteClient(host, port)
        await client.connect()
        self._client = client
        return client

    async def _run(self, fn: Callable[[GdbRemoteClient], Awaitable[T]], timeout_s: float | None = None) -> T:
        limit = timeout_s or self.timeout_s
        try:
            async with asyncio.timeout(limit):
                await self._lock.acquire()
        except TimeoutError:
            raise BusTimeout(f"the debug target is busy with another call for over {limit:g} s") from None
        try:
            # Starting QEMU and connecting have their own bounds (QEMU_START_TIMEOUT_S, the op timeout).
            async with asyncio.timeout(QEMU_START_TIMEOUT_S + self.timeout_s):
                client = await self._connected()
            async with asyncio.timeout(limit):
                return await fn(client)
        except TimeoutError:
            # The link is in an unknown state mid-exchange: drop it so the next call starts clean.
            if self._client is not None:
                await self._client.close()
                self._client = None
            raise BusTimeout(f"the debug target did not answer within {limit:g} s") from None
        finally:
            self._lock.release()

    async def read_memory(self, address: int, length: int) -> bytes:
        return await self._run(lambda c: c.read_memory(address, length))

    async def write_memory(self, address: int, data: bytes) -> None:
        await self._run(lambda c: c.write_memory(address, data))

    async def read_registers(self) -> dict[str, int]:
        return await self._run(lambda c: c.read_registers())

    async def state(self) -> str:
        return await self._run(_state)

    async def halt(self) -> str:
        return await self._run(_halt)

    async def resume(self) -> None:
        await self._run(lambda c: c.resume())

    async def reset(self) -> None:
        async def reset(c: GdbRemoteClient) -> None:
            await c.halt()
            if self.reset_command:
                await c.monitor(self.reset_command)
            else:
                # Vendor neutral: ask the core for a system reset through AIRCR.
                await c.write_memory(AIRCR, AIRCR_SYSRESETREQ.to_bytes(4, "little"))

        await self._run(reset)

    async def program(self, segments: Sequence[Segment], progress: SegmentProgress) -> str:
        async def program(c: GdbRemoteClient) -> str:
            await c.halt()
            methods: list[str] = []
            for index, segment in enumerate(segments):
                # The client takes the stub's flash path inside its memory map's flash regions and
                # plain memory writes elsewhere (RAM, or QEMU's debug-writable flash); both verify.
                method = await c.flash(
                    segment.address, segment.data, lambda p, d, t, i=index: progress(i, p, d, t)
                )
                if method not in methods:
                    methods.append(method)
            return "; ".join(methods)

        return await self._run(program, self.flash_timeout_s)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self.qemu is not None:
            await self.qemu.stop()


async def _state(c: GdbRemoteClient) -> str:
    return "running" if c.running else "halted"


async def _halt(c: GdbRemoteClient) -> str:
    reply = await c.halt()
    return _stop_words(reply)


def _stop_words(reply: bytes) -> str:
    if reply[:1] in (b"T", b"S"):
        signal = int(reply[1:3], 16)
        return {2: "halted (interrupted)", 5: "halted (breakpoint or trap)", 0: "halted"}.get(
            signal, f"halted (signal {signal})"
        )
    if reply[:1] == b"W":
        return "the target exited"
    return f"halted ({reply[:20].decode(errors='replace')})"


class PyocdProbe:
    """A target through pyocd and a USB debug probe."""

    def __init__(self, target: str, probe_id: str, *, timeout_s: float, flash_timeout_s: float) -> None:
        self.target_type = target
        self.probe_id = probe_id
        self.description = f"pyocd, target {target}" + (f", probe {probe_id}" if probe_id else "")
        self._session: Any = None
        self.flash_timeout_s = flash_timeout_s
        # pyocd's calls block on USB: one worker thread, one lock, one deadline per call.
        self._gate: BusGate[PyocdProbe] = BusGate(
            self, label="debug probe", timeout_s=timeout_s, threaded=True, owns_driver=False
        )

    def _target(self) -> Any:
        if self._session is None:
            try:
                from pyocd.core.helpers import ConnectHelper
            except ImportError:
                raise missing_library("pyocd", "probe") from None
            try:
                # blocking=False: with no probe attached this returns None instead of waiting forever.
                session = ConnectHelper.session_with_chosen_probe(
                    blocking=False,
                    unique_id=self.probe_id or None,
                    target_override=self.target_type,
                    auto_open=False,
                )
            except Exception as e:
                raise DeviceUnavailable(f"pyocd could not choose a debug probe: {e}") from None
            if session is None:
                which = f" with id {self.probe_id!r}" if self.probe_id else ""
                raise DeviceUnavailable(f"no debug probe{which} is attached (pyocd found none)")
            try:
                session.open()
            except Exception as e:
                raise DeviceUnavailable(f"cannot open the debug probe: {e}") from None
            self._session = session
        return self._session.board.target

    def _call(self, what: str, fn: Callable[[Any], T]) -> T:
        target = self._target()
        try:
            return fn(target)
        except BackendError:
            raise
        except Exception as e:  # pyocd's own exception family (TransferFaultError, ProbeError...)
            raise DeviceReplyError(f"{what}: {type(e).__name__}: {e}") from None

    async def _run(self, what: str, fn: Callable[[Any], T], timeout_s: float | None = None) -> T:
        return await self._gate.run(PyocdProbe._call, what, fn, timeout_s=timeout_s)

    async def read_memory(self, address: int, length: int) -> bytes:
        return bytes(
            await self._run(
                f"cannot read {length} bytes at 0x{address:08x}",
                lambda t: t.read_memory_block8(address, length),
            )
        )

    async def write_memory(self, address: int, data: bytes) -> None:
        await self._run(
            f"cannot write {len(data)} bytes at 0x{address:08x}",
            lambda t: t.write_memory_block8(address, list(data)),
        )

    async def read_registers(self) -> dict[str, int]:
        def read(t: Any) -> dict[str, int]:
            return {name: int(t.read_core_register(name)) for name in CORE_REGISTERS}

        return await self._run("cannot read the core registers", read)

    async def state(self) -> str:
        return await self._run("cannot read the target state", lambda t: str(t.get_state().name).lower())

    async def halt(self) -> str:
        await self._run("cannot halt the target", lambda t: t.halt())
        return "halted"

    async def resume(self) -> None:
        await self._run("cannot resume the target", lambda t: t.resume())

    async def reset(self) -> None:
        await self._run("cannot reset the target", lambda t: t.reset_and_halt())

    async def program(self, segments: Sequence[Segment], progress: SegmentProgress) -> str:
        loop = asyncio.get_running_loop()

        def report(index: int, phase: str, done: int, total: int) -> None:
            # pyocd runs on the probe's worker thread; the caller's sink lives on the event loop.
            loop.call_soon_threadsafe(progress, index, phase, done, total)

        def program(target: Any) -> str:
            from pyocd.flash.loader import FlashLoader

            target.halt()  # the running firmware must not fight the writes (pyocd's loader halts too)
            flash, ram = [], []
            for index, segment in enumerate(segments):
                region = target.memory_map.get_region_for_address(segment.address)
                (flash if region is not None and region.is_flash else ram).append((index, segment))
            for index, segment in ram:
                target.write_memory_block8(segment.address, list(segment.data))
                report(index, "write", len(segment.data), len(segment.data))
            if flash:
                # pyocd's own programmer: its flash algorithm, erasing only the sectors it must.
                loader = FlashLoader(self._session, progress=self._write_progress(flash, report))
                for _, segment in flash:
                    loader.add_data(segment.address, list(segment.data))
                loader.commit()
                for index, segment in flash:
                    report(index, "write", len(segment.data), len(segment.data))
            for index, segment in enumerate(segments):
                for at in range(0, len(segment.data), VERIFY_STEP):
                    expected = segment.data[at : at + VERIFY_STEP]
                    actual = bytes(target.read_memory_block8(segment.address + at, len(expected)))
                    if actual != expected:
                        bad = next(j for j in range(len(expected)) if actual[j] != expected[j])
                        raise DeviceReplyError(f"verify failed at 0x{segment.address + at + bad:08x}")
                    report(index, "verify", at + len(expected), len(segment.data))
            how = [*(["pyocd flash algorithm"] if flash else []), *(["memory writes"] if ram else [])]
            return ", ".join(how) + ", verified"

        return await self._run("flashing failed", program, self.flash_timeout_s)

    @staticmethod
    def _write_progress(
        flash: list[tuple[int, Segment]], progress: SegmentProgress
    ) -> Callable[[float], None]:
        """pyocd reports one fraction for the whole commit: spread it over the flash segments."""
        total = sum(len(s.data) for _, s in flash)

        def report(fraction: float) -> None:
            left = int(fraction * total)
            for index, segment in flash:
                part = min(left, len(segment.data))
                progress(index, "write", part, len(segment.data))
                left -= part

        return report

    async def close(self) -> None:
        session, self._session = self._session, None
        self._gate.close()
        if session is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(session.close)


def sim_probe(state_dir: Path, machine: str, *, timeout_s: float, flash_timeout_s: float) -> GdbProbe:
    """The sim board's STM32: QEMU started on first use, reset through QEMU's own monitor."""
    return GdbProbe(
        "qemu",
        timeout_s=timeout_s,
        flash_timeout_s=flash_timeout_s,
        reset_command="system_reset",
        qemu=QemuSTM32(state_dir, machine),
    )
