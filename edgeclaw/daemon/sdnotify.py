"""systemd's notify protocol (sd_notify(3)) and a watchdog that vouches for the event loop.

systemd runs edgeclaw as ``Type=notify`` with ``WatchdogSec=``: the daemon says
``READY=1`` once it serves, keeps ``STATUS=`` current, says ``STOPPING=1`` on the
way out, and sends ``WATCHDOG=1`` often enough or gets killed and restarted.

The protocol is one AF_UNIX datagram of newline-separated ``KEY=VALUE`` lines to
``$NOTIFY_SOCKET``. We speak it ourselves rather than use the ``sdnotify``
package because that package swallows every error: a daemon whose READY or
watchdog pings silently vanish is hard to debug. Here a failed send is logged
(logger ``edgeclaw.sdnotify``) and reported as ``False`` but never raised: the
daemon must not die because its supervisor is unreachable.

`LoopWatchdog` pings only while the event loop is healthy. A ping from a
thread would prove nothing (threads keep running while the loop is wedged), so
it is an asyncio task: if the loop is blocked the task never runs and systemd's
timer expires, which is the point. It also measures how late its own sleep
woke up, so a loop that still turns but is badly starved stops feeding systemd
too, and it runs optional health checks registered by other parts of the daemon.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from types import TracebackType
from typing import Self

log = logging.getLogger("edgeclaw.sdnotify")

#: A health check: ``True`` = healthy; ``False`` or a string (the reason) = unhealthy.
HealthCheck = Callable[[], bool | str]


def _clean_line(text: str) -> str:
    """Make `text` safe as one field value: a newline would start a new KEY=VALUE line."""
    return " ".join(text.replace("\0", " ").splitlines())


def _check_field(field: str) -> None:
    key, sep, _ = field.partition("=")
    if not sep or not key:
        raise ValueError(f"sd_notify field must look like KEY=VALUE, got {field!r}")
    if "\n" in field or "\0" in field:
        raise ValueError(f"sd_notify field must not contain newlines or NUL bytes: {field!r}")


class SystemdNotifier:
    """Sends sd_notify messages to systemd; a disabled notifier (no socket) sends nothing.

    Build it with `from_env`. Every method that sends returns ``True`` when the
    datagram went out and ``False`` otherwise (disabled, or the send failed and
    was logged). Safe to call from several threads.
    """

    def __init__(self, address: str | None) -> None:
        """`address` is ``$NOTIFY_SOCKET``'s value: an absolute path or ``@abstract-name``; None disables."""
        if address is not None and not address.startswith(("/", "@")):
            # sd_notify(3) accepts only these two forms; a relative path would be
            # resolved against our working directory, which is never what systemd meant.
            raise ValueError(f"NOTIFY_SOCKET must be an absolute path or start with '@', got {address!r}")
        if address is not None and len(address) < 2:
            raise ValueError(f"NOTIFY_SOCKET names no socket: {address!r}")
        self._display = address
        # Abstract socket names are spelled with a leading '@' in the environment
        # but start with a NUL byte on the wire.
        self._address = None if address is None else ("\0" + address[1:] if address[0] == "@" else address)
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._last_status: str | None = None
        # Consecutive failures of the same kind are logged once at WARNING and then
        # at DEBUG: the watchdog sends every few seconds and would flood the journal.
        self._failure_kind: tuple[type[OSError], int | None] | None = None
        self._failures = 0

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] = os.environ, *, unset_environment: bool = False
    ) -> SystemdNotifier:
        """A notifier for ``$NOTIFY_SOCKET``; disabled when it is unset or unusable.

        `unset_environment` removes NOTIFY_SOCKET from `environ` (when it is
        mutable) so child processes, such as sandboxed shell commands, do not
        inherit a socket meant for the daemon alone.
        """
        address = environ.get("NOTIFY_SOCKET") or None
        if unset_environment and isinstance(environ, MutableMapping):
            environ.pop("NOTIFY_SOCKET", None)
        try:
            return cls(address)
        except ValueError as exc:
            log.error("sd_notify disabled: %s", exc)
            return cls(None)

    @property
    def enabled(self) -> bool:
        """Whether systemd asked for notifications at all."""
        return self._address is not None

    @property
    def address(self) -> str | None:
        """The socket as written in ``$NOTIFY_SOCKET`` (abstract names with '@'), or None."""
        return self._display

    @property
    def last_status(self) -> str | None:
        """The last text passed to `status` (or as a status to `ready`/`stopping`)."""
        return self._last_status

    def notify(self, *fields: str) -> bool:
        """Send one datagram of ``KEY=VALUE`` fields; False when disabled or the send failed.

        Malformed fields (no '=', embedded newlines) are a caller bug and raise
        ValueError even when disabled, so they show up in tests and development
        rather than only under systemd. Send errors are logged, never raised.
        """
        if not fields:
            raise ValueError("sd_notify needs at least one KEY=VALUE field")
        for field in fields:
            _check_field(field)
        if self._address is None:
            return False
        payload = "\n".join(fields).encode()
        with self._lock:
            try:
                if self._sock is None:
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    # Non-blocking: if systemd's queue is full we would rather lose one
                    # message (and log it) than stall the event loop that sends it.
                    sock.setblocking(False)
                    self._sock = sock
                self._sock.sendto(payload, self._address)
            except OSError as exc:
                self._record_failure(exc)
                return False
            self._record_success()
        return True

    def ready(self, status: str | None = None) -> bool:
        """``READY=1``: start-up finished (and again after a reload); optionally with a status."""
        if status is None:
            return self.notify("READY=1")
        self._last_status = _clean_line(status)
        return self.notify("READY=1", f"STATUS={self._last_status}")

    def status(self, text: str) -> bool:
        """``STATUS=text``, shown by ``systemctl status``; newlines become spaces."""
        self._last_status = _clean_line(text)
        return self.notify(f"STATUS={self._last_status}")

    def stopping(self, status: str | None = None) -> bool:
        """``STOPPING=1``: shutdown has begun."""
        if status is None:
            return self.notify("STOPPING=1")
        self._last_status = _clean_line(status)
        return self.notify("STOPPING=1", f"STATUS={self._last_status}")

    def reloading(self) -> bool:
        """``RELOADING=1`` with the ``MONOTONIC_USEC`` timestamp systemd 253+ requires; send `ready` after."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: feed systemd's watchdog timer."""
        return self.notify("WATCHDOG=1")

    def close(self) -> None:
        """Close the socket; a later send opens a new one."""
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SystemdNotifier({self._display!r})"

    def _record_failure(self, exc: OSError) -> None:
        kind = (type(exc), exc.errno)
        self._failures += 1
        if kind != self._failure_kind:
            self._failure_kind = kind
            log.warning("sd_notify to %s failed: %s", self._display, exc)
        else:
            log.debug("sd_notify to %s failed again (%d in a row): %s", self._display, self._failures, exc)

    def _record_success(self) -> None:
        if self._failures:
            log.info("sd_notify to %s works again after %d failed sends", self._display, self._failures)
        self._failure_kind = None
        self._failures = 0


