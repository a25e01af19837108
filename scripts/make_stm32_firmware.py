#!/usr/bin/env python3
"""Write the sim board's STM32 image (vector table + boot-counting reset handler) to a file.

The daemon writes the same 32 bytes into its state directory before starting
QEMU; this script is for running QEMU by hand:

    scripts/make_stm32_firmware.py /tmp/stm32.bin
    qemu-system-arm -M stm32vldiscovery -S -gdb tcp:127.0.0.1:3333 -kernel /tmp/stm32.bin -display none
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgeclaw.backends.qemu import firmware_image


def main() -> int:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} OUTPUT.bin", file=sys.stderr)
        return 2
    image = firmware_image()
    Path(sys.argv[1]).write_bytes(image)
    print(f"wrote {len(image)} bytes to {sys.argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
