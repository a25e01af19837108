"""Processes the benchmarks start: their resident memory, and stopping them as systemd does.

Standard library only: bench_arm.py imports it inside the emulated system too.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MiB, from /proc (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no VmRSS for pid {pid}")


def stop(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM, `grace_s` to exit, then SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
