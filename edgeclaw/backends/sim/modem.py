"""The sim board's serial modem: a Hayes AT command set answered behind a pty pair.

The host opens the pty's slave like any serial port (the `serial` tool's
pyserial link); the modem answers on the master side from a thread, the way
a cellular or radio module on a UART does: commands end with CR (LF is
accepted too), the characters are echoed while echo is on (`ATE1`, the
power-up state; `ATE0` turns it off), and every answer is framed by CR LF
and ends with `OK` or `ERROR`.

| command | answer |
|---|---|
| `AT` | `OK` |
| `ATI` | the identification line, `OK` |
| `ATE0` / `ATE1` | echo off / on, `OK` |
| `AT+CSQ` | `+CSQ: <rssi>,99` (signal quality; `rssi` settable), `OK` |
| `AT+GMR` | the firmware revision, `OK` |
| anything else | `ERROR` |
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import tty

IDENTITY = "edgeclaw sim modem"
REVISION = "1.0"


class SimModem:
    """A pty pair with the modem on its master side; `port` is the slave's path."""

    def __init__(self, rssi: int = 20) -> None:
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        self.port = os.ttyname(self.slave)
        self.rssi = rssi
        self.echo = True
        self._line = bytearray()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="sim-modem", daemon=True)
        self._thread.start()

    def answer(self, command: str) -> str:
        """The reply to one command line, framed as the modem sends it."""
        c = command.strip().upper()
        if c == "AT":
            body = []
        elif c == "ATI":
            body = [IDENTITY]
        elif c in ("ATE0", "ATE1"):
            self.echo = c == "ATE1"
            body = []
        elif c == "AT+CSQ":
            body = [f"+CSQ: {self.rssi},99"]
        elif c == "AT+GMR":
            body = [REVISION]
        else:
            return "\r\nERROR\r\n"
        return "".join(f"\r\n{line}\r\n" for line in body) + "\r\nOK\r\n"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self.master], [], [], 0.1)
                if not ready:
                    continue
                chunk = os.read(self.master, 1024)
            except OSError:
                return
            if self.echo:
                self._write(chunk)
            for byte in chunk:
                if byte in (0x0D, 0x0A):
                    if self._line:
                        command, self._line = self._line.decode("ascii", errors="replace"), bytearray()
                        self._write(self.answer(command).encode("ascii"))
                elif len(self._line) < 256:  # a modem's command buffer is small; the rest is dropped
                    self._line.append(byte)

    def _write(self, data: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(self.master, data)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)


# The sim board's serial parts by the name a `sim:NAME` grant gives.
SIM_SERIAL_PARTS = {"modem": SimModem}
