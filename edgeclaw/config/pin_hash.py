"""The PIN (or password) hash format of the console's login gate, and making one.

The configuration holds only a hash in PHC string form, made by
`edgeclaw console hash-pin`:

    $scrypt$ln=14,r=8,p=1$<salt>$<hash>         (the default)
    $pbkdf2-sha256$i=200000$<salt>$<hash>

salt and hash in unpadded standard base64. Checking always derives the full
hash and compares with `hmac.compare_digest`, so the time taken does not
depend on how much of a guess was right.

It sits with the configuration because `config check` validates the format,
and the loader must not reach up into the console channel for that.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

from edgeclaw.records import dataclass

MIN_PIN_LENGTH = 4
MAX_PIN_LENGTH = 256
SCRYPT_LOG2_N = 14  # 16 MiB of memory; a fraction of a second to a second on Pi-class CPUs
SCRYPT_R = 8
SCRYPT_P = 1
PBKDF2_ITERATIONS = 200_000
# Bounds on what a configured hash may demand per login, so a mistyped parameter cannot
# exhaust a small board's memory or stall every login for minutes.
MAX_SCRYPT_BYTES = 64 * 1024 * 1024
MAX_PBKDF2_ITERATIONS = 5_000_000
_SALT_BYTES = 16
_HASH_BYTES = 32


class PinHashError(ValueError):
    """The configured hash is not in a form this version understands."""


@dataclass(frozen=True)
class PinHash:
    """A console PIN or password hash as stored in console.login_hash."""

    algorithm: str  # "scrypt" or "pbkdf2-sha256"
    params: dict[str, int]
    salt: bytes
    digest: bytes

    def derive(self, pin: str) -> bytes:
        secret = pin.encode("utf-8", "surrogatepass")
        if self.algorithm == "scrypt":
            n = 1 << self.params["ln"]
            r, p = self.params["r"], self.params["p"]
            return hashlib.scrypt(
                secret, salt=self.salt, n=n, r=r, p=p, maxmem=256 * n * r + (1 << 20), dklen=len(self.digest)
            )
        return hashlib.pbkdf2_hmac("sha256", secret, self.salt, self.params["i"], dklen=len(self.digest))

    def matches(self, pin: str) -> bool:
        # Derive even for absurd input lengths (capped), so timing says nothing about the entry;
        # an entry past the cap is wrong whatever its first characters (no PIN is that long).
        same = hmac.compare_digest(self.derive(pin[:MAX_PIN_LENGTH]), self.digest)
        return same and len(pin) <= MAX_PIN_LENGTH

    def encode(self) -> str:
        params = ",".join(f"{k}={v}" for k, v in self.params.items())
        return f"${self.algorithm}${params}${_b64(self.salt)}${_b64(self.digest)}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


_PARAMS = {"scrypt": ("ln", "r", "p"), "pbkdf2-sha256": ("i",)}


def parse_pin_hash(text: str) -> PinHash:
    """Parse a PHC-style hash string; raises PinHashError naming what is wrong."""
    parts = text.strip().split("$")
    if len(parts) != 5 or parts[0] != "":
        raise PinHashError("expected $ALGORITHM$PARAMS$SALT$HASH (make one with `edgeclaw console hash-pin`)")
    _, algorithm, params_text, salt_text, digest_text = parts
    if algorithm not in _PARAMS:
        raise PinHashError(f"unknown hash algorithm {algorithm!r} (expected scrypt or pbkdf2-sha256)")
    params: dict[str, int] = {}
    for item in params_text.split(","):
        key, _, value = item.partition("=")
        if key not in _PARAMS[algorithm] or not (value.isascii() and value.isdigit()):  # not "²"
            raise PinHashError(f"bad parameter {item!r} for {algorithm}")
        params[key] = int(value)
    missing = [k for k in _PARAMS[algorithm] if k not in params]
    if missing:
        raise PinHashError(f"{algorithm} hash lacks {', '.join(missing)}")
    if algorithm == "scrypt":
        if not (10 <= params["ln"] <= 20 and 1 <= params["r"] <= 32 and 1 <= params["p"] <= 16):
            raise PinHashError("scrypt parameters out of range (ln 10-20, r 1-32, p 1-16)")
        if 128 * params["r"] * (1 << params["ln"]) > MAX_SCRYPT_BYTES:
            raise PinHashError(f"scrypt parameters need more than {MAX_SCRYPT_BYTES >> 20} MiB per check")
    if algorithm == "pbkdf2-sha256" and not 10_000 <= params["i"] <= MAX_PBKDF2_ITERATIONS:
        raise PinHashError(f"pbkdf2-sha256 needs 10000 to {MAX_PBKDF2_ITERATIONS} iterations")
    try:
        salt, digest = _unb64(salt_text), _unb64(digest_text)
    except (binascii.Error, ValueError):
        raise PinHashError("salt and hash must be base64") from None
    if len(salt) < 8 or len(digest) < 16:
        raise PinHashError("salt (>= 8 bytes) or hash (>= 16 bytes) too short")
    return PinHash(algorithm, params, salt, digest)


def hash_pin(pin: str, algorithm: str = "scrypt") -> str:
    """A fresh salted hash of `pin` in the form `parse_pin_hash` reads."""
    if not MIN_PIN_LENGTH <= len(pin) <= MAX_PIN_LENGTH:
        raise ValueError(f"a PIN or password must have {MIN_PIN_LENGTH} to {MAX_PIN_LENGTH} characters")
    salt = secrets.token_bytes(_SALT_BYTES)
    if algorithm == "scrypt":
        params = {"ln": SCRYPT_LOG2_N, "r": SCRYPT_R, "p": SCRYPT_P}
    elif algorithm == "pbkdf2-sha256":
        params = {"i": PBKDF2_ITERATIONS}
    else:
        raise ValueError(f"unknown algorithm {algorithm!r}")
    shell = PinHash(algorithm, params, salt, b"\0" * _HASH_BYTES)
    return PinHash(algorithm, params, salt, shell.derive(pin)).encode()
