"""Updates: a wheel installed beside the running version (A/B slots), switched to, kept only if healthy.

Under the state directory::

    venvs/<version>-<sha12>/   one virtualenv per installed wheel: its own site-packages hold the
                               wheel and the dependencies a bundle brought that the base lacks; a
                               .pth line adds the base installation's site-packages after it, for
                               the dependencies it already has (pip --no-index, hash-pinned)
    venvs/current -> <slot>    the slot `edgeclaw run` starts (absent: the base installation itself)
    venvs/update.json          the update on trial: pending → trying → (confirmed: removed) or
                               rolled_back (reported at the next healthy start, then removed)
    updates/<upload>/<i>.part  the chunks of a wheel sent over MQTT, until `update` takes them

The base installation (the `edgeclaw` systemd's ExecStart names) is never replaced by an update, so
it is what decides at each start which slot runs (`launch`, in `admin.update_slots`): a trial still
`trying` when the daemon starts again means the new version died before it was healthy, and the
previous slot is put back before anything of the new one runs. The new version confirms its own
health (READY, and the broker connected when MQTT is on, within `gateway.health_deadline_s`) and
rolls itself back when it is not healthy by then; a start that hangs is caught by the same deadline
from a thread, and under systemd by TimeoutStartSec=.

Checked before anything is installed: the size (`gateway.update_max_bytes`), the SHA-256 the
request names, with `gateway.update_public_key` set an Ed25519 signature of the wheel's bytes (the
`crypto` extra), and that the file is a wheel of edgeclaw (its name, its metadata, the package
inside). Without a public key an update is refused unless `gateway.allow_unsigned_updates` says
unsigned wheels may be installed, and a request carrying a signature is refused: it could not be
checked, and a signature that is not checked must not look as if it had been. A version not newer
than the running one needs `allow_downgrade` in the request.

The daemon runs as root on many boards, outside the sandbox: nothing of a new wheel runs while it
is checked or installed. The checks read the archive (only `edgeclaw/` and its `.dist-info/`, every
file listed in RECORD with its SHA-256, the version in METADATA); pip installs a wheel without
running any of it; the installed METADATA is read back, not imported. The new version runs for the
first time as the daemon's own start, on trial as above.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from edgeclaw.admin.update_slots import (  # noqa: F401 -- the update API
    BASE,
    Slots,
    UpdateTrial,
    launch,
    update_state,
    versions,
)
from edgeclaw.config.schema import Config, GatewayConfig
from edgeclaw.errors import ToolError
from edgeclaw.records import dataclass
from edgeclaw.store.durable import replace_durably

if TYPE_CHECKING:
    from edgeclaw.admin.update_defer import Install, UpdateDeferral
    from edgeclaw.tools.audit import AuditTrail


class UpdateHost(Protocol):
    """What an update reads: the gateway's settings, the state directory (uploads, slots) and the
    audit trail."""

    @property
    def config(self) -> Config: ...
    @property
    def state_dir(self) -> Path: ...
    @property
    def audit(self) -> AuditTrail: ...


log = logging.getLogger("edgeclaw.update")

_WHEEL_NAME = re.compile(r"edgeclaw-(?P<version>[0-9][A-Za-z0-9.+!_-]*?)-py3-none-any\.whl")
_SHA256 = re.compile(r"[0-9a-f]{64}")
UNPACKED_PER_PACKED = 10  # a wheel unpacks to at most this many times gateway.update_max_bytes
PIP_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Wheel:
    """An update's wheel: its version, checksum and bytes."""

    version: str
    sha256: str
    data: bytes
    # A bundle's dependency wheels, by file name, each already checked against the bundle's manifest.
    deps: tuple[tuple[str, bytes], ...] = ()

    @property
    def slot(self) -> str:
        return f"{self.version}-{self.sha256[:12]}"


