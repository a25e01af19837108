"""Each device's own signing key: what it publishes is signed, so a page or a peer can tell it from a
message another MQTT client published in its name.

The key is Ed25519, signed and checked by the OpenSSL the interpreter's `ssl` module already
loaded (`net.ed25519_openssl`: ~0.5 MiB, where importing `cryptography` costs ~8 MiB), else by the
`cryptography` package (the `crypto` extra). The device makes it at its first start: 32 random bytes
in `device.key` in the state directory, mode 0600, checked at every load like `secrets.key`
(`store.keyfile`). Its public half is announced in the retained `status` as `device_key`:
``"ed25519:" + base64(32-byte public key)``. With neither library (or with a key file that may not
be used, or over MQTT 3.1.1, which has no user properties) the device signs nothing and says why in
`status` (`device_key_problem`); a page then treats it as unverifiable.

Every message the device publishes carries an MQTT 5 user property ``sig`` = base64 of the
signature over::

    "edgeclaw-device-sig/1\\n" topic "\\n" hex(correlation_data) "\\n" payload

(the hex is empty when the message has no Correlation Data). The topic binds the message to where
it was published (another device's topic, another kind of message), the Correlation Data binds an
answer to the request it answers (a genuine answer copied onto another request does not verify).
The signature does not stop a genuine message being published again as it was (a retained status
put back): readers judge freshness by its `ts`, `expires_at` or id.
"""

from __future__ import annotations

import base64
import binascii
import logging
from pathlib import Path
from typing import Any

from edgeclaw.config.device_key_text import public_key_text

log = logging.getLogger("edgeclaw.device_key")

KEY_FILENAME = "device.key"
SIG_PROPERTY = "sig"  # the MQTT 5 user property carrying the signature
CONTEXT = b"edgeclaw-device-sig/1\n"  # a signature made for this can be used for nothing else
SEED_BYTES = 32
SIGNATURE_BYTES = 64
CRYPTO_HINT = "install edgeclaw with the crypto extra: pip install 'edgeclaw[crypto]'"


class DeviceKeyUnavailable(Exception):
    """No device key can be used here (the package is missing, the key file may not be used): the
    message says why."""


def signed_input(topic: str, payload: bytes, correlation: bytes | None = None) -> bytes:
    """The exact bytes a device signs (see the module doc)."""
    head = f"{topic}\n{(correlation or b'').hex()}\n"
    return CONTEXT + head.encode("utf-8", "surrogatepass") + payload


def _ed25519() -> Any:
    """The Ed25519 implementation to use: OpenSSL through `ed25519_openssl`, else `cryptography`'s
    (wrapped to the same three calls); DeviceKeyUnavailable when there is neither."""
    from edgeclaw.net import ed25519_openssl

    try:
        ed25519_openssl.libcrypto()
        return ed25519_openssl
    except ed25519_openssl.OpenSSLUnavailable as e:
        openssl_problem = str(e)
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise DeviceKeyUnavailable(
            f"device signatures need OpenSSL 1.1.1 or the 'cryptography' package ({openssl_problem}); "
            f"{CRYPTO_HINT}"
        ) from None
    return _CryptographyEd25519(ed25519)


def signing_problem() -> str | None:
    """Why nothing here can sign or check a device signature, or None when something can."""
    try:
        _ed25519()
    except DeviceKeyUnavailable as e:
        return str(e)
    return None


class _CryptographyEd25519:
    """`cryptography`'s Ed25519 behind the calls `ed25519_openssl` offers."""

    def __init__(self, ed25519: Any) -> None:
        self._ed25519 = ed25519

    def PrivateKey(self, seed: bytes) -> _CryptographyPrivateKey:  # named as in ed25519_openssl
        return _CryptographyPrivateKey(self._ed25519.Ed25519PrivateKey.from_private_bytes(seed))

    def verify(self, public_key: bytes, signature: bytes, message: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature

        try:
            self._ed25519.Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


class _CryptographyPrivateKey:
    def __init__(self, private: Any) -> None:
        self._private = private

    def public_bytes(self) -> bytes:
        return self._private.public_key().public_bytes_raw()

    def sign(self, message: bytes) -> bytes:
        return self._private.sign(message)


def signature_of(user_properties: list[tuple[str, str]] | None) -> str | None:
    """The `sig` user property of a message, or None when it has none."""
    for name, value in user_properties or ():
        if name == SIG_PROPERTY:
            return value
    return None


def verify(
    public_key: bytes, topic: str, payload: bytes, correlation: bytes | None, signature: str | None
) -> bool:
    """Whether `signature` (base64) is the device's with `public_key` over this message. False for a
    missing or malformed signature; DeviceKeyUnavailable when nothing here can check one."""
    ed25519 = _ed25519()
    if not signature:
        return False
    try:
        raw = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        return False
    if len(raw) != SIGNATURE_BYTES:
        return False
    return ed25519.verify(public_key, raw, signed_input(topic, payload, correlation))


class DeviceKey:
    """The device's private key, loaded (or made) from its file in the state directory."""

    def __init__(self, private: Any) -> None:
        self._private = private
        self.public = public_key_text(private.public_bytes())

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> DeviceKey:
        """The key in `state_dir/device.key`, made there (mode 0600) at the first start.
        DeviceKeyUnavailable when the package is missing or the key file may not be used."""
        from edgeclaw.errors import BackendError
        from edgeclaw.store.keyfile import load_or_create_key

        ed25519 = _ed25519()  # before the file: no key is made that nothing could use
        try:
            seed = load_or_create_key(
                state_dir / KEY_FILENAME,
                SEED_BYTES,
                lost="the device gets a new key, which every page that pinned the old one must re-pin",
            )
        except BackendError as e:
            raise DeviceKeyUnavailable(str(e)) from None
        return cls(ed25519.PrivateKey(seed))

    def sign(self, topic: str, payload: bytes, correlation: bytes | None = None) -> str:
        """The `sig` user property's value for this message."""
        signature = self._private.sign(signed_input(topic, payload, correlation))
        return base64.b64encode(signature).decode("ascii")


class DeviceSigner:
    """What the device's connection signs with: its key once loaded, or why there is none.

    Loaded once, off the event loop (`load`), before the first connection: reading the key file and
    binding the library are start-up work nothing needs to wait for.
    """

    def __init__(self, state_dir: Path, *, v5: bool = True) -> None:
        self.state_dir = state_dir
        self._v5 = v5
        self.key: DeviceKey | None = None
        self.problem: str | None = None if v5 else 'device signatures need MQTT 5 (mqtt.protocol = "5")'
        self._loaded = not v5

    def load(self) -> None:
        """Load (or make) the key; a problem is kept and logged, never raised: the device still runs,
        and says in its status that it signs nothing."""
        if self._loaded:
            return
        self._loaded = True
        try:
            self.key = DeviceKey.in_state_dir(self.state_dir)
        except DeviceKeyUnavailable as e:
            self.problem = str(e)
            log.warning("this device signs nothing it publishes: %s", e)
            return
        # The key a fleet page provisions for this device (fleet_page.device_keys).
        log.info("signing what it publishes with the device key %s", self.key.public)

    @property
    def loaded(self) -> bool:
        return self._loaded

    def status_fields(self) -> dict[str, str | None]:
        """What the retained status says about the key: `device_key`, or `device_key_problem`."""
        if self.key is not None:
            return {"device_key": self.key.public}
        return {"device_key": None, "device_key_problem": self.problem or "the device key is not loaded yet"}

    def sign(self, topic: str, payload: bytes, correlation: bytes | None = None) -> str | None:
        return self.key.sign(topic, payload, correlation) if self.key is not None else None
