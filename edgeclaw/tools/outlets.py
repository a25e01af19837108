"""Where text leaves the device when no caller is waiting for it: one outlet per channel or service.

The tools that send (`message`, `sessions_send`) and the agent's own
announcements (subagent results) never import a channel. Channels (the serial
console, MQTT, the terminal of `edgeclaw chat`) and notification services
(Pushover, ntfy) register an `Outlet` under their name when they start, the
way they register approvers with the approval broker, and unregister when they
stop. Nothing registered under a name means nothing can be delivered there:
the sender is told so, nothing is queued in memory.

Everything that goes out through here is scrubbed first (the daemon's
secrets and credential patterns), whoever sends it: a model asked to pass a
key on cannot use a message for it.

An outlet delivers to a *session* (the conversation a session key names: the
technician at a console port, an MQTT chat session) or to a *target* of its
own (a console port, a topic under the device's MQTT prefix, an ntfy topic, a
Pushover device). Failures are `DeliveryFailed` with a reason fit for the
caller; an outlet that raises anything else is logged and reported as failed.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from edgeclaw.errors import BackendError, EdgeclawError
from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.outlets")


class DeliveryFailed(EdgeclawError):
    """Nothing was delivered; the message says why (port down, nobody logged in, service refused)."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to a target: the text and what a notification service can show with it."""

    text: str
    origin: str = ""  # who sends it, as the receiver should see it ("agent main, session console:...")
    title: str = ""
    priority: int = 0  # -2 (quietest) .. 2 (most urgent); each service maps it to its own scale


class Outlet(Protocol):
    """A channel's or a service's way out. Every method may raise DeliveryFailed."""

    def has_session(self, session_key: str) -> bool:
        """True when `session_key` is a conversation this outlet can reach now (a logged-in port)."""
        ...

    async def to_session(self, session_key: str, text: str) -> str:
        """Show `text` in that conversation; returns where it went, in words."""
        ...

    async def to_target(self, target: str, message: Outgoing) -> str:
        """Send to one of this outlet's own targets; returns where it went, in words."""
        ...


def channel_of(session_key: str) -> str:
    """The channel a session key belongs to: the part before the first ':' ("console", "mqtt")."""
    head, sep, _ = session_key.partition(":")
    return head if sep else ""


class Outlets:
    """The registered outlets, by channel or service name."""

    def __init__(self, scrub: Callable[[str], str] | None = None) -> None:
        self._outlets: dict[str, Outlet] = {}
        self._scrub = scrub or (lambda text: text)

    def register(self, name: str, outlet: Outlet) -> None:
        self._outlets[name] = outlet

    def unregister(self, name: str, outlet: Outlet | None = None) -> None:
        if outlet is None or self._outlets.get(name) is outlet:
            self._outlets.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._outlets)

    def get(self, name: str) -> Outlet | None:
        return self._outlets.get(name)

    def has_session(self, session_key: str) -> bool:
        outlet = self._outlets.get(channel_of(session_key))
        try:
            return outlet is not None and outlet.has_session(session_key)
        except Exception:
            log.exception("outlet %s failed to look up a session", channel_of(session_key))
            return False

    async def to_session(self, session_key: str, text: str) -> str:
        """Deliver into the session's own channel. Raises DeliveryFailed."""
        channel = channel_of(session_key)
        outlet = self._outlets.get(channel)
        if outlet is None:
            raise DeliveryFailed(
                f"session {session_key!r}: its channel {channel or '?'!r} is not running here"
            )
        return await self._guarded(channel, outlet.to_session(session_key, self._scrub(text)))

    async def to_target(self, name: str, target: str, message: Outgoing) -> str:
        """Deliver to a target of the named channel or service. Raises DeliveryFailed."""
        outlet = self._outlets.get(name)
        if outlet is None:
            known = ", ".join(self.names()) or "none"
            raise DeliveryFailed(
                f"no channel or notification service {name!r} is running here (running: {known})"
            )
        clean = dataclasses.replace(message, text=self._scrub(message.text), title=self._scrub(message.title))
        return await self._guarded(name, outlet.to_target(target, clean))

    @staticmethod
    async def _guarded(name: str, delivery: Awaitable[str]) -> str:
        try:
            return await delivery
        except DeliveryFailed:
            raise
        except BackendError as e:  # a notification service's refusal or a broken connection
            raise DeliveryFailed(str(e)) from None
        except Exception as e:
            log.exception("outlet %s failed", name)
            raise DeliveryFailed(f"{name}: delivery failed ({type(e).__name__})") from None
