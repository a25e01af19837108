"""Notification services over HTTP: Pushover and ntfy, as outlets of the `message` tool.

Both take a message (text, title, priority) to one of their targets and
answer where it went; a refusal or a connection problem is a `BackendError`
naming the service and what it said, never the credentials. Credentials come
from the environment or a file (the config names them, `config.secrets`
reads them, the scrubber knows them); they travel in the request body
(Pushover's form) or an Authorization header (ntfy), never in a URL, a log
line or a command line.

Priorities are edgeclaw's -2..2: Pushover's own scale up to 1 (its 2, an
emergency that repeats until acknowledged, is not for a model to raise),
ntfy's 1..5.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from edgeclaw.backends.http_client import SharedClient
from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("edgeclaw.notify")

MAX_ERROR_CHARS = 200  # of a service's refusal, in our error


class Message(Protocol):
    """What a notification carries (`tools.outlets.Outgoing` has this shape)."""

    text: str
    origin: str
    title: str
    priority: int


class _Http(SharedClient):
    """The service's client, made on first use, with its errors said in the service's name."""

    async def post(self, service: str, url: str, timeout_s: float, **kwargs: Any) -> httpx.Response:
        import httpx

        try:
            return await self.get().post(url, timeout=timeout_s, **kwargs)
        except httpx.TimeoutException:
            raise BackendError(f"{service}: no answer within {timeout_s:g} s") from None
        except httpx.HTTPError as e:
            raise BackendError(f"{service}: cannot reach the service: {type(e).__name__}") from None


def _refusal(service: str, response: httpx.Response) -> BackendError:
    try:
        body = response.json()
    except ValueError:
        body = None
    detail = ""
    if isinstance(body, dict):
        errors = body.get("errors") or body.get("error")
        detail = "; ".join(map(str, errors)) if isinstance(errors, list) else str(errors or "")
    detail = detail[:MAX_ERROR_CHARS]
    return BackendError(
        f"{service}: refused with HTTP {response.status_code}" + (f": {detail}" if detail else "")
    )


class _NotSessions:
    """Notification services have targets, not conversations."""

    name = "notify"

    def has_session(self, session_key: str) -> bool:
        return False

    async def to_session(self, session_key: str, text: str) -> str:
        raise BackendError(f"{self.name} delivers notifications, not into sessions")


@dataclass
class PushoverSettings:
    token: str
    user: str
    devices: tuple[str, ...] = ()
    base_url: str = "https://api.pushover.net"
    timeout_s: float = 10.0


class PushoverNotifier(_NotSessions):
    name = "pushover"

    def __init__(self, settings: PushoverSettings) -> None:
        self.settings = settings
        self._http = _Http()

    async def to_target(self, target: str, message: Message) -> str:
        s = self.settings
        if target and target not in s.devices:
            allowed = ", ".join(s.devices) or "none configured (notify.pushover.devices)"
            raise BackendError(
                f"pushover: {target!r} is not a device messages may go to (devices: {allowed})"
            )
        form = {
            "token": s.token,
            "user": s.user,
            "message": message.text,
            "priority": str(max(-2, min(1, message.priority))),
        }
        if message.title:
            form["title"] = message.title
        if target:
            form["device"] = target
        response = await self._http.post(
            "pushover", s.base_url.rstrip("/") + "/1/messages.json", s.timeout_s, data=form
        )
        if response.status_code != 200:
            raise _refusal("pushover", response)
        return "pushed to Pushover" + (f" device {target}" if target else "")

    async def aclose(self) -> None:
        await self._http.aclose()


@dataclass
class NtfySettings:
    server: str
    topics: tuple[str, ...]
    token: str = ""
    timeout_s: float = 10.0


NTFY_PRIORITY = {-2: 1, -1: 2, 0: 3, 1: 4, 2: 5}


class NtfyNotifier(_NotSessions):
    name = "ntfy"

    def __init__(self, settings: NtfySettings) -> None:
        self.settings = settings
        self._http = _Http()

    async def to_target(self, target: str, message: Message) -> str:
        s = self.settings
        topic = target or s.topics[0]
        if topic not in s.topics:
            raise BackendError(
                f"ntfy: {topic!r} is not a topic messages may go to (topics: {', '.join(s.topics)})"
            )
        # JSON publishing: UTF-8 titles and text, unlike ntfy's header form.
        body: dict[str, Any] = {
            "topic": topic,
            "message": message.text,
            "priority": NTFY_PRIORITY[max(-2, min(2, message.priority))],
        }
        if message.title:
            body["title"] = message.title
        headers = {"Authorization": f"Bearer {s.token}"} if s.token else {}
        response = await self._http.post(
            "ntfy", s.server.rstrip("/") + "/", s.timeout_s, json=body, headers=headers
        )
        if response.status_code != 200:
            raise _refusal("ntfy", response)
        return f"published to ntfy topic {topic}"

    async def aclose(self) -> None:
        await self._http.aclose()
