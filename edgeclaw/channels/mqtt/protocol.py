"""The MQTT payloads: parsing requests and shaping answers (blueprint §3.2).

Every problem with a request is a `WireError` carrying a short machine code
and a sentence naming the problem; the channel turns it into an error answer,
so a caller always learns what was wrong.

Error codes: `bad_json`, `missing_field`, `bad_field`, `too_large`,
`bad_signature`, `stale`, `retained`, `bad_response_topic`, `busy`,
`interrupted`, `stopping`, `internal`, `no_agent` (chat), `unknown_approval`,
`admin_disabled`, `invalid_definition`, `not_found`, `unavailable`, and for
tool calls the registry's own stages (`unknown_tool`, `arguments`, `policy`,
`rate_limit`, `bounds`, `tool_error`, `timeout`, ...).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from edgeclaw.tools.approval import Decision
from edgeclaw.tools.registry import CallOutcome

MAX_ID_CHARS = 200
MAX_NAME_CHARS = 200

# Suffixes of command topics: an answer must never be published to one, or an answer to one device
# could be replayed as a command to another.
COMMAND_SUFFIXES = ("/tool/call", "/chat/in", "/approval/response", "/admin/tools")


class WireError(Exception):
    def __init__(self, code: str, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class Route:
    """Where an answer goes: the request's Response Topic and Correlation Data, or a fallback topic."""

    topic: str
    correlation: bytes | None = None


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    id: str
    tool: str
    args: dict[str, Any]
    session: str = ""
    sender: str = ""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    text: str
    session: str = ""
    sender: str = ""
    id: str | None = None


@dataclass(frozen=True, slots=True)
class AdminRequest:
    """`admin/tools`: define (or replace) a custom tool, remove one, or list them."""

    id: str
    action: str  # "define" | "remove" | "list"
    definition: dict[str, Any] | None = None
    name: str = ""


ADMIN_ACTIONS = ("define", "remove", "list")


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    id: str
    decision: Decision


