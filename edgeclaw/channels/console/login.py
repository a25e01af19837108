"""The console's login gate: a salted PIN (or password) hash, lockout after failures, audit lines.

The hash format (PHC strings, scrypt or PBKDF2, constant-time checks) is in
`edgeclaw.config.pin_hash`.

Failures are counted for the whole device, not per port: the PIN is the
device's, and a second cable must not buy an attacker a second set of
guesses. After `max_failures` wrong entries the gate refuses everything for
`lockout_s` without even looking at the entry.

Every login, wrong entry, lockout, refusal while locked and logout is an
event of the audit trail (`edgeclaw.tools.audit.AuditTrail`): one line on the
`edgeclaw.audit` logger and, through the trail's sinks, one event on MQTT
`events`. They name the port and the outcome, never what was typed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from edgeclaw.config.pin_hash import PinHash
from edgeclaw.tools.audit import AuditTrail


class LoginResult(Enum):
    OK = "ok"
    WRONG = "wrong"
    LOCKED = "locked"  # refused without checking: the gate is locked


@dataclass(frozen=True)
class Attempt:
    result: LoginResult
    tries_left: int = 0  # after a wrong entry, before the lockout
    locked_for_s: float = 0.0  # when locked (now or as a result of this entry)


class LoginGate:
    """Checks entries against the hash; counts failures for the device and locks out after too many."""

    def __init__(
        self,
        pin_hash: PinHash,
        *,
        max_failures: int = 5,
        lockout_s: float = 300.0,
        failure_delay_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        trail: AuditTrail | None = None,
    ) -> None:
        self.pin_hash = pin_hash
        # The daemon passes its own (runtime.audit), whose sinks publish on MQTT; alone, the log line.
        self.trail = trail or AuditTrail()
        self.max_failures = max_failures
        self.lockout_s = lockout_s
        self.failure_delay_s = failure_delay_s
        self.clock = clock
        self.failures = 0
        self.locked_until = 0.0
        # One check at a time: parallel guesses from several ports must not slip past the count.
        self._lock = asyncio.Lock()

    def locked_for(self) -> float:
        """Seconds of lockout left (0 when open). An expired lockout starts a fresh count."""
        left = self.locked_until - self.clock()
        if left > 0:
            return left
        if self.locked_until:
            self.locked_until = 0.0
            self.failures = 0
        return 0.0

    async def attempt(self, entry: str, where: str) -> Attempt:
        """Check one entry from `where` (a port); an audit event either way."""
        async with self._lock:
            left = self.locked_for()
            if left > 0:
                self._event("refused", where, logging.WARNING, locked_for_s=round(left))
                return Attempt(LoginResult.LOCKED, locked_for_s=left)
            # Key derivation is deliberately slow: keep it off the event loop.
            ok = await asyncio.to_thread(self.pin_hash.matches, entry)
            if ok:
                self.failures = 0
                self._event("ok", where)
                return Attempt(LoginResult.OK)
            self.failures += 1
            if self.failures >= self.max_failures:
                self.locked_until = self.clock() + self.lockout_s
                self._event(
                    "locked_out",
                    where,
                    logging.WARNING,
                    failures=self.failures,
                    lockout_s=round(self.lockout_s),
                )
                result = Attempt(LoginResult.WRONG, 0, self.lockout_s)
            else:
                self._event(
                    "failed", where, logging.WARNING, failures=self.failures, max_failures=self.max_failures
                )
                result = Attempt(LoginResult.WRONG, self.max_failures - self.failures)
            # Slows guessing further, and is held under the lock so ports cannot overlap it.
            if self.failure_delay_s > 0:
                await asyncio.sleep(self.failure_delay_s)
            return result

    def log_logout(self, where: str, reason: str) -> None:
        """A technician's session on `where` ended (Ctrl-D, idle, port lost): an audit event."""
        self.trail.emit("logout", caller=console_caller(where), channel="console", reason=reason)

    def _event(self, outcome: str, where: str, level: int = logging.INFO, **fields: int) -> None:
        self.trail.emit(
            "login", level=level, outcome=outcome, caller=console_caller(where), channel="console", **fields
        )


def console_caller(where: str) -> str:
    """The identity of whoever sits at a port, as ToolContext.caller spells it."""
    return f"console:{where}"
