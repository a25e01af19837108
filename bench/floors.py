"""What the start-up benchmarks run beside the daemon: its floors and its first step.

Standard library only: bench_arm.py imports it inside the emulated system too.
"""

from __future__ import annotations

# The standard library any such daemon needs: READY=1 is measured against this.
FLOOR_IMPORTS = "import asyncio, sqlite3, ssl, json, socket, logging"
# The same with the MQTT client the channel needs (shown beside MQTT on; the target is against the above).
MQTT_FLOOR_IMPORTS = FLOOR_IMPORTS + ", aiomqtt"
# The daemon's first step, as `edgeclaw run` takes it (argv[1]: the config file): the config read and
# checked and the board profile loaded. A start must finish it before READY=1, since a broken config or
# an unknown profile refuses to start.
CONFIG_STEP = (
    FLOOR_IMPORTS
    + "; import sys; from edgeclaw import board; from edgeclaw.config.loader import load_config; "
    "board.resolve(load_config(sys.argv[1]).board)"
)
