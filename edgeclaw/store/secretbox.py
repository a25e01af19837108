"""Encryption at rest for small secrets in the state database (custom tools' environment values).

AES-256-GCM from the `cryptography` package, an optional dependency (the
`crypto` extra: `pip install 'edgeclaw[crypto]'`) imported only when a
secret is actually sealed or opened; without it sealing and opening raise
`CryptoUnavailable`, naming the extra, and nothing else in edgeclaw needs
it. The format does not depend on how edgeclaw was installed: values sealed
before stay readable once the package is there. The 32-byte key lives in a file of its own in the
state directory, created with mode 0600 and checked at every use (`store.keyfile`: a key file
others may read or write, or another user owns, is refused, saying how to fix it). Each sealed value is
`nonce (12 bytes) || ciphertext+tag`, and the caller's `context` (the tool
name) is bound in as associated data, so a value copied to another row does
not decrypt.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from edgeclaw.errors import BackendError
from edgeclaw.store.keyfile import load_or_create_key

KEY_FILENAME = "secrets.key"
CRYPTO_EXTRA_HINT = "install edgeclaw with the crypto extra: pip install 'edgeclaw[crypto]'"
KEY_BYTES = 32
NONCE_BYTES = 12
LOST = "secrets sealed with it are then lost"  # what removing the key file costs


class CryptoUnavailable(BackendError):
    """The `cryptography` package is missing: sealed secrets can be neither written nor read."""


def _aesgcm() -> tuple[Any, type[Exception]]:
    try:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise CryptoUnavailable(
            "custom tools' environment values are stored encrypted (AES-256-GCM), which needs the "
            f"'cryptography' package; {CRYPTO_EXTRA_HINT}"
        ) from None
    return AESGCM, InvalidTag


class SecretBox:
    def __init__(self, key_path: Path) -> None:
        self.key_path = key_path

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> SecretBox:
        return cls(state_dir / KEY_FILENAME)

    def _load_key(self) -> bytes:
        """The key, read and checked at every use: a key file made readable to others, or swapped
        for another user's, after the first use is refused from then on, not trusted from memory."""
        return load_or_create_key(self.key_path, KEY_BYTES, lost=LOST)

    def seal(self, plaintext: bytes, context: str) -> bytes:
        aesgcm, _ = _aesgcm()  # before the key: no key file is made for nothing
        nonce = os.urandom(NONCE_BYTES)
        return nonce + aesgcm(self._load_key()).encrypt(nonce, plaintext, context.encode())

    def open(self, sealed: bytes, context: str) -> bytes:
        aesgcm, invalid_tag = _aesgcm()
        if len(sealed) < NONCE_BYTES + 16:
            raise BackendError("a sealed secret is truncated")
        nonce, body = sealed[:NONCE_BYTES], sealed[NONCE_BYTES:]
        try:
            return aesgcm(self._load_key()).decrypt(nonce, body, context.encode())
        except invalid_tag:
            raise BackendError(
                f"a sealed secret for {context!r} does not decrypt with {self.key_path} "
                "(wrong key, or the data was altered)"
            ) from None
