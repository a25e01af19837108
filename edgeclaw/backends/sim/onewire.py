"""The sim board's 1-Wire bus, as the kernel's w1 driver shows it in sysfs.

A real board lists its 1-Wire devices under /sys/bus/w1/devices: a directory
per device named by its id (`28-00000a1b2c3d`: family code, then the 48-bit
serial number in hex) and one per bus master (`w1_bus_master1`, whose
`w1_master_slaves` lists the ids it found). A DS18B20's `w1_slave` file is
what the w1_therm driver prints after a conversion (drivers/w1/slaves/w1_therm.c,
`w1_slave_show`): the nine scratchpad bytes read from the part, the CRC it
computed over the first eight and whether that matched the ninth, then the
last scratchpad that passed (zeros until one has) and `t=` in millidegrees,
worked out from the bytes just read:

    72 01 4b 46 7f ff 0e 10 57 : crc=57 YES
    72 01 4b 46 7f ff 0e 10 57 t=23125

The sim writes that tree in its state directory, so the driver reads files
exactly as it does on a board, and keeps each device's file up to date as its
model changes. A device can also fail the ways a real bus does: a bit flipped
on the wire (`crc=.. NO`), no answer (the kernel gives an empty read), gone
from the bus (its directory disappears) or a read that never returns (the
file becomes a FIFO nobody writes).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Literal

from edgeclaw.backends.sim.ds18b20 import DS18B20

Fault = Literal["none", "crc", "no_answer", "absent", "hang"]
MASTER = "w1_bus_master1"


def therm_millidegrees(scratchpad: bytes) -> int:
    """w1_therm's `t=` for a DS18B20: the signed 16-bit count times 1000 / 16, truncated as in C."""
    count = int.from_bytes(scratchpad[0:2], "little", signed=True)
    product = count * 1000
    return product // 16 if product >= 0 else -(-product // 16)


def w1_slave_text(scratchpad: bytes, last_good: bytes, crc: int) -> str:
    """The two lines `w1_slave` holds after a read of `scratchpad` (see the module docstring)."""
    verdict = crc == scratchpad[8]
    shown_after = scratchpad if verdict else last_good
    line1 = " ".join(f"{b:02x}" for b in scratchpad) + f" : crc={crc:02x} {'YES' if verdict else 'NO'}\n"
    line2 = " ".join(f"{b:02x}" for b in shown_after) + f" t={therm_millidegrees(scratchpad)}\n"
    return line1 + line2


class SimOneWireBus:
    """A w1 sysfs tree under `root` with the given devices on one bus master."""

    def __init__(self, root: Path, devices: list[DS18B20]) -> None:
        self.root = root
        self.devices = {d.w1_id: d for d in devices}
        self.faults: dict[str, Fault] = {d.w1_id: "none" for d in devices}
        self._last_good: dict[str, bytes] = {d.w1_id: bytes(9) for d in devices}
        root.mkdir(parents=True, exist_ok=True)
        for d in devices:
            d.on_change = self.refresh
        self.refresh()

    def set_fault(self, w1_id: str, fault: Fault) -> None:
        self.faults[w1_id] = fault
        self.refresh()

    def refresh(self) -> None:
        """Write every device's files from its model (called whenever a model changes)."""
        present = [i for i, f in self.faults.items() if f != "absent"]
        master = self.root / MASTER
        master.mkdir(exist_ok=True)
        _write(master / "w1_master_slaves", "".join(f"{i}\n" for i in present) or "not found.\n")
        _write(master / "w1_master_slave_count", f"{len(present)}\n")
        for w1_id, device in self.devices.items():
            self._write_device(w1_id, device, self.faults[w1_id])

    def _write_device(self, w1_id: str, device: DS18B20, fault: Fault) -> None:
        folder = self.root / w1_id
        if fault == "absent":
            shutil.rmtree(folder, ignore_errors=True)
            return
        folder.mkdir(exist_ok=True)
        _write(folder / "name", f"{w1_id}\n")
        slave = folder / "w1_slave"
        if fault == "hang":
            with contextlib.suppress(FileNotFoundError):
                slave.unlink()
            os.mkfifo(slave, 0o644)  # opening it for reading blocks until a writer comes
            return
        if fault == "no_answer":
            _write(slave, "")  # no presence pulse: the kernel returns an empty read
            return
        scratchpad = device.scratchpad()
        crc = device.crc_of(scratchpad[:8])
        if fault == "crc":
            scratchpad = bytes((scratchpad[0] ^ 0x04, *scratchpad[1:]))  # one bit flipped on the wire
            crc = device.crc_of(scratchpad[:8])
        else:
            self._last_good[w1_id] = scratchpad
        _write(slave, w1_slave_text(scratchpad, self._last_good[w1_id], crc))

    def release_hang(self, w1_id: str) -> None:
        """Let a reader stuck on a hung device's FIFO go (it reads nothing)."""
        _release_fifo(self.root / w1_id / "w1_slave")


def _write(path: Path, text: str) -> None:
    """Replace a file whole (rename), so a reader never sees half of it."""
    if path.is_fifo():
        _release_fifo(path)  # a reader stuck on it would otherwise wait on an unlinked FIFO for good
        path.unlink()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _release_fifo(path: Path) -> None:
    """Open a FIFO for writing and close it: a reader blocked opening it gets an empty read."""
    with contextlib.suppress(OSError):  # no reader waiting (ENXIO), or no FIFO there any more
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