# -- receiving a wheel ---------------------------------------------------------------------------------
def _check_sha(sha256: str) -> str:
    sha = sha256.strip().lower()
    if not _SHA256.fullmatch(sha):
        raise ToolError("update: sha256 must be the wheel's SHA-256 as 64 hex digits")
    return sha


def check_wheel(data: bytes, sha256: str, name: str | None, config: GatewayConfig) -> Wheel:
    """The wheel, once its size, digest and contents are what an edgeclaw wheel's must be."""
    if len(data) > config.update_max_bytes:
        raise ToolError(
            f"update: the wheel is {len(data)} bytes; gateway.update_max_bytes is {config.update_max_bytes}"
        )
    digest = hashlib.sha256(data).hexdigest()
    if digest != _check_sha(sha256):
        raise ToolError(
            f"update: SHA-256 mismatch: the wheel received has {digest}, the request named "
            f"{sha256}; nothing installed"
        )
    import zipfile  # only when a wheel arrives: every start imports this module to pick the version

    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = set(archive.namelist())
    except zipfile.BadZipFile as e:
        raise ToolError(f"update: not a wheel (not a zip archive: {e})") from None
    metadata = [n for n in names if re.fullmatch(r"edgeclaw-[^/]+\.dist-info/METADATA", n)]
    if len(metadata) != 1 or "edgeclaw/__init__.py" not in names:
        raise ToolError("update: not an edgeclaw wheel (no edgeclaw package or no edgeclaw metadata in it)")
    fields = _metadata_fields(archive.read(metadata[0]))
    version = fields.get("version", "")
    if fields.get("name", "").lower() != "edgeclaw":
        raise ToolError(f"update: not an edgeclaw wheel (its metadata names {fields.get('name')!r})")
    if not re.fullmatch(r"[0-9][A-Za-z0-9.+!_-]{0,63}", version):
        raise ToolError(f"update: the wheel's metadata has no usable version ({version!r})")
    _check_record(archive, metadata[0].split("/", 1)[0], config)
    if name is not None:
        m = _WHEEL_NAME.fullmatch(name)
        if m is None or m.group("version") != version:
            raise ToolError(f"update: {name!r} is not the name of an edgeclaw {version} wheel")
    return Wheel(version, digest, data)


def check_bundle(data: bytes, sha256: str, config: GatewayConfig) -> Wheel:
    """A bundle's release wheel, checked as a wheel alone is, with its dependency wheels."""
    from edgeclaw.admin.update_bundle import unpack_bundle

    _check_sha(sha256)
    name, release, release_sha, deps = unpack_bundle(data, sha256, config.update_max_bytes)
    return dataclasses.replace(check_wheel(release, release_sha, name, config), deps=deps)


def _metadata_fields(raw: bytes) -> dict[str, str]:
    """Name and Version from a METADATA file's headers (lower-cased keys)."""
    out: dict[str, str] = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        if not line.strip():
            break  # the headers end at the first empty line; the description follows
        key, sep, value = line.partition(":")
        if sep and key.lower() in ("name", "version") and key.lower() not in out:
            out[key.lower()] = value.strip()
    return out


