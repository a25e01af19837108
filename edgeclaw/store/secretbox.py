"""Encryption at rest for small secrets in the state database (custom tools' environment values).

AES-256-GCM from the `cryptography` package, an optional dependency (the
`crypto` extra: `pip install 'edgeclaw[crypto]'`) imported only when a
secret is actually sealed or opened; without it sealing and opening raise
`CryptoUnavailable`, naming the extra, and nothing else in edgeclaw needs
it. The format does not depend on how edgeclaw was installed: values sealed
before stay readable once the package is there. The 32-byte key lives in a file of its own in the
state directory, created with mode 0600; a key file that others may read or
write (any group or other permission bit), or that another user owns (who
could have planted it; for a root daemon too), is refused rather than used,
at every use, saying how to fix it (chmod 600). Each sealed value is
`nonce (12 bytes) || ciphertext+tag`, and the caller's `context` (the tool
name) is bound in as associated data, so a value copied to another row does
not decrypt.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from edgeclaw.errors import BackendError

KEY_FILENAME = "secrets.key"
CRYPTO_EXTRA_HINT = "install edgeclaw with the crypto extra: pip install 'edgeclaw[crypto]'"
KEY_BYTES = 32
NONCE_BYTES = 12


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
        path = self.key_path
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return self._create_key()
        except OSError as e:
            raise BackendError(f"cannot open the key file {path}: {e.strerror}") from None
        try:
            info = os.fstat(fd)
            euid = os.geteuid()
            if info.st_uid != euid:
                # Also for a root daemon: a key another user owns is one that user could have
                # planted, or can read and change.
                raise BackendError(
                    f"the key file {path} belongs to uid {info.st_uid}, not to this user (uid {euid}); "
                    f"refusing to use it: chown it to uid {euid} and chmod 600 it, or remove it "
                    "(secrets sealed with it are then lost)"
                )
            if not stat.S_ISREG(info.st_mode):
                raise BackendError(f"the key file {path} is not a regular file; refusing to use it")
            if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise BackendError(
                    f"the key file {path} has mode {stat.S_IMODE(info.st_mode):04o}: readable by others "
                    "(its group or anyone) or writable by them; refusing to use it: chmod 600 it, or "
                    "remove it (secrets sealed with it are then lost)"
                )
            key = os.read(fd, KEY_BYTES + 1)
        finally:
            os.close(fd)
        if len(key) != KEY_BYTES:
            raise BackendError(f"the key file {path} is not a {KEY_BYTES}-byte key")
        return key

    def _create_key(self) -> bytes:
        key = os.urandom(KEY_BYTES)
        self.key_path.parent.mkdir(parents=True, exist_ok=True)
        # Written in full under a temporary name, then linked into place: link() fails when the
        # name exists, so two processes racing end up with one key, and neither ever reads a
        # half-written (empty) key file.
        tmp = self.key_path.with_name(f".{self.key_path.name}.{os.getpid()}.{os.urandom(4).hex()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            try:
                os.fchmod(fd, 0o600)  # whatever the umask
                written = os.write(fd, key)
                if written != KEY_BYTES:
                    raise BackendError(f"cannot write the key file {self.key_path}: short write")
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, self.key_path)
            except FileExistsError:
                return self._load_key()
        finally:
            tmp.unlink(missing_ok=True)
        return key

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
