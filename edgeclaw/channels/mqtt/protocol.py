"""The MQTT payloads: parsing requests and shaping answers (docs/mqtt.md).

Every problem with a request is a `WireError` (edgeclaw.net.wire) carrying a short machine code
and a sentence naming the problem; the channel turns it into an error answer,
so a caller always learns what was wrong.

Error codes: `bad_json` (not JSON, not an object, or JSON this device will not
take: nested deeper than `MAX_JSON_DEPTH`, numbers too long or not finite),
`missing_field`, `bad_field`, `too_large`, `bad_signature`, `stale`,
`retained`, `bad_response_topic`, `busy`, `interrupted`, `stopping`,
`cancelled`, `internal`, `no_agent` (chat), `unknown_approval`, `wrong_action`,
`admin_disabled`, `invalid_definition`, `not_found`, `unavailable`, and for
tool calls the registry's own stages (`unknown_tool`, `arguments`, `policy`,
`rate_limit`, `bounds`, `tool_error`, `timeout`, ...).
"""

from __future__ import annotations

import json
import time
from typing import Any

from edgeclaw.channels.mqtt.topics import reserved_topic
from edgeclaw.net.wire import WireError, load_json
from edgeclaw.records import dataclass
from edgeclaw.tools.approval import Decision
from edgeclaw.tools.registry import CallOutcome

MAX_ID_CHARS = 200
MAX_NAME_CHARS = 200
MAX_RESPONSE_TOPIC_CHARS = 512

