"""Who may use the fleet page: a login (password hash or token), sessions with expiry, CSRF tokens.

- The password is checked against a hash in the config, the same format as the
  console's PIN (`edgeclaw.config.pin_hash`, made by `edgeclaw console hash-pin`);
  a token (from `token_file`) is taken at the same form, and as
  `Authorization: Bearer TOKEN` by scripts. Both are compared in constant time.
- Wrong entries are counted per source address by the console's rule
  (`edgeclaw.lockout`): after `max_failures` from one address, the form and a
  bearer token from that address are refused for `lockout_s` without looking,
  and every wrong entry costs `failure_delay_s` under that address's lock, so
  its parallel guesses do not overlap it. Another address is not locked out:
  a guesser cannot lock the owner out. A wrong bearer token counts like a
  wrong form entry.
- A session is a random cookie value with a fixed end (`ttl_s` after its login,
  not extended by use) and its own random CSRF token, which every POST made with
  the cookie must echo in `X-CSRF-Token`. At most `max_sessions` live at once;
  the oldest ends first.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
from collections.abc import Callable

from edgeclaw.config.listener_checks import token_problem
from edgeclaw.config.pin_hash import PinHash
from edgeclaw.errors import ConfigError, ConfigErrors
from edgeclaw.lockout import LoginLockout
from edgeclaw.records import dataclass


@dataclass(frozen=True)
class Session:
    id: str
    csrf: str
    expires: float  # on the access's clock
    who: str  # "password" or "token": how it logged in


class LockedOut(Exception):
    def __init__(self, seconds: float) -> None:
        super().__init__(f"too many wrong entries: try again in {max(1, round(seconds))} s")
        self.seconds = seconds


class Access:
    def __init__(
        self,
        *,
        password_hash: PinHash | None = None,
        token: str = "",
        ttl_s: float = 3600.0,
        max_sessions: int = 64,
        max_failures: int = 5,
        lockout_s: float = 300.0,
        failure_delay_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if password_hash is None and not token:
            raise ValueError("the fleet page needs a password hash or a token to let anyone in")
        if token and (problem := token_problem(token)):
            raise ConfigErrors([ConfigError("", "fleet_page.token_file", problem)])
        self.password_hash = password_hash
        self._token = token.encode("utf-8")
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.clock = clock
        # Counted per source address: a guesser locks out only itself.
        self.lockout = LoginLockout(
            max_failures=max_failures, lockout_s=lockout_s, failure_delay_s=failure_delay_s, clock=clock
        )
        self._sessions: dict[str, Session] = {}  # in login order, oldest first

    # -- login ------------------------------------------------------------------
    async def login(self, entry: str, source: str = "") -> Session | None:
        """A new session for a right password or token; None for a wrong one; LockedOut while locked."""
        lockout = self.lockout
        async with lockout.checking_for(source):
            left = lockout.locked_for(source)
            if left > 0:
                raise LockedOut(left)
            who = ""
            if self.token_matches(entry):
                who = "token"
            elif (
                self.password_hash is not None
                and entry
                # Key derivation is deliberately slow: off the event loop.
                and await asyncio.to_thread(self.password_hash.matches, entry)
            ):
                who = "password"
            if who:
                lockout.succeeded(source)
                return self._open(who)
            lockout.failed(source)
            await lockout.slow_down()
            return None

    async def bearer(self, token: str, source: str = "") -> bool:
        """Whether `token` is the bearer token, counted like a form entry; LockedOut while locked."""
        lockout = self.lockout
        async with lockout.checking_for(source):
            left = lockout.locked_for(source)
            if left > 0:
                raise LockedOut(left)
            if self.token_matches(token):
                lockout.succeeded(source)
                return True
            lockout.failed(source)
            await lockout.slow_down()
            return False

    def token_matches(self, entry: str) -> bool:
        if not self._token:
            return False
        return hmac.compare_digest(self._token, entry.encode("utf-8", "surrogatepass"))

    def _open(self, who: str) -> Session:
        while len(self._sessions) >= self.max_sessions:
            del self._sessions[next(iter(self._sessions))]
        session = Session(
            secrets.token_urlsafe(32), secrets.token_urlsafe(32), self.clock() + self.ttl_s, who
        )
        self._sessions[session.id] = session
        return session

    # -- requests -----------------------------------------------------------------
    def session(self, session_id: str) -> Session | None:
        """The live session with this cookie value; an expired one is ended here."""
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if session.expires <= self.clock():
            del self._sessions[session_id]
            return None
        return session

    @staticmethod
    def csrf_ok(session: Session, given: str) -> bool:
        return bool(given) and hmac.compare_digest(
            session.csrf.encode(), given.encode("utf-8", "surrogatepass")
        )

    def logout(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    @property
    def sessions(self) -> int:
        return len(self._sessions)