def _check_record(archive: Any, dist_info: str, config: GatewayConfig) -> None:
    """Every file is the package's or its metadata's, listed in RECORD with the digest it has.

    Nothing else may be installed with the package: a `.pth` file or a script beside it would run
    in every interpreter of the slot, and a file outside RECORD would be one nobody vouched for.
    """
    import csv

    record_name = f"{dist_info}/RECORD"
    try:
        rows = list(csv.reader(io.StringIO(archive.read(record_name).decode("utf-8"))))
    except (KeyError, UnicodeDecodeError, csv.Error):
        raise ToolError(f"update: the wheel has no readable {record_name}") from None
    listed: dict[str, str] = {}
    for row in rows:
        if row and row[0]:
            listed[row[0]] = row[1] if len(row) > 1 else ""
    files = [i for i in archive.infolist() if not i.is_dir()]
    unpacked = sum(i.file_size for i in files)
    if unpacked > UNPACKED_PER_PACKED * config.update_max_bytes:
        raise ToolError(f"update: the wheel unpacks to {unpacked} bytes: too much for its size")
    for info in files:
        name = info.filename
        parts = name.split("/")
        if name.startswith("/") or "\\" in name or ".." in parts or parts[0] not in ("edgeclaw", dist_info):
            raise ToolError(
                f"update: the wheel holds {name!r}, outside the edgeclaw package and its metadata"
            )
        if name == record_name or name in (f"{record_name}.jws", f"{record_name}.p7s"):
            continue
        algorithm, _, expected = listed.pop(name, "").partition("=")
        if algorithm != "sha256":
            raise ToolError(f"update: {name!r} is not listed in the wheel's RECORD with a sha256 digest")
        digest = hashlib.sha256()
        with archive.open(info) as f:
            for block in iter(lambda f=f: f.read(1 << 16), b""):
                digest.update(block)
        if base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode() != expected:
            raise ToolError(f"update: {name!r} does not match its digest in the wheel's RECORD")
    listed.pop(record_name, None)
    if listed:
        raise ToolError(f"update: the wheel's RECORD lists files it lacks: {sorted(listed)[:5]}")


def check_signature(data: bytes, signature: str | None, config: GatewayConfig) -> bool:
    """True when the wheel carries a good signature; False when none is configured nor given."""
    if not config.update_public_key:
        if signature:
            raise ToolError(
                "update: the request carries a signature, but no gateway.update_public_key is configured "
                "to check it with: refused rather than taken unchecked"
            )
        if not config.allow_unsigned_updates:
            raise ToolError(
                "update: refused: updates must be signed. Set gateway.update_public_key (an Ed25519 public "
                "key, 64 hex digits) and send the wheel's signature, or set "
                "gateway.allow_unsigned_updates = true to install unsigned wheels"
            )
        return False
    if not signature:
        raise ToolError("update: gateway.update_public_key is set: the update must carry its signature")
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        raise ToolError(
            "update: checking signatures needs the 'cryptography' package (pip install 'edgeclaw[crypto]')"
        ) from None
    try:
        raw = bytes.fromhex(signature.strip())
    except ValueError:
        raise ToolError("update: signature must be hex (the 64 bytes of an Ed25519 signature)") from None
    key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(config.update_public_key))
    try:
        key.verify(raw, data)
    except InvalidSignature:
        raise ToolError(
            "update: the signature does not match the wheel and gateway.update_public_key; nothing installed"
        ) from None
    return True


async def download(url: str, config: GatewayConfig) -> tuple[bytes, str]:
    """The wheel at `url` through the guarded web client; (bytes, file name)."""
    from urllib.parse import urlsplit

    from edgeclaw.backends.web.client import WebRequest, fetch
    from edgeclaw.backends.web.guard import DEFAULT_PORTS, NetworkPolicy, WebError, parse_networks

    try:
        port = urlsplit(url).port
    except ValueError as e:
        raise ToolError(f"update: {url!r} is not a usable URL ({e})") from None
    # The port the admin named is allowed (the addresses are still checked: private and loopback
    # ranges need gateway.update_allow_networks or update_allow_hosts).
    policy = NetworkPolicy(
        allow_networks=parse_networks(config.update_allow_networks, "gateway.update_allow_networks"),
        allow_hosts=tuple(config.update_allow_hosts),
        ports=DEFAULT_PORTS | ({port} if port else frozenset()),
    )
    try:
        response = await fetch(
            WebRequest(url, timeout_s=300.0, max_bytes=config.update_max_bytes + 1), policy
        )
    except WebError as e:
        raise ToolError(f"update: cannot download {url}: {e}") from None
    if response.status != 200:
        raise ToolError(f"update: {url} answered HTTP {response.status}")
    if response.truncated or len(response.body) > config.update_max_bytes:
        raise ToolError(f"update: {url} is larger than gateway.update_max_bytes ({config.update_max_bytes})")
    return response.body, response.url.rsplit("/", 1)[-1].split("?", 1)[0]


