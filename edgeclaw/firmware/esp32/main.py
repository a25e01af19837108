# MicroPython entry point of the edgeclaw ESP32 bridge: copy protocol.py, hal_machine.py and this
# file to the board (mpremote cp protocol.py hal_machine.py main.py :) and reset it.
#
# It serves the bridge protocol on the USB serial port (UART0), where the REPL would be: announce
# the boot, then answer one JSON line with one JSON line, forever. Ctrl-C still breaks into the REPL.

import sys

from hal_machine import MachineHal
from protocol import MAX_LINE, BridgeHandler, boot_event


def main():
    hal = MachineHal()
    handler = BridgeHandler(hal)
    out = sys.stdout.buffer if hasattr(sys.stdout, "buffer") else sys.stdout
    out.write(boot_event(hal))
    while True:
        line = sys.stdin.buffer.readline() if hasattr(sys.stdin, "buffer") else sys.stdin.readline()
        if isinstance(line, str):
            line = line.encode()
        if len(line) > MAX_LINE + 2 and not line.endswith(b"\n"):
            continue  # an overlong line is dropped rather than answered piecemeal
        reply = handler.handle_line(line)
        if reply is not None:
            out.write(reply)


main()
