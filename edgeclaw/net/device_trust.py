"""Which key each device's messages must carry: pinned at first sight or provisioned, and the verdict
on each message a reader takes from the broker — the fleet page (docs/fleet.md#device-keys) and a
device's `nodes` tool reading its peers (docs/mqtt.md#device-signatures).

A device announces its public key in its retained status and signs everything it publishes
(net/device_key.py). The reader keeps one pinned key per device:

- provisioned: `[fleet_page] device_keys` (a table DEVICE = "ed25519:BASE64") or lines
  `DEVICE ed25519:BASE64` in `device_keys_file`;
- else, with `trust_on_first_use` (the default), the key of the first status that is signed with
  the key it announces; it is appended to `device_keys_file`, so a restarted page keeps it.

Each message then gets one verdict: `verified` (signed with the pinned key), `forged` (the device
has a pinned key and the message is not signed with it: unsigned, or someone else's), `key_changed`
(a status signed with a new key it announces: the device was re-installed, or someone poses as it;
not trusted until re-pinned) or `unverifiable` (no key is pinned and none can be: the device signs
nothing, first use is off, or this page cannot check signatures because it has neither
OpenSSL 1.1.1 nor `cryptography`).

Re-pinning a device whose key changed: put its new key in place of its line in `device_keys_file`
(or in `device_keys`, then restart), or delete the line to pin it again at first sight. The file is
read again whenever it changed.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from edgeclaw.config.device_key_text import parse_public_key, public_key_text
from edgeclaw.net.device_key import signing_problem, verify

log = logging.getLogger("edgeclaw.device_trust")

VERIFIED = "verified"
FORGED = "forged"
KEY_CHANGED = "key_changed"
UNVERIFIABLE = "unverifiable"


class DeviceKeysError(ValueError):
    """A provisioned key or the keys file cannot be used: the message names which and why."""


def read_keys_file(path: Path) -> dict[str, bytes]:
    """DEVICE -> key from `path` (missing file: none); DeviceKeysError naming the line at fault."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        raise DeviceKeysError(f"cannot read the device keys file {path}: {e}") from None
    keys: dict[str, bytes] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise DeviceKeysError(
                f"{path} line {number}: expected 'DEVICE ed25519:BASE64', got {line[:80]!r}"
            )
        try:
            keys[parts[0]] = parse_public_key(parts[1])
        except ValueError as e:
            raise DeviceKeysError(f"{path} line {number}: {e}") from None
    return keys


class DeviceKeys:
    """The pinned keys, and the verdict on each device message."""

    def __init__(
        self,
        provisioned: dict[str, str] | None = None,
        *,
        file: Path | None = None,
        first_use: bool = True,
    ) -> None:
        self.file = file
        self.first_use = first_use
        self._provisioned: dict[str, bytes] = {}
        for device, text in (provisioned or {}).items():
            try:
                self._provisioned[device] = parse_public_key(text)
            except ValueError as e:
                raise DeviceKeysError(f"fleet_page.device_keys.{device}: {e}") from None
        self._from_file: dict[str, bytes] = {}
        self._file_stamp: tuple[int, int] | None = None
        self._warned: set[tuple[str, bytes]] = set()  # (device, key) changes already logged
        self.problem = self._crypto_problem()
        if self.problem:
            log.warning("every device is shown unverifiable and no approval is taken: %s", self.problem)
        self._reload(strict=True)

    @staticmethod
    def _crypto_problem() -> str | None:
        problem = signing_problem()
        return f"this page cannot check device signatures: {problem}" if problem else None

    # -- the pins ------------------------------------------------------------------
    def _stamp(self) -> tuple[int, int] | None:
        if self.file is None:
            return None
        try:
            info = os.stat(self.file)
        except OSError:
            return None
        return (info.st_mtime_ns, info.st_size)

    def _reload(self, *, strict: bool = False) -> bool:
        """Read the keys file again when it changed; True when it was read. A file that cannot be
        used raises at start (`strict`); later it is logged and the keys read before stay."""
        stamp = self._stamp()
        if self.file is None or (stamp == self._file_stamp and not strict):
            return False
        self._file_stamp = stamp
        try:
            self._from_file = read_keys_file(self.file)
        except DeviceKeysError as e:
            if strict:
                raise
            log.error("the device keys file changed and cannot be used, the keys read before stay: %s", e)
            return False
        return True

    def pinned(self, device: str) -> bytes | None:
        return self._provisioned.get(device) or self._from_file.get(device)

    def _pin(self, device: str, key: bytes) -> None:
        self._from_file[device] = key
        if self.file is None:
            return
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            with self.file.open("a", encoding="utf-8") as f:
                f.write(f"{device} {public_key_text(key)}\n")
            self._file_stamp = self._stamp()
        except OSError as e:
            log.warning(
                "the key of %s is pinned for this run only: cannot write %s: %s", device, self.file, e
            )
        log.info("pinned the key of %s at first sight: %s", device, public_key_text(key))

    # -- verdicts ---------------------------------------------------------------------
    def judge(
        self,
        device: str,
        topic: str,
        payload: bytes,
        correlation: bytes | None,
        signature: str | None,
        *,
        announced: object = None,
    ) -> str:
        """The verdict on one message of `device`; `announced` is the key a status names."""
        if self.problem:
            return UNVERIFIABLE
        pin = self.pinned(device)
        if pin is not None and verify(pin, topic, payload, correlation, signature):
            return VERIFIED
        if self._reload():  # re-pinned (or unpinned) since: judged against the file as it is now
            return self.judge(device, topic, payload, correlation, signature, announced=announced)
        try:
            new = parse_public_key(announced) if announced is not None else None
        except ValueError:
            new = None
        self_signed = new is not None and verify(new, topic, payload, correlation, signature)
        if pin is None:
            if self_signed and self.first_use:
                assert new is not None
                self._pin(device, new)
                return VERIFIED
            return UNVERIFIABLE
        if self_signed and new != pin:
            assert new is not None
            if (device, new) not in self._warned:
                self._warned.add((device, new))
                log.warning(
                    "%s announces the key %s, but %s is pinned: its messages are not trusted until it is "
                    "re-pinned (docs/fleet.md#device-keys)",
                    device,
                    public_key_text(new),
                    public_key_text(pin),
                )
            return KEY_CHANGED
        return FORGED