# Suffixes of command topics: an answer must never be published to one, or an answer to one device
# could be replayed as a command to another -- under any prefix, not only ours.
COMMAND_SUFFIXES = (
    "/tool/call", "/tool/cancel", "/chat/in", "/approval/response", "/admin/tools", "/admin/cron",
    "/admin/gateway",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Route:
    """Where an answer goes: the request's Response Topic and Correlation Data, or a fallback topic."""

    topic: str
    correlation: bytes | None = None
    # Set for a command to the fleet or a group: every answer names the device that gives it, so a
    # backend collecting a hundred answers on one Response Topic can tell them apart.
    device: str | None = None


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
    stream: bool = False  # partial answers before the final one (channels.mqtt.partials)


@dataclass(frozen=True, slots=True)
class AdminRequest:
    """`admin/tools`: define (or replace) a custom tool, remove one, or list them."""

    id: str
    action: str  # "define" | "remove" | "list"
    definition: dict[str, Any] | None = None
    name: str = ""


ADMIN_ACTIONS = ("define", "remove", "list")
# Fields of an admin/cron or admin/gateway request that are the request's, not the tool's arguments.
ADMIN_CALL_ENVELOPE = ("id", "ts", "sender")


@dataclass(frozen=True, slots=True)
class AdminCall:
    """`admin/cron`, `admin/gateway`: `{"id", "action", ...}` is one call of that tool; every field
    but the envelope (`id`, `ts`, `sender`) is its arguments, and `job` names the job (the tool's
    own `id` argument, which the request's id would otherwise hide)."""

    id: str
    tool: str  # "cron" | "gateway"
    args: dict[str, Any]

    @property
    def action(self) -> str:
        return str(self.args.get("action", ""))


def parse_admin_call(obj: dict[str, Any], tool: str) -> AdminCall:
    what = f"admin/{tool}"
    request_id = _text_field(obj, "id", what, required=True, limit=MAX_ID_CHARS)
    _text_field(obj, "action", what, required=True, limit=40)
    args = {k: v for k, v in obj.items() if k not in ADMIN_CALL_ENVELOPE and k != "job"}
    if "job" in obj:
        args["id"] = _text_field(obj, "job", what, required=True, limit=MAX_ID_CHARS)
    return AdminCall(request_id, tool, args)


def admin_call_answer(request_id: str, action: str, outcome: CallOutcome) -> dict[str, Any]:
    """Like a tool call's answer, with the admin action named."""
    answer = tool_answer(request_id, outcome)
    answer["action"] = action
    return answer


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """`tool/cancel`: `{"id": "c1", "cancel": "ID"}` stops the running (or waiting) call `ID`."""

    id: str
    target: str
    sender: str = ""  # as on the call: only a call of the same caller can be cancelled


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    id: str
    decision: Decision
    action_digest: str  # the question's, naming the action decided on


def encode(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def response_topic_problem(topic: str, prefix: str, discovery_prefix: str) -> str | None:
    """Why we will not publish an answer to this Response Topic, or None when we will.

    Refused: wildcards, `$` topics, control characters (they would also make the signed input
    ambiguous, see net/signing.py), any topic ending in a command suffix, and every topic that belongs
    to the devices under `prefix` (their reports and commands, any device's) or to Home Assistant.
    """
    if not topic:
        return "it is empty"
    if len(topic) > MAX_RESPONSE_TOPIC_CHARS:
        return f"it is longer than {MAX_RESPONSE_TOPIC_CHARS} characters"
    if any(c in topic for c in "#+"):
        return "it has MQTT wildcards"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in topic):
        return "it has control characters"
    if topic.startswith("$"):
        return "it is a broker topic ($...)"
    if topic.endswith(COMMAND_SUFFIXES):
        return "it is a command topic"
    return reserved_topic(topic, prefix, discovery_prefix)


def safe_response_topic(
    topic: str, prefix: str = "edgeclaw", discovery_prefix: str = "homeassistant"
) -> bool:
    """A Response Topic we are willing to publish to."""
    return response_topic_problem(topic, prefix, discovery_prefix) is None


# -- parsing ---------------------------------------------------------------
def parse_json_object(payload: bytes | str, what: str) -> dict[str, Any]:
    value = load_json(payload, what)
    if not isinstance(value, dict):
        raise WireError("bad_json", f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def _text_field(obj: dict[str, Any], key: str, what: str, *, required: bool, limit: int) -> str:
    value = obj.get(key)
    if value is None:
        if required:
            raise WireError("missing_field", f"{what}: missing field {key!r}", request_id_of(obj))
        return ""
    # Strings only: a number coerced to text would make `1` and `"1"` the same request id.
    if not isinstance(value, str):
        raise WireError(
            "bad_field",
            f"{what}: field {key!r} must be a string, got {_json_type(value)}",
            request_id_of(obj),
        )
    if required and not value:
        raise WireError("missing_field", f"{what}: field {key!r} is empty", request_id_of(obj))
    if len(value) > limit:
        raise WireError(
            "bad_field", f"{what}: field {key!r} is longer than {limit} characters", request_id_of(obj)
        )
    return value


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def request_id_of(obj: dict[str, Any]) -> str | None:
    """The request id when it is usable, so even an error answer can be matched to its request."""
    value = obj.get("id")
    if not isinstance(value, str):
        return None
    return value if 0 < len(value) <= MAX_ID_CHARS else None


# Past this size a refused payload is not parsed just to find its id.
PEEK_MAX_BYTES = 1 << 20


def peek_id(payload: bytes) -> str | None:
    """Best effort: the id of a request refused before it was parsed (or authenticated), also from
    inside a signed envelope, so the caller can match the error answer to its request."""
    if len(payload) > PEEK_MAX_BYTES:
        return None
    try:
        obj = load_json(payload, "")
        if isinstance(obj, dict) and isinstance(obj.get("signed"), str):
            obj = load_json(obj["signed"], "")
    except WireError:
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
    """JSON `{"text", "session"?, "sender"?, "id"?, "stream"?}`, or plain UTF-8 text."""
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
        stream = obj.get("stream", False)
        if not isinstance(stream, bool):
            raise WireError("bad_field", f"{what}: field 'stream' must be true or false", request_id)
        return ChatRequest(
            text,
            session=_text_field(obj, "session", what, required=False, limit=MAX_NAME_CHARS),
            sender=_text_field(obj, "sender", what, required=False, limit=MAX_NAME_CHARS),
            id=request_id,
            stream=stream,
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
        verdict = Decision(decision)
    except ValueError:
        allowed = ", ".join(d.value for d in Decision)
        raise WireError(
            "bad_field", f"{what}: decision must be one of {allowed}, got {decision!r}", request_id
        ) from None
    digest = _text_field(obj, "action_digest", what, required=False, limit=64)
    if not digest:
        raise WireError(
            "missing_field",
            f"{what}: missing field 'action_digest': copy it from the approval request answered, so the "
            "decision holds only for the action that was asked about",
            request_id,
        )
    if len(digest) != 64 or digest.strip("0123456789abcdef"):
        raise WireError(
            "bad_field", f"{what}: action_digest must be 64 lower-case hex digits (SHA-256)", request_id
        )
    return ApprovalAnswer(request_id, verdict, digest)


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


def parse_cancel(obj: dict[str, Any]) -> CancelRequest:
    what = "tool/cancel"
    request_id = _text_field(obj, "id", what, required=True, limit=MAX_ID_CHARS)
    target = _text_field(obj, "cancel", what, required=True, limit=MAX_ID_CHARS)
    sender = _text_field(obj, "sender", what, required=False, limit=MAX_NAME_CHARS)
    return CancelRequest(request_id, target, sender)


def check_fresh(obj: dict[str, Any], max_age_s: float, now: float | None = None) -> None:
    """For signed commands: a `ts` (Unix seconds) within `hmac_max_age_s` of now. With the request
    ledger remembering ids for at least twice that (a config check), a captured signed command
    can never run twice: while it is fresh the ledger knows it, and after that it is stale."""
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
    """`for_llm` always; `for_user` only when it says something else (one text is sent once);
    `data` when the tool returned structured data."""
    answer: dict[str, Any] = {"id": request_id, "ok": outcome.ok, "tool": outcome.tool}
    if outcome.for_user is not None and outcome.for_user != outcome.for_llm:
        answer["for_user"] = outcome.for_user
    answer["for_llm"] = outcome.for_llm
    data = getattr(outcome, "data", None)
    if data is not None:
        answer["data"] = data
    if outcome.error is not None:
        answer["error"] = outcome.error
    if not outcome.ok:
        answer["code"] = outcome.stage
    answer["duration_ms"] = round(outcome.duration_ms, 3)
    return answer


def tool_error(request_id: str | None, tool: str | None, code: str, message: str) -> dict[str, Any]:
    return {"id": request_id, "ok": False, "tool": tool, "error": message, "code": code, "duration_ms": 0.0}


def chat_answer(text: str, session: str | None, ok: bool, request_id: str | None) -> dict[str, Any]:
    answer: dict[str, Any] = {"text": text, "session": session, "ok": ok}
    if request_id is not None:
        answer["in_reply_to"] = request_id
    return answer


def chat_error(request_id: str | None, session: str | None, code: str, message: str) -> dict[str, Any]:
    """`session` is None for a request refused before it was understood."""
    answer = chat_answer(message, session, False, request_id)
    answer["error"] = message
    answer["code"] = code
    return answer


def admin_error(request_id: str | None, action: str | None, code: str, message: str) -> dict[str, Any]:
    return {"id": request_id, "ok": False, "action": action, "error": message, "code": code}


def cancel_answer(request_id: str | None, target: str | None, state: str) -> dict[str, Any]:
    """The answer to a cancel: `state` is what the cancelled call was doing ("running", "waiting")."""
    return {"id": request_id, "ok": True, "cancel": target, "state": state}


def cancel_error(request_id: str | None, target: str | None, code: str, message: str) -> dict[str, Any]:
    return {"id": request_id, "ok": False, "cancel": target, "error": message, "code": code}


def replayed(answer: bytes) -> bytes:
    """A stored answer sent to a caller's retry (a new publish of a request already answered),
    marked so the caller can tell it is a repeat. A copy the broker redelivers gets none."""
    try:
        obj = json.loads(answer)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return answer
    if isinstance(obj, dict):
        obj["replay"] = True
        return encode(obj)
    return answer
