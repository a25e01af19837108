"""Media benchmark, each figure beside its floor measured in the same run:

  * `tts` with espeak-ng speaking 200 characters through the registry (the file written to the
    workspace included) vs a bare `espeak-ng --stdout` of the same text to /dev/null, the fastest
    of several runs each (target: <= 1.2x);
  * the peak RSS of `image info` on a 12-megapixel JPEG (written by Pillow) over the idle process
    with every module loaded (target: <= 10 MB: the headers are read, the picture never decoded),
    in a fresh process, from VmHWM after resetting it.

Run: python bench/bench_media.py [--runs N]
Exit status 1 when a target is missed, 2 when espeak-ng or Pillow is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TTS_TARGET_RATIO = 1.2
RSS_TARGET_MB = 10.0
TEXT = (
    "The greenhouse fan is on, the soil is dry in bed two, and the water tank is at forty percent. "
    "Watering starts at six in the morning and runs for ten minutes unless rain is forecast today."
)[:200]

_RSS_PROBE = """
import asyncio, sys, tempfile
from pathlib import Path
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.tools.base import ToolContext

def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])

async def main():
    state = tempfile.mkdtemp()
    config = config_from_dict({"board": "sim", "state_dir": state}, "bench")
    runtime = build_runtime(config, require_secrets=False)
    Path(runtime.workspace, "big.jpg").write_bytes(Path(sys.argv[1]).read_bytes())
    ctx = ToolContext(channel="cli")
    # Every module the call needs loaded first, so the figure is the call's own memory.
    await runtime.registry.execute("image", {"action": "info", "path": "gone.jpg"}, ctx)
    idle = kib("VmRSS:")
    open("/proc/self/clear_refs", "w").write("5")  # reset VmHWM to the current RSS
    out = await runtime.registry.execute("image", {"action": "info", "path": "big.jpg"}, ctx)
    assert out.ok, out.for_llm
    print(kib("VmHWM:") - idle, out.data["width"], out.data["height"])
    await runtime.aclose()

asyncio.run(main())
"""


async def tts_seconds(runs: int) -> float:
    from edgeclaw.config.loader import config_from_dict
    from edgeclaw.daemon.runtime import build_runtime
    from edgeclaw.tools.base import ToolContext

    state = tempfile.mkdtemp()
    runtime = build_runtime(
        config_from_dict({"board": "sim", "state_dir": state}, "bench"), require_secrets=False
    )
    ctx = ToolContext(channel="cli")
    best = float("inf")
    try:
        for i in range(runs):
            started = time.perf_counter()
            out = await runtime.registry.execute("tts", {"text": TEXT, "path": f"t{i}.wav"}, ctx)
            best = min(best, time.perf_counter() - started)
            assert out.ok, out.for_llm
    finally:
        await runtime.aclose()
    return best


def bare_espeak_seconds(runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(
            ["espeak-ng", "--stdout", "-v", "en"], input=TEXT.encode(), stdout=subprocess.DEVNULL, check=True
        )
        best = min(best, time.perf_counter() - started)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    if shutil.which("espeak-ng") is None:
        print("espeak-ng is not installed (scripts/bootstrap --system)", file=sys.stderr)
        return 2
    try:
        from PIL import Image
    except ImportError:
        print("Pillow is not installed (pip install -e '.[dev]')", file=sys.stderr)
        return 2
    failed = False
    bare = bare_espeak_seconds(args.runs)
    ours = asyncio.run(tts_seconds(args.runs))
    ratio = ours / bare
    print(
        f"tts espeak 200 chars: {ours * 1000:.1f} ms vs bare espeak-ng {bare * 1000:.1f} ms = {ratio:.2f}x "
        f"(target <= {TTS_TARGET_RATIO}x)"
    )
    failed |= ratio > TTS_TARGET_RATIO

    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.jpg"
        Image.new("RGB", (4000, 3000), (90, 140, 60)).save(big, "JPEG", quality=90)
        probe = subprocess.run(
            [sys.executable, "-c", _RSS_PROBE, str(big)], capture_output=True, text=True, check=True, cwd=ROOT
        )
        grown_kib, width, height = (int(x) for x in probe.stdout.split())
    grown_mb = grown_kib / 1024
    print(
        f"image info of a {width}x{height} JPEG ({big.name}): peak RSS +{grown_mb:.2f} MB over idle "
        f"(target <= {RSS_TARGET_MB} MB)"
    )
    failed |= grown_mb > RSS_TARGET_MB
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
