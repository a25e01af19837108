"""How a device's public key is written (``ed25519:`` + base64 of its 32 bytes): in a device's status,
`[fleet_page] device_keys` and the keys files. Here, below everything, so the config check can refuse
a provisioned key that cannot be one (net/device_key.py signs and checks with it)."""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgeclaw.config.schema import Config

ALGORITHM = "ed25519"
PUBLIC_BYTES = 32


def public_key_text(raw: bytes) -> str:
    return f"{ALGORITHM}:{base64.b64encode(raw).decode('ascii')}"


def parse_public_key(text: object) -> bytes:
    """The 32 raw bytes of an announced or provisioned key (``ed25519:BASE64``); ValueError naming
    what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"a device key must be a string {ALGORITHM}:BASE64, got {type(text).__name__}")
    algorithm, sep, body = text.strip().partition(":")
    if not sep or algorithm != ALGORITHM:
        raise ValueError(f"a device key must start with '{ALGORITHM}:', got {text[:40]!r}")
    try:
        raw = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"the device key {text[:60]!r} is not valid base64") from None
    if len(raw) != PUBLIC_BYTES:
        raise ValueError(f"an {ALGORITHM} key is {PUBLIC_BYTES} bytes, {text[:60]!r} holds {len(raw)}")
    return raw


def provisioned_key_problems(config: Config) -> list[tuple[str, str]]:
    """[fleet_page] device_keys: each must be a key (the page would refuse to start on it)."""
    problems: list[tuple[str, str]] = []
    for device, key in config.fleet_page.device_keys.items():
        try:
            parse_public_key(key)
        except ValueError as e:
            problems.append((f"fleet_page.device_keys.{device}", str(e)))
    return problems
