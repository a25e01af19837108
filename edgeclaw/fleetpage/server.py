"""The fleet page's HTTP side: the page, its event stream, and the commands it POSTs.

Routes (every one but the login form and its static files needs a session):

- `GET /login`, `POST /login` (form field `secret`: the password or the token),
  `POST /logout`; `GET /` the page, `GET /static/NAME` its files;
- `GET /api/session` (the session's CSRF token), `GET /api/state` (the table,
  events and approvals), `GET /api/devices?offset=&limit=&q=&sort=&state=` (one
  page of the table, searched, filtered and sorted here: what the page reads),
  `GET /api/device/NAME` (its row, health history and events, those kept before a restart too),
  `GET /api/history?kind=events|answers|approvals&device=&before=&limit=` (the kept history),
  `GET /api/tools` (the tool catalog with JSON schemas), `GET /api/rollouts` (the staged rollouts,
  newest first) and `GET /api/rollout/ID` (one, with each device's outcome),
  `GET /api/stream` (Server-Sent Events: a `snapshot`, then `devices` (the rows
  changed, batched), `health`, `event`, `approval`, `approval_done`, `gone`, `link`, `rollout`);
- `POST /api/call`, `/api/chat`, `/api/approve`, `/api/broadcast`, `/api/rollout` (start one, see
  `fleetpage.rollout`), `/api/rollout/stop` (JSON bodies).

A POST made with the session cookie must carry the session's CSRF token in
`X-CSRF-Token`, and one whose `Origin` (or `Sec-Fetch-Site`) says it comes from
another site is refused whatever it carries. Scripts may send
`Authorization: Bearer TOKEN` instead of a cookie (no CSRF token then: a
browser never adds that header by itself). Every response forbids framing and
anything but the page's own scripts and styles (Content-Security-Policy).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import mimetypes
from collections.abc import Awaitable, Callable
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from edgeclaw.fleetpage.access import Access, LockedOut, Session
from edgeclaw.fleetpage.broker import DECISIONS, CommandRefused, FleetBroker
from edgeclaw.fleetpage.metrics import CONTENT_TYPE, PageMetrics
from edgeclaw.fleetpage.rollout import RolloutRefused, Rollouts
from edgeclaw.fleetpage.stream import BATCH_S, PageOutbox, sse
from edgeclaw.fleetpage.update_rollout import UpdateStep
from edgeclaw.fleetpage.window import FleetWindow, Update
from edgeclaw.net.httpd import Exchange, Request

if TYPE_CHECKING:
    from edgeclaw.fleetpage.history import HistoryStore

log = logging.getLogger("edgeclaw.fleetpage")

STATIC = Path(__file__).resolve().parent / "static"
COOKIE = "edgeclaw_fleet"  # + "_PORT": browsers keep cookies per host, not per port
HEARTBEAT_S = 15.0
MAX_PAGE = 1000  # rows in one answer of /api/devices
MAX_STREAMS = 32
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Not no-referrer: with it a browser sends `Origin: null` on the login form's POST, which
    # cannot be told from a sandboxed frame's, so the same-origin check below would refuse it.
    "Referrer-Policy": "same-origin",
}
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


class _Refusal(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class FleetPage:
    """The request handler for `HttpServer`, and the fan-out of updates to the open streams."""

    def __init__(
        self,
        window: FleetWindow,
        broker: FleetBroker,
        access: Access,
        *,
        tools: list[dict[str, Any]] | None = None,
        call_timeout_s: float = 150.0,
        broadcast_wait_s: float = 10.0,
        history: HistoryStore | None = None,
        cookie: str = COOKIE,
    ) -> None:
        self.cookie = cookie
        self.window = window
        self.broker = broker
        self.access = access
        self.tools = tools or []
        self.call_timeout_s = call_timeout_s
        self.broadcast_wait_s = broadcast_wait_s
        self.metrics = PageMetrics()
        self._streams: set[PageOutbox] = set()
        self.history = history  # None: what the window holds is all there is
        self._told_broker = False  # the broker's state as the pages last heard it
        self._routes: dict[tuple[str, str], Callable[[Request, Session | None], Awaitable[Any]]] = {
            ("GET", "/api/session"): self._session_info,
            ("GET", "/api/state"): self._state,
            ("GET", "/api/devices"): self._devices,
            ("GET", "/api/history"): self._history,
            ("GET", "/api/tools"): self._tools,
            ("POST", "/api/call"): self._call,
            ("POST", "/api/chat"): self._chat,
            ("POST", "/api/approve"): self._approve,
            ("POST", "/api/broadcast"): self._broadcast,
        }
        self.rollouts = Rollouts(
            broker.call,
            self.publish,
            lambda: self.history,
            self.metrics,
            names=NAME_CHARS,
            max_wait_s=call_timeout_s,
            update=UpdateStep(broker, self.window) if broker.administering else None,
        )

    # -- fan-out ------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        # What a page is told here is what the watcher compares with: a connection that came and
        # went between two of its looks is still reported to a page whose snapshot saw it up.
        self._told_broker = self.broker.connection.connected
        return {**self.window.snapshot(), "broker": self._told_broker}

    async def watch_broker(self, every_s: float = 1.0) -> None:
        """Tell the open pages when the broker connection goes or comes back (their table goes stale)."""
        while True:
            await asyncio.sleep(every_s)
            now = self.broker.connection.connected
            if now != self._told_broker:
                self._told_broker = now
                self.publish([("link", {"broker": now})])

    def publish(self, updates: list[Update]) -> None:
        # In a share group the history is written from the shared subscription's copies (`record`),
        # one page each; the window's own copies (every page gets them) only go to the streams.
        if not self.broker.share_group:
            self.record(updates)
        for outbox in self._streams:
            for kind, data in updates:
                outbox.add(kind, data)

    def record(self, updates: list[Update]) -> None:
        """`updates` into the kept history (when there is one)."""
        if self.history is None:
            return
        for kind, data in updates:
            if kind == "health":
                self.history.add_health(data["device"], data["point"])
                self.metrics.handed("health")
            elif kind in ("event", "approval", "approval_done"):
                table = "events" if kind == "event" else "approvals"
                self.history.add(table, data["device"], data)
                self.metrics.handed(table)

    def stream_snapshot(self) -> dict[str, Any]:
        """What a page's stream starts with: the counts, events and approvals, not the rows (the page
        fetches the rows it shows from /api/devices)."""
        self._told_broker = self.broker.connection.connected
        snap = self.window.snapshot(rows=False)
        return {**snap, "counts": self.window.counts(), "broker": self._told_broker}

    # -- the handler ----------------------------------------------------------------
    async def __call__(self, request: Request, exchange: Exchange) -> None:
        try:
            await self._route(request, exchange)
        except (_Refusal, RolloutRefused) as e:
            await _json(exchange, e.status, {"ok": False, "error": str(e)})

    async def _route(self, request: Request, exchange: Exchange) -> None:
        path, method = request.path, request.method
        if method not in ("GET", "POST"):
            raise _Refusal(405, f"method {method} is not served here")
        if path == "/login":
            if method == "POST":
                await self._login(request, exchange)
            else:
                await self._page(exchange, "login.html")
            return
        if path.startswith("/static/"):
            await self._static(exchange, path[len("/static/") :])
            return
        if method == "POST":
            self._same_origin(request)
        session = self.access.session(_cookie(request, self.cookie))
        bearer = await self._bearer(request)
        if path == "/":
            if session is None:
                await exchange.respond(303, headers={"Location": "/login", **SECURITY_HEADERS})
            else:
                await self._page(exchange, "index.html")
            return
        if session is None and not bearer:
            raise _Refusal(401, "log in first (no session, or it has expired)")
        csrf = request.header("x-csrf-token")
        if method == "POST" and session is not None and not bearer and not self.access.csrf_ok(session, csrf):
            raise _Refusal(403, "missing or wrong CSRF token (X-CSRF-Token): reload the page")
        if path == "/logout" and method == "POST":
            if session is not None:
                self.access.logout(session.id)
            await exchange.respond(
                303,
                headers={"Location": "/login", "Set-Cookie": _clear_cookie(self.cookie), **SECURITY_HEADERS},
            )
            return
        if path == "/metrics" and method == "GET":
            body = self.metrics.exposition(self.snapshot())
            await exchange.respond(200, body, SECURITY_HEADERS, content_type=CONTENT_TYPE)
            return
        if path == "/api/stream" and method == "GET":
            await self._stream(exchange, session)
            return
        if path.startswith("/api/rollout"):
            body = _body(request) if method == "POST" else {}
            await _json(
                exchange, 200, await self.rollouts.api(method, unquote(path), body, self.window.online)
            )
            return
        if path.startswith("/api/device/") and method == "GET":
            await _json(exchange, 200, await self._device(unquote(path[len("/api/device/") :])))
            return
        route = self._routes.get((method, path))
        if route is None:
            raise _Refusal(404, f"nothing at {method} {path}")
        await _json(exchange, 200, await route(request, session))

    def _same_origin(self, request: Request) -> None:
        origin = request.header("origin")
        host = request.header("host")
        if origin and (origin == "null" or urlsplit(origin).netloc != host):
            raise _Refusal(403, f"a POST from another origin ({origin[:100]}) is refused")
        if request.header("sec-fetch-site") == "cross-site":
            raise _Refusal(403, "a cross-site POST is refused")

    async def _bearer(self, request: Request) -> bool:
        scheme, _, value = request.header("authorization").partition(" ")
        if scheme.lower() != "bearer":
            return False
        try:
            return await self.access.bearer(value.strip(), request.source)
        except LockedOut as e:
            log.warning("fleet page: bearer token from %s refused while locked out", request.source)
            raise _Refusal(429, str(e)) from None

    # -- login ------------------------------------------------------------------------
    async def _login(self, request: Request, exchange: Exchange) -> None:
        self._same_origin(request)
        form = parse_qs(request.body.decode("utf-8", "replace"), max_num_fields=4)
        entry = (form.get("secret") or [""])[0]
        try:
            session = await self.access.login(entry, request.source)
        except LockedOut as e:
            log.warning("fleet page login from %s refused while locked out", request.source)
            await self._page(exchange, "login.html", status=429, error=str(e))
            return
        if session is None:
            log.warning("fleet page login from %s: wrong password or token", request.source)
            await self._page(exchange, "login.html", status=401, error="wrong password or token")
            return
        log.info("fleet page login (%s)", session.who)
        secure = "; Secure" if request.header("x-forwarded-proto") == "https" else ""
        cookie = (
            f"{self.cookie}={session.id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={int(self.access.ttl_s)}"
        )
        cookie += secure
        await exchange.respond(303, headers={"Location": "/", "Set-Cookie": cookie, **SECURITY_HEADERS})

    # -- pages and files ------------------------------------------------------------------
    async def _page(self, exchange: Exchange, name: str, *, status: int = 200, error: str = "") -> None:
        text = (STATIC / name).read_text(encoding="utf-8")
        if error:
            text = text.replace("<!--error-->", f'<p class="error" id="login-error">{_escape(error)}</p>')
        await exchange.respond(
            status, text.encode(), SECURITY_HEADERS, content_type="text/html; charset=utf-8"
        )

    async def _static(self, exchange: Exchange, name: str) -> None:
        # Only the files shipped in static/, by their plain names: no path, no traversal.
        if not name or set(name) - NAME_CHARS or name.startswith(".") or not (STATIC / name).is_file():
            raise _Refusal(404, "no such file")
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind.endswith("javascript"):
            kind += "; charset=utf-8"
        await exchange.respond(200, (STATIC / name).read_bytes(), SECURITY_HEADERS, content_type=kind)

    # -- the API ------------------------------------------------------------------------------
    async def _session_info(self, request: Request, session: Session | None) -> dict[str, Any]:
        return {
            "csrf": session.csrf if session else "",
            "expires_in_s": round(session.expires - self.access.clock()) if session else None,
            "approvals": self.broker.approvals_enabled,
            "signing": self.broker.signing,
            "updates": self.broker.administering,  # it holds the admin key: update rollouts
            "connected": self.broker.connection.connected,
        }

    async def _state(self, request: Request, session: Session | None) -> dict[str, Any]:
        return self.snapshot()

    async def _devices(self, request: Request, session: Session | None) -> dict[str, Any]:
        query = parse_qs(urlsplit(request.target).query, max_num_fields=8)

        def one(name: str) -> str:
            return (query.get(name) or [""])[0]

        offset, limit = _count(one("offset"), "offset", 0, 0), _count(one("limit"), "limit", 100, 1)
        if limit > MAX_PAGE:
            raise _Refusal(400, f"limit must be at most {MAX_PAGE}, got {limit}")
        q = one("q")
        if len(q) > 128:
            raise _Refusal(400, "q (the search) must be at most 128 characters")
        try:
            page = self.window.page(
                offset=offset, limit=limit, q=q, sort=one("sort") or "device", state=one("state")
            )
        except ValueError as e:
            raise _Refusal(400, str(e)) from None
        return {**page, "counts": self.window.counts(), "broker": self.broker.connection.connected}

    async def _device(self, name: str) -> dict[str, Any]:
        detail = self.window.device(name)
        if detail is None:
            raise _Refusal(404, f"no device {name!r} on the broker")
        if self.history is None:
            return detail
        # What was kept before this run (or before the window's bounds), then what the window holds since.
        since = self.window.clock() - self.window.history_s
        points = await self.history.health(name, since)
        last = points[-1][0] if points else float("-inf")
        detail["history"] = points + [p for p in detail["history"] if (p[0] or 0.0) > last]
        events = list(reversed(await self.history.records("events", device=name, limit=100)))
        last = events[-1]["ts"] if events else float("-inf")
        detail["events"] = events + [e for e in detail["events"] if (_ts(e) or 0.0) > last]
        return detail

    async def _history(self, request: Request, session: Session | None) -> dict[str, Any]:
        """`GET /api/history?kind=events|answers|approvals&device=&before=&limit=`: the kept history,
        newest first (`before`: the `ts` of the last one seen, for the next page)."""
        if self.history is None:
            raise _Refusal(404, 'no history is kept here ([fleet_page] history_store = "off")')
        query = parse_qs(urlsplit(request.target).query, max_num_fields=8)

        def one(name: str) -> str:
            return (query.get(name) or [""])[0]

        device = one("device")
        if device and (len(device) > 128 or set(device) - NAME_CHARS):
            raise _Refusal(400, "device must be a device name (letters, digits, _ . -)")
        before = None
        if one("before"):
            try:
                before = float(one("before"))
            except ValueError:
                raise _Refusal(
                    400, f"before must be a time stamp (seconds), got {one('before')!r:.20}"
                ) from None
        limit = _count(one("limit"), "limit", 100, 1)
        try:
            records = await self.history.records(
                one("kind") or "events", device=device, before=before, limit=limit
            )
        except ValueError as e:
            raise _Refusal(400, str(e)) from None
        return {"kind": one("kind") or "events", "records": records}

    async def _tools(self, request: Request, session: Session | None) -> list[dict[str, Any]]:
        return self.tools

    async def _call(self, request: Request, session: Session | None) -> dict[str, Any]:
        body = _body(request)
        device, tool = _name(body, "device"), _name(body, "tool")
        args = body.get("args", {})
        if not isinstance(args, dict):
            raise _Refusal(400, "args must be a JSON object")
        return await self._command("call", self.broker.call(device, tool, args, self.call_timeout_s))

    async def _chat(self, request: Request, session: Session | None) -> dict[str, Any]:
        body = _body(request)
        device, text = _name(body, "device"), body.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _Refusal(400, "text must be a non-empty string")
        return await self._command("chat", self.broker.chat(device, text, "fleetpage", self.call_timeout_s))

    async def _approve(self, request: Request, session: Session | None) -> dict[str, Any]:
        body = _body(request)
        device, question = _name(body, "device"), body.get("id")
        if not isinstance(question, str) or not question:
            raise _Refusal(400, "id (the approval's id) must be a non-empty string")
        decision = body.get("decision")
        if decision not in DECISIONS:
            raise _Refusal(400, f"decision must be one of {', '.join(DECISIONS)}, got {decision!r:.40}")
        return await self._command("approval", self.broker.decide(device, question, decision, 20.0))

    async def _broadcast(self, request: Request, session: Session | None) -> dict[str, Any]:
        body = _body(request)
        group = body.get("group", "")
        if not isinstance(group, str) or (group and set(group) - NAME_CHARS):
            raise _Refusal(
                400, "group must be a group name (letters, digits, _ . -) or empty for every device"
            )
        tool = _name(body, "tool")
        args = body.get("args", {})
        if not isinstance(args, dict):
            raise _Refusal(400, "args must be a JSON object")
        wait = body.get("wait_s", self.broadcast_wait_s)
        if (
            isinstance(wait, bool)
            or not isinstance(wait, int | float)
            or not 0 < wait <= self.broadcast_wait_s
        ):
            raise _Refusal(400, f"wait_s must be a number of seconds, at most {self.broadcast_wait_s:g}")
        try:
            answers, missing = await self.broker.broadcast(group, tool, args, float(wait))
        except CommandRefused as e:
            self.metrics.command("broadcast", "refused")
            raise _Refusal(409, str(e)) from None
        self.metrics.broadcast(len(answers), len(missing))
        if self.history is not None:
            now = self.window.clock()
            for answer in answers:
                device = str(answer.get("device") or "?")
                record = {**answer, "broadcast": tool, "group": group, "ts": now}
                self.history.add("answers", device, record, ref=str(answer.get("request") or ""))
                self.metrics.handed("answers")
        return {"ok": True, "group": group, "answers": answers, "missing": missing}

    async def _command(self, kind: str, command: Awaitable[dict[str, Any]]) -> dict[str, Any]:
        try:
            answer = await command
        except CommandRefused as e:
            self.metrics.command(kind, "refused")
            raise _Refusal(409, str(e)) from None
        except TimeoutError as e:
            self.metrics.command(kind, "timeout")
            raise _Refusal(504, str(e)) from None
        self.metrics.command(kind, "ok")
        return {"ok": True, "answer": answer}

    # -- the event stream ------------------------------------------------------------------------
    async def _stream(self, exchange: Exchange, session: Session | None) -> None:
        if len(self._streams) >= MAX_STREAMS:
            raise _Refusal(503, f"{MAX_STREAMS} pages are already open on this server")
        outbox = PageOutbox()
        self._streams.add(outbox)
        loop = asyncio.get_running_loop()
        try:
            await exchange.stream(200, SECURITY_HEADERS, content_type="text/event-stream")
            await exchange.send(sse("snapshot", self.stream_snapshot()))
            sent = loop.time()
            while not exchange.closing:
                try:
                    async with asyncio.timeout(HEARTBEAT_S):
                        await outbox.ready.wait()
                except TimeoutError:
                    if session is not None and self.access.session(session.id) is None:
                        return  # the session ended: so does its stream
                    await exchange.send(b": ping\n\n")
                    continue
                # What comes within a batch's time goes in the same batch.
                await asyncio.sleep(max(0.0, sent + BATCH_S - loop.time()))
                if outbox.behind:
                    return  # too far behind: it reconnects and starts from a snapshot
                await exchange.send(outbox.drain(self.window.counts()))
                sent = loop.time()
        except (ConnectionError, TimeoutError):
            pass
        finally:
            self._streams.discard(outbox)
            with contextlib.suppress(Exception):
                await exchange.end()


def _ts(record: dict[str, Any]) -> float | None:
    ts = record.get("ts")
    return float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else None


def _count(text: str, name: str, default: int, least: int) -> int:
    if not text:
        return default
    if not text.isdigit() or int(text) < least:
        raise _Refusal(400, f"{name} must be a whole number of at least {least}, got {text!r:.20}")
    return int(text)


def _cookie(request: Request, name: str) -> str:
    header = request.header("cookie")
    if not header:
        return ""
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return ""
    morsel = jar.get(name)
    return morsel.value if morsel is not None else ""


def _clear_cookie(name: str) -> str:
    return f"{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"


def _body(request: Request) -> dict[str, Any]:
    if not request.header("content-type").startswith("application/json"):
        raise _Refusal(415, "send the command as JSON (Content-Type: application/json)")
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError):
        raise _Refusal(400, "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise _Refusal(400, "the body must be a JSON object")
    return body


def _name(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value or len(value) > 128 or set(value) - NAME_CHARS:
        raise _Refusal(400, f"{key} must be a name (letters, digits, _ . -), got {value!r:.60}")
    return value


async def _json(exchange: Exchange, status: int, data: Any) -> None:
    await exchange.respond(
        status, json.dumps(data).encode(), SECURITY_HEADERS, content_type="application/json"
    )


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
