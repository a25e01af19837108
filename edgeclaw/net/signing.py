"""Signed commands: HMAC-SHA256 with a shared secret, for brokers without per-topic ACLs.

When a command key is configured, every command (tool/call, tool/cancel,
chat/in, admin/tools) must be signed with it; approval responses are signed
with the approver key, a different secret, so whoever may send commands
cannot approve them. Anything else is answered with `bad_signature` and not
run.

The MAC input binds the message to where it was sent and where its answer
goes, so a captured command can neither be sent to another device nor have
its answer redirected::

    topic "\\n" response_topic "\\n" hex(correlation_data) "\\n" payload

`response_topic` and the hex of the Correlation Data are empty when the
message has none (MQTT 3.1.1 never has them). None of the first three can hold
a newline (a Response Topic with control characters is refused before this),
so the fields cannot be shifted into one another. Two ways to carry the MAC:

* MQTT 5: the payload as usual plus a user property ``hmac`` = hex digest;
* any protocol: an envelope ``{"signed": "<the request JSON as a string>",
  "hmac": "<hex digest, with that string as the payload>"}``.

The signature names its key: a user property ``key`` = the caller's name beside ``hmac``, or a
``"key"`` member of the envelope. The name only says which caller's secret to check the MAC
against (a wrong name simply fails); it is not part of the MAC input. Without a name, the device
checks the one legacy key the topic takes (docs/security.md).

Signed requests also carry `ts` (Unix seconds); see protocol.check_fresh for
why that and the request ledger together stop every replay.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

from edgeclaw.net.wire import WireError, load_json

USER_PROPERTY = "hmac"
KEY_PROPERTY = "key"  # the name of the key that signed, beside `hmac` (MQTT 5)


def signed_input(
    topic: str, payload: bytes, response_topic: str | None = None, correlation: bytes | None = None
) -> bytes:
    """The exact bytes the MAC is computed over (see the module doc)."""
    head = f"{topic}\n{response_topic or ''}\n{(correlation or b'').hex()}\n"
    return head.encode("utf-8", "surrogatepass") + payload


def mac(
    secret: bytes,
    topic: str,
    payload: bytes,
    response_topic: str | None = None,
    correlation: bytes | None = None,
) -> str:
    return hmac.new(
        secret, signed_input(topic, payload, response_topic, correlation), hashlib.sha256
    ).hexdigest()


def envelope(
    secret: bytes,
    topic: str,
    request: dict[str, Any] | str,
    *,
    response_topic: str | None = None,
    correlation: bytes | None = None,
    stamp: bool = True,
    key: str | None = None,
) -> bytes:
    """Wrap a request in a signed envelope (for MQTT 3.1.1 callers, tests and tools).

    With `stamp`, a dict request without a `ts` gets the current time, as signed requests need.
    Pass the Response Topic and Correlation Data the message will be published with (MQTT 5).
    `key` names the caller whose secret signs it (the envelope's "key" member).
    """
    if isinstance(request, dict):
        if stamp and "ts" not in request:
            request = {**request, "ts": round(time.time(), 3)}
        text = json.dumps(request, separators=(",", ":"))
    else:
        text = request
    digest = mac(secret, topic, text.encode("utf-8"), response_topic, correlation)
    outer = {"signed": text, "hmac": digest}
    if key is not None:
        outer["key"] = key
    return json.dumps(outer).encode("utf-8")


def signed_envelope(payload: bytes) -> dict[str, Any] | None:
    """The payload as a signed envelope ({"signed", "hmac"} and maybe "key"), or None when it has
    another shape (then it is not an envelope at all, rather than a bad one)."""
    if not payload.lstrip().startswith(b"{"):
        return None
    try:
        outer = load_json(payload, "signed envelope")
    except WireError:
        return None
    if isinstance(outer, dict) and set(outer) in ({"signed", "hmac"}, {"signed", "hmac", "key"}):
        return outer
    return None


def signing_key_name(payload: bytes, user_properties: list[tuple[str, str]] | None) -> str | None:
    """The key a message says signed it: the `key` user property, else an envelope's "key" member;
    None when it names none. Only a name to look up: the MAC decides whether it is true."""
    for name, value in user_properties or ():
        if name == KEY_PROPERTY:
            return value
    outer = signed_envelope(payload)
    if outer is None or "key" not in outer:
        return None
    return outer["key"] if isinstance(outer["key"], str) else ""


def carries_signature(payload: bytes, user_properties: list[tuple[str, str]] | None) -> bool:
    """Whether the message is signed at all (right or wrong): an `hmac` user property, or the shape
    of a signed envelope."""
    if any(name == USER_PROPERTY for name, _ in user_properties or ()):
        return True
    return signed_envelope(payload) is not None


class Verifier:
    """Checks messages signed with one named key; `identity` is how callers using it are known."""

    def __init__(self, secret: str, name: str = "command") -> None:
        if not secret:
            raise ValueError("an HMAC secret must not be empty")
        self._secret = secret.encode("utf-8")
        self.name = name

    @property
    def identity(self) -> str:
        return f"mqtt:{self.name}"

    def same_secret(self, other: Verifier) -> bool:
        return hmac.compare_digest(self._secret, other._secret)

    def verify(
        self,
        topic: str,
        payload: bytes,
        user_properties: list[tuple[str, str]] | None,
        response_topic: str | None = None,
        correlation: bytes | None = None,
    ) -> bytes:
        """The authenticated request bytes; WireError("bad_signature") for a missing or wrong signature."""
        body = self.signed_body(topic, payload, user_properties, response_topic, correlation)
        if body is None:
            raise WireError(
                "bad_signature",
                "this device requires signed commands: add an 'hmac' user property or send a signed envelope",
            )
        return body

    def signed_body(
        self,
        topic: str,
        payload: bytes,
        user_properties: list[tuple[str, str]] | None,
        response_topic: str | None = None,
        correlation: bytes | None = None,
    ) -> bytes | None:
        """Like `verify`, but None when the message carries no signature at all."""
        for name, value in user_properties or ():
            if name == USER_PROPERTY:
                if self._check(topic, payload, value, response_topic, correlation):
                    return payload
                raise WireError(
                    "bad_signature",
                    "the hmac user property does not match the topic, Response Topic, Correlation Data "
                    "and payload",
                )
        outer = signed_envelope(payload)
        if outer is None:
            return None
        signed, digest = outer["signed"], outer["hmac"]
        if isinstance(signed, str) and isinstance(digest, str):
            body = signed.encode("utf-8", "surrogatepass")
            if self._check(topic, body, digest, response_topic, correlation):
                return body
        raise WireError(
            "bad_signature",
            "the envelope's hmac does not match its signed payload (with the topic, Response "
            "Topic and Correlation Data)",
        )

    def _check(
        self,
        topic: str,
        payload: bytes,
        digest: str,
        response_topic: str | None,
        correlation: bytes | None,
    ) -> bool:
        expected = mac(self._secret, topic, payload, response_topic, correlation).encode("ascii")
        # Bytes, not str: compare_digest refuses non-ASCII text with a TypeError, and a caller's
        # digest may hold anything. Whole values compared, so a prefix (or nothing) never matches;
        # compare_digest takes the same time however many characters are right.
        given = digest.strip().lower().encode("utf-8", "surrogatepass")
        return hmac.compare_digest(expected, given)