def encode(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def safe_response_topic(topic: str) -> bool:
    """A Response Topic we are willing to publish to."""
    return (
        bool(topic)
        and len(topic) <= 512
        and not any(c in topic for c in "#+\x00")
        and not topic.startswith("$")
        and not topic.endswith(COMMAND_SUFFIXES)
    )


# -- parsing ---------------------------------------------------------------
def parse_json_object(payload: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(payload)
    except UnicodeDecodeError:
        raise WireError("bad_json", f"{what}: the payload is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise WireError("bad_json", f"{what}: malformed JSON: {e.msg} at position {e.pos}") from None
    if not isinstance(value, dict):
        raise WireError("bad_json", f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def _text_field(obj: dict[str, Any], key: str, what: str, *, required: bool, limit: int) -> str:
    value = obj.get(key)
    if value is None:
        if required:
            raise WireError("missing_field", f"{what}: missing field {key!r}", request_id_of(obj))
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise WireError(
            "bad_field",
            f"{what}: field {key!r} must be a string, got {type(value).__name__}",
            request_id_of(obj),
        )
    text = str(value)
    if required and not text:
        raise WireError("missing_field", f"{what}: field {key!r} is empty", request_id_of(obj))
    if len(text) > limit:
        raise WireError(
            "bad_field", f"{what}: field {key!r} is longer than {limit} characters", request_id_of(obj)
        )
    return text


def request_id_of(obj: dict[str, Any]) -> str | None:
    """The request id when it is usable, so even an error answer can be matched to its request."""
    value = obj.get("id")
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value)
    return text if 0 < len(text) <= MAX_ID_CHARS else None


# Past this size a refused payload is not parsed just to find its id.
PEEK_MAX_BYTES = 1 << 20


def peek_id(payload: bytes) -> str | None:
    """Best effort: the id of a request refused before it was parsed (or authenticated), also from
    inside a signed envelope, so the caller can match the error answer to its request."""
    if len(payload) > PEEK_MAX_BYTES:
        return None
    try:
        obj = json.loads(payload)
        if isinstance(obj, dict) and isinstance(obj.get("signed"), str):
            obj = json.loads(obj["signed"])
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return request_id_of(obj) if isinstance(obj, dict) else None


def parse_tool_call(obj: dict[str, Any]) -> ToolCallRequest:
    what = "tool/call"
    request_id = _text_field(obj, "id", what, required=True, limit=MAX_ID_CHARS)
    tool = _text_field(obj, "tool", what, required=True, limit=MAX_NAME_CHARS)
    args = obj.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise WireError("bad_field", f"{what}: field 'args' must be a JSON object", request_id)
    return ToolCallRequest(
        request_id,
        tool,
        args,
        session=_text_field(obj, "session", what, required=False, limit=MAX_NAME_CHARS),
        sender=_text_field(obj, "sender", what, required=False, limit=MAX_NAME_CHARS),
    )


def parse_chat(payload: bytes) -> ChatRequest:
    """JSON `{"text", "session"?, "sender"?, "id"?}`, or plain UTF-8 text."""
    what = "chat/in"
    stripped = payload.lstrip()
    if stripped.startswith(b"{"):
        obj = parse_json_object(payload, what)
        text = obj.get("text")
        if text is None:
            raise WireError("missing_field", f"{what}: missing field 'text'", request_id_of(obj))
        if not isinstance(text, str):
            raise WireError("bad_field", f"{what}: field 'text' must be a string", request_id_of(obj))
        request_id = _text_field(obj, "id", what, required=False, limit=MAX_ID_CHARS) or None
        return ChatRequest(
            text,
            session=_text_field(obj, "session", what, required=False, limit=MAX_NAME_CHARS),
            sender=_text_field(obj, "sender", what, required=False, limit=MAX_NAME_CHARS),
            id=request_id,
        )
    try:
        return ChatRequest(payload.decode("utf-8"))
    except UnicodeDecodeError:
        raise WireError("bad_json", f"{what}: the payload is neither JSON nor UTF-8 text") from None


def parse_approval(obj: dict[str, Any]) -> ApprovalAnswer:
    what = "approval/response"
    request_id = _text_field(obj, "id", what, required=True, limit=MAX_ID_CHARS)
    decision = _text_field(obj, "decision", what, required=True, limit=40)
    try:
        return ApprovalAnswer(request_id, Decision(decision))
    except ValueError:
        allowed = ", ".join(d.value for d in Decision)
        raise WireError(
            "bad_field", f"{what}: decision must be one of {allowed}, got {decision!r}", request_id
        ) from None


def parse_admin(obj: dict[str, Any]) -> AdminRequest:
    """`{"id", "action": "define", "tool": {definition}}`, `{"id", "action": "remove", "name"}` or
    `{"id", "action": "list"}`; "replace" is accepted as another word for "define"."""
    what = "admin/tools"
    request_id = _text_field(obj, "id", what, required=True, limit=MAX_ID_CHARS)
    action = _text_field(obj, "action", what, required=True, limit=40)
    if action == "replace":
        action = "define"
    if action not in ADMIN_ACTIONS:
        raise WireError(
            "bad_field",
            f"{what}: action must be one of define, replace, remove, list; got {action!r}",
            request_id,
        )
    if action == "define":
        definition = obj.get("tool")
        if definition is None:
            raise WireError("missing_field", f"{what}: missing field 'tool' (the definition)", request_id)
        if not isinstance(definition, dict):
            raise WireError("bad_field", f"{what}: field 'tool' must be a JSON object", request_id)
        return AdminRequest(request_id, action, definition=definition)
    if action == "remove":
        return AdminRequest(
            request_id, action, name=_text_field(obj, "name", what, required=True, limit=MAX_NAME_CHARS)
        )
    return AdminRequest(request_id, action)


def check_fresh(obj: dict[str, Any], max_age_s: float, now: float | None = None) -> None:
    """For signed commands with `hmac_max_age_s`: a `ts` (Unix seconds) close to now, against replay."""
    ts = obj.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        raise WireError(
            "stale", "signed commands must carry a numeric 'ts' (Unix seconds)", request_id_of(obj)
        )
    now = time.time() if now is None else now
    if abs(now - ts) > max_age_s:
        raise WireError(
            "stale",
            f"'ts' is {now - ts:.0f} s away from this device's clock (at most {max_age_s:g} s allowed)",
            request_id_of(obj),
        )


# -- answers ---------------------------------------------------------------
def tool_answer(request_id: str, outcome: CallOutcome) -> dict[str, Any]:
    answer: dict[str, Any] = {"id": request_id, "ok": outcome.ok, "tool": outcome.tool}
    if outcome.for_user is not None:
        answer["for_user"] = outcome.for_user
    answer["for_llm"] = outcome.for_llm
    if outcome.error is not None:
        answer["error"] = outcome.error
    if not outcome.ok:
        answer["code"] = outcome.stage
    answer["duration_ms"] = round(outcome.duration_ms, 3)
    return answer


def tool_error(request_id: str | None, tool: str | None, code: str, message: str) -> dict[str, Any]:
    return {"id": request_id, "ok": False, "tool": tool, "error": message, "code": code, "duration_ms": 0.0}


def chat_answer(text: str, session: str, ok: bool, request_id: str | None) -> dict[str, Any]:
    answer: dict[str, Any] = {"text": text, "session": session, "ok": ok}
    if request_id is not None:
        answer["in_reply_to"] = request_id
    return answer


def chat_error(request_id: str | None, session: str, code: str, message: str) -> dict[str, Any]:
    answer = chat_answer(message, session, False, request_id)
    answer["error"] = message
    answer["code"] = code
    return answer


def admin_error(request_id: str | None, action: str | None, code: str, message: str) -> dict[str, Any]:
    return {"id": request_id, "ok": False, "action": action, "error": message, "code": code}


def replayed(answer: bytes) -> bytes:
    """A stored answer sent again, marked so the caller can tell it is a repeat."""
    try:
        obj = json.loads(answer)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return answer
    if isinstance(obj, dict):
        obj["replay"] = True
        return encode(obj)
    return answer