# -- installing into a slot -------------------------------------------------------------------------
def install(slots: Slots, wheel: Wheel) -> Path:
    """A virtualenv for the wheel under venvs/SLOT (made again when an earlier try was cut short)."""
    target = slots.root / wheel.slot
    if (target / ".installed").exists():
        return target
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(target)
    slots.root.mkdir(parents=True, exist_ok=True)
    work = slots.root / f".{wheel.slot}.wheel"
    work.mkdir(exist_ok=True)
    wheel_file = work / f"edgeclaw-{wheel.version}-py3-none-any.whl"
    wheel_file.write_bytes(wheel.data)
    # Every file pip may install, pinned by its digest: the release and a bundle's dependency wheels.
    pinned = [(wheel_file, wheel.sha256)]
    for name, raw in wheel.deps:
        (work / name).write_bytes(raw)
        pinned.append((work / name, hashlib.sha256(raw).hexdigest()))
    requirements = work / "requirements.txt"
    requirements.write_text("".join(f"{path} --hash=sha256:{sha}\n" for path, sha in pinned))
    try:
        _run([sys.executable, "-m", "venv", "--without-pip", str(target)], "making the virtualenv")
        python = target / "bin" / "python"
        site_dir = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        "asking the new virtualenv for its site-packages").strip()  # fmt: skip
        # The base installation's packages after the slot's own: the dependencies come from there.
        base_dirs = [
            p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()
        ]
        Path(site_dir, "edgeclaw-base.pth").write_text("".join(f"{p}\n" for p in base_dirs))
        # Dependencies resolved offline: the base installation's (after the slot's own, through the
        # .pth line) satisfy what they can, the bundle's wheels the rest; a dependency in neither
        # refuses the update here, before anything is switched.
        _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
              "--find-links", str(work), "--require-hashes", "--no-cache-dir", "--disable-pip-version-check",
              "--quiet", "-r", str(requirements)],
             "installing the wheel and its dependencies")  # fmt: skip
        # Read back, not imported: nothing of the new version runs before its own start.
        found = _installed_version(Path(site_dir))
        if found != wheel.version:
            raise ToolError(f"update: the new slot holds edgeclaw {found}, not {wheel.version}")
    except ToolError:
        shutil.rmtree(target, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # What pip wrote reaches the disk before the slot is called installed (and so may be switched
    # to): after a power cut, a slot with .installed is whole. Once an update, so a sync of all.
    os.sync()
    marker = json.dumps({"version": wheel.version, "sha256": wheel.sha256, "at": time.time()})
    replace_durably(target / ".installed", marker.encode(), mode=0o644)
    return target


def _installed_version(site_dir: Path) -> str | None:
    """The version in the slot's installed edgeclaw METADATA (None: none, or more than one)."""
    found = list(site_dir.glob("edgeclaw-*.dist-info/METADATA"))
    if len(found) != 1:
        return None
    return _metadata_fields(found[0].read_bytes()).get("version")


def release_key(version: str) -> tuple[tuple[int, ...], int, int]:
    """An order for versions like 0.1.0, 1.2rc1, 2.0.dev3, 1.0.post1 (PEP 440's, without epochs).

    A local label (`+abc`) does not make a version newer: two builds that differ only in it are the
    same release, and which one is newer cannot be told.
    """
    public = version.split("+", 1)[0].lower()
    m = re.fullmatch(r"v?(\d+(?:\.\d+)*)(?:[.-]?(dev|a|alpha|b|beta|c|rc|pre|post)[.-]?(\d*))?", public)
    if m is None:
        raise ToolError(f"update: cannot compare the version {version!r} with the running one")
    release = tuple(int(p) for p in m.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    stage = {"dev": 0, "a": 1, "alpha": 1, "b": 2, "beta": 2, "c": 3, "rc": 3, "pre": 3, "post": 5}
    rank = stage.get(m.group(2) or "", 4)  # 4: the final release
    return release, rank, int(m.group(3) or 0)


def check_newer(version: str, running: str, allow_downgrade: bool) -> None:
    """Refuse a version not newer than the running one unless the request allows it."""
    if allow_downgrade or release_key(version) > release_key(running):
        return
    raise ToolError(
        f"update: edgeclaw {version} is not newer than the running {running}; "
        'send "allow_downgrade": true to install it anyway'
    )


def _run(argv: list[str], what: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolError(f"update: {what} failed: {e}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise ToolError(f"update: {what} failed (exit {done.returncode}): {' | '.join(tail)}")
    return done.stdout


def prune(slots: Slots, keep: int) -> list[str]:
    """Old slots beyond `keep`, never the current one or the one a trial would go back to; and what
    an install cut short left."""
    installed = set(slots.installed())
    protect = {slots.current(), (slots.trial() or {}).get("previous"), os.environ.get("EDGECLAW_SLOT")}
    # An install killed midway (a power cut while pip ran) leaves its slot without .installed and its
    # work directory: never run (`current` is switched only to an installed slot), but never freed
    # either, its venv and wheels kept for good. Only one install runs at a time and this runs after
    # it, so none of these is in use.
    removed = []
    for p in sorted(slots.root.iterdir()):
        if p.is_dir() and not p.is_symlink() and p.name not in installed and p.name not in protect:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p.name)
    protect &= installed  # the base installation is no slot
    candidates = sorted((slots.root / name for name in installed - protect), key=lambda p: p.stat().st_mtime)
    for p in candidates[: max(0, len(candidates) - max(0, keep - len(protect)))]:
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p.name)
    return removed


def stage(state_dir: Path, wheel: Wheel, by: str, keep: int) -> dict[str, Any]:
    """Install the wheel in its slot and make it the one the next start runs, on trial."""
    slots = Slots(state_dir)
    state = slots.trial()
    if state is not None and state.get("state") in ("pending", "trying"):
        raise ToolError(f"update: the update to {state.get('slot')} is still on trial; wait for its verdict")
    install(slots, wheel)
    previous = os.environ.get("EDGECLAW_SLOT") or slots.current() or BASE
    slots.write_trial({"state": "pending", "slot": wheel.slot, "previous": previous, "version": wheel.version,
                       "sha256": wheel.sha256, "by": by, "at": time.time()})  # fmt: skip
    slots.switch(wheel.slot)
    removed = prune(slots, keep)
    return {"slot": wheel.slot, "previous": previous, "version": wheel.version, "removed": removed}


async def apply_update(
    runtime: UpdateHost, args: dict[str, Any], by: str, restart: Any, deferral: UpdateDeferral | None = None
) -> dict[str, Any]:
    """A wheel by URL or from an upload: checked, installed in its slot, switched to, restarted onto;
    with a `deferral`, only once STATE/update.lock is free (or `force`), kept until then."""
    config = runtime.config.gateway
    url, upload, sha256 = args.get("url"), args.get("upload"), args.get("sha256")
    if not sha256:
        raise ToolError("update: give the wheel's sha256")
    if bool(url) == bool(upload):
        raise ToolError(
            "update: give either url (a wheel to download) or upload (one sent with update_chunk)"
        )
    if not config.update_public_key:
        # Unsigned and not allowed (or a signature with no key to check it): refused before anything
        # is downloaded.
        check_signature(b"", args.get("signature"), config)
    if url:
        data, name = await download(url, config)
    else:
        from edgeclaw.admin.update_upload import assemble

        data, name = assemble(runtime.state_dir, upload), None
    wheel, signed = _checked(data, name, args, config)
    install_now = _installer(runtime, wheel, args, by, restart, signed)
    if deferral is None:
        return await install_now([])
    from edgeclaw.admin.update_defer import KEPT_ARGS, KeptUpdate

    kept = KeptUpdate(data, name, {key: args.get(key) for key in KEPT_ARGS})
    return await deferral.apply_or_defer(wheel.version, by, args.get("force") is True, install_now, kept)


def resume_update(runtime: UpdateHost, kept: dict[str, Any], restart: Any, deferral: UpdateDeferral) -> None:
    """A deferred update an earlier run of the daemon kept: its stored bytes checked again as when
    they arrived (a file that no longer passes is dropped, never installed), then waiting for the
    update lock with the same install as `apply_update`'s."""
    config, args = runtime.config.gateway, deferral.kept_args(kept)
    try:
        data = deferral.read_kept(kept, config.update_max_bytes)
        wheel = _checked_file(data, kept["kept"].get("name"), args, config)
        if os.environ.get("EDGECLAW_SLOT") == wheel.slot:
            deferral.forget_kept()  # installed by the run that stopped while applying it: running now
            return
        signed = _checked_request(data, wheel, args, config)
        if wheel.version != kept.get("version"):
            raise ToolError(
                f"update: the kept file holds edgeclaw {wheel.version}, not {kept.get('version')}"
            )
    except ToolError as e:
        deferral.drop_kept(kept, str(e))
        return
    deferral.resume(kept, _installer(runtime, wheel, args, str(kept.get("by")), restart, signed))


def _checked(
    data: bytes, name: str | None, args: dict[str, Any], config: GatewayConfig
) -> tuple[Wheel, bool]:
    """The checks every update passes before it is installed or deferred; (the wheel, whether it
    was signed)."""
    wheel = _checked_file(data, name, args, config)
    return wheel, _checked_request(data, wheel, args, config)


def _checked_file(data: bytes, name: str | None, args: dict[str, Any], config: GatewayConfig) -> Wheel:
    """The wheel (or bundle) received: its size, SHA-256 and contents."""
    # A wheel is a zip archive; anything else is taken for a bundle (a tar with its manifest).
    if data[:4] == b"PK\x03\x04":
        return check_wheel(data, args["sha256"], name, config)
    return check_bundle(data, args["sha256"], config)


def _checked_request(data: bytes, wheel: Wheel, args: dict[str, Any], config: GatewayConfig) -> bool:
    """Its signature and version; whether it was signed."""
    signed = check_signature(data, args.get("signature"), config)
    from edgeclaw import __version__

    check_newer(wheel.version, __version__, args.get("allow_downgrade") is True)
    return signed


def _installer(
    runtime: UpdateHost, wheel: Wheel, args: dict[str, Any], by: str, restart: Any, signed: bool
) -> Install:
    async def install_now(forced: list[str]) -> dict[str, Any]:
        return await _install_checked(runtime, wheel, args, by, restart, signed, forced)

    return install_now


async def _install_checked(
    runtime: UpdateHost, wheel: Wheel, args: dict[str, Any], by: str, restart: Any, signed: bool,
    forced: list[str],
) -> dict[str, Any]:  # fmt: skip
    config, upload = runtime.config.gateway, args.get("upload")
    staged = await asyncio.to_thread(stage, runtime.state_dir, wheel, by, config.update_slots)
    if upload:
        shutil.rmtree(runtime.state_dir / "updates" / upload, ignore_errors=True)
    runtime.audit.emit(
        "update",
        by=by,
        version=wheel.version,
        slot=wheel.slot,
        previous=staged["previous"],
        signed=signed,
        downgrade=args.get("allow_downgrade") is True,
        forced_past=forced or None,
    )
    asyncio.get_running_loop().call_later(0.2, restart, f"update to {wheel.slot} by {by}")
    return {
        "ok": True,
        "text": f"edgeclaw {wheel.version} installed in slot {wheel.slot}; restarting onto it. It is "
        f"rolled back to {staged['previous']} unless it is healthy within {config.health_deadline_s:g} s",
        "how": "restart",
        "signed": signed,
        **staged,
    }
