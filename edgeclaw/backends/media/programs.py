"""Running a distribution's program for a media tool: input on stdin, a deadline, its own words on failure.

Speech (espeak-ng, piper, edge-tts), stills (rpicam-still, fswebcam, ffmpeg) and playing (aplay) all
run this way: the text reaches the program on its standard input, never its command line; a program
past its deadline is killed and waited for; a failure says the program's last line of stderr.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from edgeclaw.errors import BackendError


class ProgramFailed(BackendError):
    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


async def run_program(argv: list[str], stdin: bytes | None, timeout_s: float, what: str = "") -> bytes:
    """The program's standard output; raises ProgramFailed naming `what` (default: the program)."""
    what = what or Path(argv[0]).name
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise ProgramFailed(f"{what}: no result within {timeout_s:g} s", timed_out=True) from None
    if process.returncode:
        lines = err.decode("utf-8", "replace").strip().splitlines()
        raise ProgramFailed(f"{what} failed: {lines[-1] if lines else f'exit {process.returncode}'}")
    return out
