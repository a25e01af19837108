"""What `sensor read` prints on the sim board, as a technician would run it: the reference every
announcement of the board's sensors (Home Assistant entities, Sparkplug metrics) is held to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass


@dataclass(frozen=True)
class Printed:
    device: str
    quantity: str
    label: str
    unit: str
    value: float


def sensor_read_on_the_sim_board() -> list[Printed]:
    """Every value of every declared device, from `edgeclaw tool call sensor '{"action": "read"}'`."""
    with tempfile.TemporaryDirectory() as state:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EDGECLAW_")}
        env["EDGECLAW_STATE_DIR"] = state
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "edgeclaw",
                "tool",
                "call",
                "sensor",
                '{"action": "read"}',
                "--board",
                "sim",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=True,
        )
    readings = json.loads(done.stdout.strip().splitlines()[-1])["data"]["readings"]
    return [
        Printed(r["device"], v["quantity"], v.get("label", ""), v["unit"], v["value"])
        for r in readings
        for v in r["values"]
    ]
