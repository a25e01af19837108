"""Ed25519 signing and checking through the OpenSSL the interpreter's `ssl` module already loaded.

Why not `cryptography` on the device: importing it maps its own statically linked OpenSSL and Rust
code, ~8 MiB of resident memory on a daemon whose whole idle footprint is ~40 MiB. The daemon has
already paid for libcrypto (its MQTT link is TLS-capable), and OpenSSL ≥ 1.1.1 signs Ed25519 with
the one-shot `EVP_DigestSign` API, so a few ctypes calls cost ~0.5 MiB instead. The arithmetic stays
OpenSSL's; this module only moves bytes in and out. Where it cannot be used (an interpreter built
without a shared libcrypto, OpenSSL older than 1.1.1) `OpenSSLUnavailable` says why and the caller
falls back to `cryptography`.

Ed25519 is deterministic: the same seed and message give the same signature whichever library
makes it, which the tests use to check this binding against `cryptography` and RFC 8032's vectors.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

EVP_PKEY_ED25519 = 1087  # NID_ED25519 in OpenSSL's obj_mac.h, stable since 1.1.1
SEED_BYTES = 32
PUBLIC_BYTES = 32
SIGNATURE_BYTES = 64

_lock = threading.Lock()
_lib: Any = None
_problem: str | None = None


class OpenSSLUnavailable(Exception):
    """This interpreter's libcrypto cannot sign Ed25519 (the message says why)."""


def _libcrypto_path() -> str | None:
    """The file of the libcrypto mapped into this process (loaded by `_ssl`)."""
    import _ssl  # noqa: F401  (maps libcrypto if the interpreter links it dynamically)

    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").split(" ", 5)[-1].strip()
                if "/libcrypto" in path and ".so" in path:
                    return path
    except OSError:
        return None
    return None


def _bind(lib: Any) -> None:
    p, i, z = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    buf, size_p = ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)
    signatures: dict[str, tuple[Any, list[Any]]] = {
        "EVP_PKEY_new_raw_private_key": (p, [i, p, buf, z]),
        "EVP_PKEY_new_raw_public_key": (p, [i, p, buf, z]),
        "EVP_PKEY_get_raw_public_key": (i, [p, buf, size_p]),
        "EVP_PKEY_free": (None, [p]),
        "EVP_MD_CTX_new": (p, []),
        "EVP_MD_CTX_free": (None, [p]),
        "EVP_DigestSignInit": (i, [p, p, p, p, p]),
        "EVP_DigestSign": (i, [p, buf, size_p, buf, z]),
        "EVP_DigestVerifyInit": (i, [p, p, p, p, p]),
        "EVP_DigestVerify": (i, [p, buf, z, buf, z]),
        "ERR_clear_error": (None, []),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)  # AttributeError: an OpenSSL without the one-shot API
        function.restype = restype
        function.argtypes = argtypes


def libcrypto() -> Any:
    """The bound libcrypto, loaded once; OpenSSLUnavailable naming why it cannot be."""
    global _lib, _problem
    with _lock:
        if _lib is None and _problem is None:
            path = _libcrypto_path()
            if path is None:
                _problem = "this Python's ssl module does not use a shared libcrypto"
            else:
                try:
                    lib = ctypes.CDLL(path)
                    _bind(lib)
                    _lib = lib
                except (OSError, AttributeError) as e:
                    _problem = f"{path} cannot sign Ed25519 (OpenSSL 1.1.1 or later is needed): {e}"
        if _lib is None:
            raise OpenSSLUnavailable(_problem)
        return _lib


class _PKey:
    """An owned EVP_PKEY, freed with its Python object."""

    def __init__(self, lib: Any, handle: int | None, what: str) -> None:
        if not handle:
            raise ValueError(f"OpenSSL refused the Ed25519 {what}")
        self._lib = lib
        self.handle = handle

    def __del__(self) -> None:
        handle, self.handle = getattr(self, "handle", None), None
        if handle:
            self._lib.EVP_PKEY_free(handle)


def _with_md_ctx(lib: Any, use: Any) -> Any:
    ctx = lib.EVP_MD_CTX_new()
    if not ctx:
        raise MemoryError("OpenSSL could not allocate a digest context")
    try:
        return use(ctx)
    finally:
        lib.EVP_MD_CTX_free(ctx)
        # A refused signature leaves entries on the thread's OpenSSL error queue, which the ssl
        # module would otherwise report as the cause of its next, unrelated error.
        lib.ERR_clear_error()


class PrivateKey:
    """An Ed25519 private key held by libcrypto."""

    def __init__(self, seed: bytes) -> None:
        if len(seed) != SEED_BYTES:
            raise ValueError(f"an Ed25519 seed is {SEED_BYTES} bytes, got {len(seed)}")
        self._lib = libcrypto()
        self._key = _PKey(
            self._lib,
            self._lib.EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, None, seed, SEED_BYTES),
            "private key",
        )

    def public_bytes(self) -> bytes:
        out = ctypes.create_string_buffer(PUBLIC_BYTES)
        size = ctypes.c_size_t(PUBLIC_BYTES)
        if self._lib.EVP_PKEY_get_raw_public_key(self._key.handle, out, ctypes.byref(size)) != 1:
            raise ValueError("OpenSSL could not give the Ed25519 public key")
        return out.raw[: size.value]

    def sign(self, message: bytes) -> bytes:
        lib = self._lib

        def sign_with(ctx: int) -> bytes:
            if lib.EVP_DigestSignInit(ctx, None, None, None, self._key.handle) != 1:
                raise ValueError("OpenSSL could not start an Ed25519 signature")
            out = ctypes.create_string_buffer(SIGNATURE_BYTES)
            size = ctypes.c_size_t(SIGNATURE_BYTES)
            if lib.EVP_DigestSign(ctx, out, ctypes.byref(size), message, len(message)) != 1:
                raise ValueError("OpenSSL could not make an Ed25519 signature")
            return out.raw[: size.value]

        return _with_md_ctx(lib, sign_with)


def verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """Whether `signature` is `public_key`'s over `message`. False for anything malformed."""
    if len(public_key) != PUBLIC_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    lib = libcrypto()
    try:
        handle = lib.EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, None, public_key, PUBLIC_BYTES)
        key = _PKey(lib, handle, "public key")
    except ValueError:
        return False

    def verify_with(ctx: int) -> bool:
        if lib.EVP_DigestVerifyInit(ctx, None, None, None, key.handle) != 1:
            return False
        return lib.EVP_DigestVerify(ctx, signature, SIGNATURE_BYTES, message, len(message)) == 1

    return bool(_with_md_ctx(lib, verify_with))
