"""What every hardware backend shares: its error family and the gate each bus operation passes.

A backend is a small synchronous driver (smbus2, spidev, a sim device model)
wrapped in a `BusGate`: one asyncio lock per bus, so two sessions never
interleave transactions on the same wires, and one deadline per operation,
so a wedged bus cannot hang a tool call. Real drivers block in the kernel, so
their calls run on a single worker thread owned by the bus (ordering is kept,
and a hung ioctl holds up only its own bus); sim drivers answer in
microseconds and run inline, where a thread hop would cost more than the work.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

from edgeclaw.errors import BackendError

D = TypeVar("D")
R = TypeVar("R")


class BusTimeout(BackendError):
    """An operation did not finish within its deadline."""


class DeviceUnavailable(BackendError):
    """The bus, device file, library or peer needed for the operation is not there."""


class DeviceReplyError(BackendError):
    """The device at the far end of a link (a debug target, the ESP32 bridge) answered, with an error
    or with something that is not a valid answer: the link works, the device said no."""


def missing_library(module: str, extra: str, distro_hint: str = "") -> DeviceUnavailable:
    """The error for an optional library that is not installed, saying how to get it."""
    hint = f" or {distro_hint}" if distro_hint else ""
    return DeviceUnavailable(
        f"the Python module {module!r} is not installed (pip install 'edgeclaw[{extra}]'{hint})"
    )


# The one errno -> words table every backend words an OS error with (I2C's sentences say more, since
# on that bus an errno also tells who did not answer: `i2c.describe_i2c_error`).
ERRNO_WORDS: dict[int, str] = {
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "no such device",
    errno.ENODEV: "no such device",
    errno.EBUSY: "in use by a kernel driver",
    errno.ETIMEDOUT: "timed out",
    errno.EREMOTEIO: "no acknowledgement",
    errno.ENXIO: "no acknowledgement",
    errno.EIO: "input/output error",
    errno.EOPNOTSUPP: "not supported by the adapter",
    errno.EINVAL: "rejected as invalid by the driver",
}


def os_error_words(exc: OSError) -> str:
    """A short plain-words description of an errno, for messages built by the caller."""
    return ERRNO_WORDS.get(exc.errno or 0, exc.strerror or str(exc))


def errno_of(exc: BaseException) -> int | None:
    """The OS error number an exception carries (an `OSError`, or a library's error wrapping one)."""
    code = getattr(exc, "errno", None)
    return code if isinstance(code, int) else None


def open_error(what: str, path: str, e: OSError, *, missing: str, denied: str) -> DeviceUnavailable:
    """Opening `path` (the device file behind `what`) failed: in plain words, with what to do."""
    if e.errno in (errno.ENOENT, errno.ENODEV):
        return DeviceUnavailable(f"{what} does not exist ({path} is missing; {missing})", errno=e.errno)
    if e.errno in (errno.EACCES, errno.EPERM):
        return DeviceUnavailable(f"permission denied opening {path} for {what} ({denied})", errno=e.errno)
    return DeviceUnavailable(f"cannot open {path} for {what}: {os_error_words(e)}", errno=e.errno)


class BusGate(Generic[D]):
    """Serialises and bounds every operation on one bus (or one pin, or one link).

    `run(fn, *args)` calls `fn(driver, *args)` holding the bus lock, under the
    operation deadline, inline or on the bus's own worker thread. `OSError`s
    from the driver are turned into `BackendError`s by `describe_error`, which
    each backend supplies so messages name the bus and address in plain words.
    """

    def __init__(
        self,
        driver: D,
        *,
        label: str,
        timeout_s: float,
        threaded: bool,
        describe_error: Callable[[OSError, tuple[object, ...]], BackendError] | None = None,
        owns_driver: bool = True,
    ) -> None:
        self.driver = driver
        self.label = label
        self.timeout_s = timeout_s
        self.lock = asyncio.Lock()
        self._describe = describe_error
        self._owns_driver = owns_driver  # False: the driver closes itself (it owns the gate)
        self._executor = (
            concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"bus-{label}")
            if threaded
            else None
        )

    async def run(
        self, fn: Callable[..., R], *args: object, timeout_s: float | None = None, hold_s: float = 0
    ) -> R:
        """`fn(driver, *args)` holding the lock, under the deadline (waiting for the lock counts).

        `timeout_s` overrides the bus's deadline for one long operation (flashing a target);
        `hold_s` keeps the lock that long after `fn` returns (a device's settling time).
        """
        limit = timeout_s or self.timeout_s
        try:
            async with asyncio.timeout(limit + hold_s):
                async with self.lock:
                    result = await self._call(fn, args)
                    if hold_s > 0:
                        await asyncio.sleep(hold_s)
                    return result
        except TimeoutError:
            raise BusTimeout(f"{self.label}: no answer within {limit:g} s") from None

    @asynccontextmanager
    async def held(self, timeout_s: float | None = None) -> AsyncIterator[None]:
        """The bus for several steps at once (a sensor's command, its conversion time, the read),
        so no other caller's transaction lands between them: the lock held throughout, waiting
        for it and every step under one deadline. Each step inside goes through `step`."""
        limit = timeout_s or self.timeout_s
        try:
            async with asyncio.timeout(limit):
                async with self.lock:
                    yield
        except TimeoutError:
            raise BusTimeout(f"{self.label}: no answer within {limit:g} s") from None

    async def step(self, fn: Callable[..., R], *args: object) -> R:
        """One step inside `held()`, whose deadline bounds it (a deadline of its own would be redundant)."""
        return await self._call(fn, args)

    async def call(self, fn: Callable[..., R], *args: object) -> R:
        """Like `run`, for a caller already holding `lock` across several steps (a GPIO pulse)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._call(fn, args)
        except TimeoutError:
            raise BusTimeout(f"{self.label}: no answer within {self.timeout_s:g} s") from None

    async def _call(self, fn: Callable[..., R], args: tuple[object, ...]) -> R:
        try:
            if self._executor is None:
                return fn(self.driver, *args)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, fn, self.driver, *args)
        except OSError as e:
            if self._describe is not None:
                raise self._describe(e, args) from None
            raise BackendError(f"{self.label}: {os_error_words(e)}", errno=e.errno) from None

    def close(self) -> None:
        close = getattr(self.driver, "close", None) if self._owns_driver else None
        if self._executor is not None:
            # The worker may be stuck in the kernel; do not wait for it, just stop handing it work.
            self._executor.shutdown(wait=False, cancel_futures=True)
        if close is not None:
            close()
