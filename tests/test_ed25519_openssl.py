"""The device's Ed25519 through the interpreter's own libcrypto: RFC 8032's vectors, the same
signatures as `cryptography`'s, and a device that falls back to `cryptography` when the binding
cannot be used."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519 as reference

from edgeclaw.config.device_key_text import parse_public_key
from edgeclaw.net import device_key, ed25519_openssl
from edgeclaw.net.device_key import DeviceKey, verify

# RFC 8032 section 7.1, TEST 1 and TEST 2: (secret key, public key, message, signature).
RFC8032 = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25"
        "bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c"
        "387b2eaeb4302aeeb00d291612bb0c00",
    ),
]


@pytest.mark.parametrize(("secret", "public", "message", "signature"), RFC8032)
def test_the_rfc_8032_vectors_sign_and_verify(secret: str, public: str, message: str, signature: str):
    key = ed25519_openssl.PrivateKey(bytes.fromhex(secret))
    assert key.public_bytes().hex() == public
    assert key.sign(bytes.fromhex(message)).hex() == signature
    assert ed25519_openssl.verify(bytes.fromhex(public), bytes.fromhex(signature), bytes.fromhex(message))


def test_signatures_match_cryptography_both_ways():
    for size in (0, 1, 63, 64, 1000, 70_000):
        seed, message = os.urandom(32), os.urandom(size)
        ours = ed25519_openssl.PrivateKey(seed)
        theirs = reference.Ed25519PrivateKey.from_private_bytes(seed)
        assert ours.public_bytes() == theirs.public_key().public_bytes_raw()
        signature = ours.sign(message)
        assert signature == theirs.sign(message)  # Ed25519 is deterministic
        theirs.public_key().verify(signature, message)  # raises if cryptography disagrees
        assert ed25519_openssl.verify(ours.public_bytes(), theirs.sign(message), message)


def test_a_changed_message_key_or_signature_does_not_verify():
    key = ed25519_openssl.PrivateKey(os.urandom(32))
    public, message = key.public_bytes(), b"edgeclaw/dev-a/status"
    signature = key.sign(message)
    assert ed25519_openssl.verify(public, signature, message)
    assert not ed25519_openssl.verify(public, signature, message + b"!")
    stranger = ed25519_openssl.PrivateKey(os.urandom(32)).public_bytes()
    assert not ed25519_openssl.verify(stranger, signature, message)
    flipped = bytes([signature[0] ^ 1]) + signature[1:]
    assert not ed25519_openssl.verify(public, flipped, message)
    assert not ed25519_openssl.verify(public, signature[:63], message)
    assert not ed25519_openssl.verify(public[:31], signature, message)
    assert not ed25519_openssl.verify(b"\xff" * 32, signature, message)  # not a point on the curve


def test_a_wrong_seed_length_is_refused_naming_it():
    with pytest.raises(ValueError, match="32 bytes, got 31"):
        ed25519_openssl.PrivateKey(b"\0" * 31)


def test_the_device_uses_openssl_and_falls_back_to_cryptography(tmp_path: Path, monkeypatch):
    assert device_key._ed25519() is ed25519_openssl
    first = DeviceKey.in_state_dir(tmp_path)
    signature = first.sign("t", b"payload")

    def unavailable() -> None:
        raise ed25519_openssl.OpenSSLUnavailable("no shared libcrypto here")

    monkeypatch.setattr(ed25519_openssl, "libcrypto", unavailable)
    again = DeviceKey.in_state_dir(tmp_path)  # the same key file, read by cryptography now
    assert again.public == first.public and again.sign("t", b"payload") == signature
    assert verify(parse_public_key(first.public), "t", b"payload", None, signature)
    assert not verify(parse_public_key(first.public), "t", b"payloaD", None, signature)
