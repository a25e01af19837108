"""A secret key in a file of its own in the state directory: made once, mode 0600, checked at every read.

The secrets box's key (`secrets.key`) and the device's signing key (`device.key`) are both kept
this way. A key file that others may read or write (any group or other permission bit), that
another user owns (who could have planted it; for a root daemon too), or that is not a regular
file is refused rather than used, saying how to fix it (chmod 600). A new key is written in full
under a temporary name and linked into place, so two processes racing end up with one key and
neither ever reads a half-written one.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from edgeclaw.errors import BackendError


def read_key_file(path: Path, size: int, *, lost: str) -> bytes | None:
    """The `size`-byte key in `path`, or None when there is no such file. BackendError when it may
    not be used; `lost` says what removing it costs ("secrets sealed with it are then lost")."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
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
                f"refusing to use it: chown it to uid {euid} and chmod 600 it, or remove it ({lost})"
            )
        if not stat.S_ISREG(info.st_mode):
            raise BackendError(f"the key file {path} is not a regular file; refusing to use it")
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise BackendError(
                f"the key file {path} has mode {stat.S_IMODE(info.st_mode):04o}: readable by others "
                "(its group or anyone) or writable by them; refusing to use it: chmod 600 it, or "
                f"remove it ({lost})"
            )
        key = os.read(fd, size + 1)
    finally:
        os.close(fd)
    if len(key) != size:
        raise BackendError(f"the key file {path} is not a {size}-byte key")
    return key


def create_key_file(path: Path, key: bytes, *, lost: str) -> bytes:
    """Write `key` to `path` (mode 0600) unless another process got there first: the key in force."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            written = os.write(fd, key)
            if written != len(key):
                raise BackendError(f"cannot write the key file {path}: short write")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            # link() fails when the name exists: the first key written stays the key.
            os.link(tmp, path)
        except FileExistsError:
            existing = read_key_file(path, len(key), lost=lost)
            if existing is None:  # removed again in between: nothing sensible to fall back on
                raise BackendError(f"the key file {path} vanished while it was being made") from None
            return existing
    finally:
        tmp.unlink(missing_ok=True)
    return key


def load_or_create_key(path: Path, size: int, *, lost: str) -> bytes:
    """The key in `path`, made (random) when there is none."""
    key = read_key_file(path, size, lost=lost)
    if key is None:
        key = create_key_file(path, os.urandom(size), lost=lost)
    return key
