"""The clocks a scheduler needs: wall time, a step watcher, and whether the clock is synchronised.

Timers run on the event loop's monotonic clock, which never jumps. Wall time
(what cron slots and one-shot times are written in) can: a board without a
real-time clock boots with a stale time and jumps at NTP sync, and an
operator may set it. Two things make that safe without polling:

- `StepWatcher` asks the kernel to tell us: a CLOCK_REALTIME timerfd armed
  with TFD_TIMER_CANCEL_ON_SET becomes readable (and its read fails with
  ECANCELED) whenever the clock is set discontinuously, suspend and resume
  included. Where there is no timerfd the scheduler still compares wall and
  monotonic time at every wake-up.
- `ClockSync` says whether the kernel considers the clock synchronised
  (adjtimex(2): TIME_ERROR means "unsynchronised", which is what NTP clients
  clear when they have set it), or, where that cannot be asked (a seccomp
  filter refusing adjtimex), what `timedatectl` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import shutil
import time
from collections.abc import Callable
from typing import Literal

log = logging.getLogger("edgeclaw.clock")

SyncMode = Literal["auto", "kernel", "timedatectl", "off"]

# <sys/timex.h>
TIME_ERROR = 5
# <sys/timerfd.h>
CLOCK_REALTIME = 0
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC
TFD_TIMER_ABSTIME = 1
TFD_TIMER_CANCEL_ON_SET = 2


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    """The C library, as the interpreter already has it loaded (dlopen of the program itself).
    `ctypes.util.find_library("c")` would run ldconfig for the same answer: some 20 ms per start."""
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


class StepWatcher:
    """Calls `on_step` when the wall clock is set (a step, not a slew); no CPU between steps."""

    def __init__(self, on_step: Callable[[], None]) -> None:
        self.on_step = on_step
        self._fd = -1
        self._libc = _libc()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def active(self) -> bool:
        return self._fd >= 0

    def start(self) -> bool:
        """Arm the watcher; False where the kernel offers no timerfd (then wake-ups compare clocks)."""
        libc = self._libc
        if libc is None or not hasattr(libc, "timerfd_create"):
            return False
        fd = libc.timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            log.info("no timerfd (%s): clock steps are noticed at wake-ups", os.strerror(ctypes.get_errno()))
            return False
        self._fd = fd
        if not self._arm():
            os.close(fd)
            self._fd = -1
            return False
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._readable)
        return True

    def _arm(self) -> bool:
        assert self._libc is not None
        # Far in the future (and within a 32-bit time_t), so it only ever fires by being cancelled.
        far = int(time.time()) + 50 * 365 * 86400
        if ctypes.sizeof(ctypes.c_long) == 4:
            far = min(far, 2**31 - 1)
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(far, 0))
        flags = TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET
        if self._libc.timerfd_settime(self._fd, flags, ctypes.byref(spec), None) != 0:
            log.info("cannot arm the clock-step timerfd: %s", os.strerror(ctypes.get_errno()))
            return False
        return True

    def _readable(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            return
        except OSError as e:
            if e.errno != errno.ECANCELED:
                log.warning("clock-step watcher failed: %s", e)
                return
        # ECANCELED: the clock was set. The timer must be armed again to hear the next step.
        self._arm()
        self.on_step()

    def stop(self) -> None:
        if self._fd >= 0:
            if self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1


def kernel_synchronised() -> bool | None:
    """adjtimex(2) with no change asked: True/False, or None when it cannot be asked."""
    libc = _libc()
    if libc is None or not hasattr(libc, "adjtimex"):
        return None
    buf = ctypes.create_string_buffer(512)  # struct timex, zeroed: modes = 0 reads only
    state = libc.adjtimex(buf)
    if state < 0:
        return None  # EPERM under a seccomp filter (systemd's ProtectClock=), say
    return state != TIME_ERROR


async def timedatectl_synchronised(timeout_s: float = 5.0) -> bool | None:
    """`timedatectl show -p NTPSynchronized --value`; None when it is not there or gives no answer."""
    exe = shutil.which("timedatectl")
    if exe is None:
        return None
    try:
        proc = await asyncio.create_subprocess_exec(
            exe,
            "show",
            "-p",
            "NTPSynchronized",
            "--value",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError:
        return None
    try:
        async with asyncio.timeout(timeout_s):
            out, _ = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return None
    answer = out.decode(errors="replace").strip().lower()
    if proc.returncode != 0 or answer not in ("yes", "no"):
        return None
    return answer == "yes"


class ClockSync:
    """Whether the wall clock may be trusted yet, by the configured source.

    `auto`: the kernel's status when it can be read, else timedatectl, else the clock is trusted
    (with a log line saying so). `off`: always trusted.
    """

    def __init__(self, mode: SyncMode = "auto") -> None:
        self.mode = mode
        self.source = mode
        self._told = False

    async def synchronised(self) -> bool:
        if self.mode == "off":
            return True
        if self.mode in ("auto", "kernel"):
            state = kernel_synchronised()
            if state is not None:
                self.source = "kernel"
                return state
            if self.mode == "kernel":
                self._say("the kernel's time status cannot be read here; the clock is trusted as it is")
                return True
        state = await timedatectl_synchronised()
        if state is not None:
            self.source = "timedatectl"
            return state
        self._say("neither the kernel's time status nor timedatectl can be asked; the clock is trusted")
        self.source = "none"
        return True

    def _say(self, text: str) -> None:
        if not self._told:
            self._told = True
            log.warning("clock sync: %s", text)