def watchdog_interval(environ: Mapping[str, str] = os.environ) -> float | None:
    """How often to ping systemd's watchdog, in seconds: half of ``$WATCHDOG_USEC``; None = no watchdog.

    Half the period is what sd_watchdog_enabled(3) recommends: one late ping is
    then not yet fatal. When ``$WATCHDOG_PID`` is set to another process the
    watchdog belongs to that process (we are a child that inherited the
    environment), so we must not ping on its behalf.
    """
    raw = environ.get("WATCHDOG_USEC")
    if not raw:
        return None
    try:
        usec = int(raw)
    except ValueError:
        log.warning("ignoring WATCHDOG_USEC=%r: not an integer", raw)
        return None
    if usec <= 0:
        log.warning("ignoring WATCHDOG_USEC=%r: not positive", raw)
        return None
    pid_raw = environ.get("WATCHDOG_PID")
    if pid_raw:
        try:
            pid = int(pid_raw)
        except ValueError:
            log.warning("ignoring the watchdog: WATCHDOG_PID=%r is not a pid", pid_raw)
            return None
        if pid != os.getpid():
            log.debug("the watchdog belongs to pid %d, not to us (%d)", pid, os.getpid())
            return None
    return usec / 2 / 1_000_000


class LoopWatchdog:
    """Pings systemd's watchdog from the event loop, and only while the loop and the checks are healthy.

    Every `interval` seconds it measures how late its sleep woke up (the lag: a
    sign of a starved loop) and runs the registered checks. Healthy → one
    ``WATCHDOG=1``. Unhealthy → no ping, a warning naming the cause, and
    ``STATUS=unhealthy: <reason>``; when health returns, the last status the
    daemon set is restored. Run it with ``async with``, `start`/`stop`, or by
    awaiting `run`.

    `max_lag` defaults to `interval`. A smaller value is stricter than systemd
    itself: with pings every half period, skipping one after a stall longer
    than `max_lag` means the next one arrives too late, so a single such stall
    costs a restart.
    """

    def __init__(self, notifier: SystemdNotifier, interval: float, *, max_lag: float | None = None) -> None:
        if interval <= 0:
            raise ValueError(f"watchdog interval must be positive, got {interval!r}")
        if max_lag is not None and max_lag <= 0:
            raise ValueError(f"max_lag must be positive, got {max_lag!r}")
        self.notifier = notifier
        self.interval = interval
        self.max_lag = interval if max_lag is None else max_lag
        self._checks: dict[str, HealthCheck] = {}
        self._task: asyncio.Task[None] | None = None
        self._unhealthy = False
        #: Watchdog pings that reached systemd.
        self.pings = 0
        #: Ticks judged unhealthy (no ping sent).
        self.skipped = 0
        #: The lag measured at the last tick, in seconds.
        self.last_lag = 0.0

    @classmethod
    def from_env(
        cls,
        notifier: SystemdNotifier,
        environ: Mapping[str, str] = os.environ,
        *,
        max_lag: float | None = None,
    ) -> LoopWatchdog | None:
        """A watchdog at the interval systemd asked for, or None when there is no watchdog for us."""
        interval = watchdog_interval(environ)
        if interval is None or not notifier.enabled:
            return None
        return cls(notifier, interval, max_lag=max_lag)

    def add_check(self, name: str, check: HealthCheck) -> None:
        """Register a quick, non-blocking check (it runs on the loop): True, or False / a reason string."""
        if name in self._checks:
            raise ValueError(f"a health check named {name!r} is already registered")
        self._checks[name] = check

    def remove_check(self, name: str) -> None:
        """Forget a check; unknown names are ignored so shutdown paths need not track registration."""
        self._checks.pop(name, None)

    def beat(self, lag: float = 0.0) -> bool:
        """One tick: judge health given the loop's `lag` and ping when healthy; returns whether it was."""
        self.last_lag = lag
        problems = self._diagnose(lag)
        if not problems:
            if self._unhealthy:
                self._unhealthy = False
                log.info("healthy again; resuming watchdog pings")
                self.notifier.notify(f"STATUS={self.notifier.last_status or 'healthy'}")
            if self.notifier.watchdog():
                self.pings += 1
            return True
        self._unhealthy = True
        self.skipped += 1
        reason = _clean_line("; ".join(problems))
        log.warning("skipping the watchdog ping: %s", reason)
        self.notifier.notify(f"STATUS=unhealthy: {reason}")
        return False

    async def run(self) -> None:
        """Tick forever (until cancelled): ping at once, then every `interval` seconds."""
        loop = asyncio.get_running_loop()
        self.beat(0.0)
        while True:
            started = loop.time()
            await asyncio.sleep(self.interval)
            # The loop's clock can wake a hair early; a negative lag means none.
            self.beat(max(0.0, loop.time() - started - self.interval))

    def start(self) -> asyncio.Task[None]:
        """Run in a background task of the running loop."""
        if self._task is not None and not self._task.done():
            raise RuntimeError("the watchdog is already running")
        self._task = asyncio.get_running_loop().create_task(self.run(), name="edgeclaw-sd-watchdog")
        return self._task

    async def stop(self) -> None:
        """Cancel the background task and wait for it to end."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        # asyncio.wait rather than `await task` under suppress(CancelledError): that
        # would also swallow a cancellation aimed at whoever is calling stop().
        await asyncio.wait([task])
        if not task.cancelled() and task.exception() is not None:
            log.error("the watchdog task had failed", exc_info=task.exception())

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _diagnose(self, lag: float) -> list[str]:
        problems = []
        if lag > self.max_lag:
            problems.append(f"event loop lagged {lag:.3f} s (limit {self.max_lag:.3f} s)")
        for name, check in list(self._checks.items()):
            try:
                result = check()
            except Exception as exc:
                log.exception("health check %r raised", name)
                problems.append(f"{name}: raised {type(exc).__name__}: {exc}")
                continue
            if asyncio.iscoroutine(result):
                # An async function passed by mistake would look healthy forever.
                result.close()
                problems.append(f"{name}: is a coroutine function; health checks must be plain functions")
            elif isinstance(result, str):
                problems.append(f"{name}: {result}" if result else f"{name} failed")
            elif not result:
                problems.append(f"{name} failed")
        return problems
