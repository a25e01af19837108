"""The console's login gate: a salted PIN (or password) hash, lockout after failures, audit lines.

The hash format (PHC strings, scrypt or PBKDF2, constant-time checks) is in
`edgeclaw.config.pin_hash`.

Failures are counted for the whole device, not per port: the PIN is the
device's, and a second cable must not buy an attacker a second set of
guesses. After `max_failures` wrong entries the gate refuses everything for
`lockout_s` without even looking at the entry (`edgeclaw.lockout`, the rule the
fleet page's form follows too).

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
from enum import Enum

from edgeclaw.config.pin_hash import PinHash
from edgeclaw.lockout import LoginLockout
from edgeclaw.records import dataclass
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
        # Counted for the device (no key), not per port: see the module's docstring.
        self.lockout = LoginLockout(
            max_failures=max_failures, lockout_s=lockout_s, failure_delay_s=failure_delay_s, clock=clock
        )

    def locked_for(self) -> float:
        """Seconds of lockout left (0 when open). An expired lockout starts a fresh count."""
        return self.lockout.locked_for()

    async def attempt(self, entry: str, where: str) -> Attempt:
        """Check one entry from `where` (a port); an audit event either way."""
        lockout = self.lockout
        async with lockout.checking:
            left = lockout.locked_for()
            if left > 0:
                self._event("refused", where, logging.WARNING, locked_for_s=round(left))
                return Attempt(LoginResult.LOCKED, locked_for_s=left)
            # Key derivation is deliberately slow: keep it off the event loop.
            ok = await asyncio.to_thread(self.pin_hash.matches, entry)
            if ok:
                lockout.succeeded()
                self._event("ok", where)
                return Attempt(LoginResult.OK)
            failures = lockout.failed()
            if failures >= lockout.max_failures:
                self._event(
                    "locked_out",
                    where,
                    logging.WARNING,
                    failures=failures,
                    lockout_s=round(lockout.lockout_s),
                )
                result = Attempt(LoginResult.WRONG, 0, lockout.lockout_s)
            else:
                self._event(
                    "failed", where, logging.WARNING, failures=failures, max_failures=lockout.max_failures
                )
                result = Attempt(LoginResult.WRONG, lockout.tries_left())
            # Slows guessing further, and is held under the lock so ports cannot overlap it.
            await lockout.slow_down()
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
