"""Signed commands: HMAC-SHA256 with a shared secret, for brokers without per-topic ACLs.

When a secret is configured, every command (tool/call, chat/in,
approval/response, admin/tools) must be signed; anything else is answered
with `bad_signature` and not run. The MAC covers the topic and the exact
payload bytes, ``HMAC(secret, topic + "\\n" + payload)``, so a signed command
for one device cannot be replayed to another. Two ways to carry it:

* MQTT 5: the payload as usual plus a user property ``hmac`` = hex digest;
* any protocol: an envelope ``{"signed": "<the request JSON as a string>",
  "hmac": "<hex digest over that string>"}``.

Replays to the same device are stopped by the request ledger within its
window, and beyond it by `hmac_max_age_s` (a `ts` in the signed request).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from edgeclaw.channels.mqtt.protocol import WireError

USER_PROPERTY = "hmac"


def mac(secret: bytes, topic: str, payload: bytes) -> str:
    return hmac.new(secret, topic.encode("utf-8") + b"\n" + payload, hashlib.sha256).hexdigest()


def envelope(secret: bytes, topic: str, request: dict[str, Any] | str) -> bytes:
    """Wrap a request in a signed envelope (for MQTT 3.1.1 callers, tests and tools)."""
    text = request if isinstance(request, str) else json.dumps(request, separators=(",", ":"))
    return json.dumps({"signed": text, "hmac": mac(secret, topic, text.encode("utf-8"))}).encode("utf-8")


class Verifier:
    def __init__(self, secret: str) -> None:
        if not secret:
            raise ValueError("an HMAC secret must not be empty")
        self._secret = secret.encode("utf-8")

    def verify(self, topic: str, payload: bytes, user_properties: list[tuple[str, str]] | None) -> bytes:
        """The authenticated request bytes; WireError("bad_signature") for a missing or wrong signature."""
        for name, value in user_properties or ():
            if name == USER_PROPERTY:
                if self._check(topic, payload, value):
                    return payload
                raise WireError("bad_signature", "the hmac user property does not match the payload")
        if payload.lstrip().startswith(b"{"):
            try:
                outer = json.loads(payload)
            except (UnicodeDecodeError, json.JSONDecodeError):
                outer = None
            if isinstance(outer, dict) and set(outer) == {"signed", "hmac"}:
                signed, digest = outer["signed"], outer["hmac"]
                if isinstance(signed, str) and isinstance(digest, str):
                    body = signed.encode("utf-8")
                    if self._check(topic, body, digest):
                        return body
                raise WireError("bad_signature", "the envelope's hmac does not match its signed payload")
        raise WireError(
            "bad_signature",
            "this device requires signed commands: add an 'hmac' user property or send a signed envelope",
        )

    def _check(self, topic: str, payload: bytes, digest: str) -> bool:
        # compare_digest: the time taken must not tell an attacker how many characters were right.
        return hmac.compare_digest(mac(self._secret, topic, payload), digest.strip().lower())
