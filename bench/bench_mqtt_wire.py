"""What the checked JSON parser of the MQTT channel costs, against plain json.loads on the same payloads
in the same run: a typical tool call, big strings, many numbers, many small objects, escaped text.

    .venv/bin/python bench/bench_mqtt_wire.py

`load_json` refuses deep nesting, long or non-finite numbers and lone surrogates; the figures show what
that costs per request on this machine. No pass/fail: compare the two columns.
"""

from __future__ import annotations

import json
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgeclaw.channels.mqtt.protocol import load_json


def call(args: object) -> bytes:
    return json.dumps({"id": "req-000123", "tool": "t", "args": args, "session": "ops", "ts": 1.5}).encode()


PAYLOADS = {
    "typical i2c read": call({"action": "read", "bus": 1, "address": 72, "register": 0, "length": 2}),
    "60 KB string": call({"path": "a.txt", "content": "x" * 60_000}),
    "2000 integers": call({"data": list(range(2000))}),
    "500 floats": call({"samples": [i / 7 for i in range(500)]}),
    "500 small objects": call({"rows": [{"a": i, "b": [i]} for i in range(500)]}),
    "30 KB escaped non-ASCII": call({"content": "Grüße " * 5000}),
}


def per_call_us(fn, payload: bytes) -> float:
    number = max(50, int(200_000 / max(len(payload), 1)))
    best = min(timeit.repeat(lambda: fn(payload), number=number, repeat=5))
    return best / number * 1e6


def main() -> None:
    print(f"{'payload':<26} {'bytes':>7} {'json.loads':>12} {'load_json':>12} {'ratio':>6}")
    for name, payload in PAYLOADS.items():
        plain = per_call_us(json.loads, payload)
        checked = per_call_us(lambda p: load_json(p, "bench"), payload)
        print(f"{name:<26} {len(payload):>7} {plain:>10.1f}us {checked:>10.1f}us {checked / plain:>6.2f}")


if __name__ == "__main__":
    main()
