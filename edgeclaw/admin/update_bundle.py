"""An update bundle: the release wheel and the wheels it depends on, in one tar, for a device that
cannot reach a package index.

    manifest.json             {"wheels": {"FILE.whl": "SHA-256 hex", ...}}: every wheel in the tar
    edgeclaw-VERSION-py3-none-any.whl
    DEPENDENCY-VERSION-TAGS.whl ...

The request's `sha256` (and `signature`) are those of the whole tar, so they cover the manifest and
through it every wheel. Each wheel is checked against its manifest digest before anything is
installed, and pip installs them with `--require-hashes` from the slot's own directory
(`edgeclaw.admin.update.install`).
"""

from __future__ import annotations

import hashlib
import io
import json
import re

from edgeclaw.errors import ToolError

UNPACKED_PER_PACKED = 10  # the tar's members together at most this many times its own bound
_DEP_WHEEL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}-[A-Za-z0-9_.+!-]+\.whl")
MANIFEST = "manifest.json"
_RELEASE = re.compile(r"edgeclaw-[^/]+-py3-none-any\.whl")


def unpack_bundle(
    data: bytes, sha256: str, max_bytes: int
) -> tuple[str, bytes, str, tuple[tuple[str, bytes], ...]]:
    """A bundle: a tar of the release wheel, the wheels it depends on and `manifest.json` naming
    each wheel's SHA-256. Every member must be a plain file the manifest names with the digest it
    has; anything else refuses the whole bundle, before anything is installed. Returns the release
    wheel's name, bytes and manifest digest (still to be checked as any wheel is) and the others."""
    if len(data) > max_bytes:
        raise ToolError(f"update: the bundle is {len(data)} bytes; gateway.update_max_bytes is {max_bytes}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256.strip().lower():
        raise ToolError(
            f"update: SHA-256 mismatch: the bundle received has {digest}, the request named "
            f"{sha256}; nothing installed"
        )
    import tarfile

    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            unpacked = 0
            for member in tar:
                if not member.isfile() or "/" in member.name or member.name in files:
                    raise ToolError(
                        f"update: the bundle's member {member.name!r} is not a plain file at its top "
                        "level (or is repeated); nothing installed"
                    )
                unpacked += member.size
                if unpacked > max_bytes * UNPACKED_PER_PACKED:
                    raise ToolError("update: the bundle unpacks to too much; nothing installed")
                files[member.name] = tar.extractfile(member).read()  # type: ignore[union-attr]
    except tarfile.TarError as e:
        raise ToolError(f"update: not a bundle (not a tar archive: {e}); nothing installed") from None
    try:
        manifest = json.loads(files.pop(MANIFEST))["wheels"]
        assert isinstance(manifest, dict)
    except (KeyError, ValueError, TypeError, AssertionError):
        raise ToolError(
            f'update: the bundle has no usable {MANIFEST} ({{"wheels": {{"FILE.whl": "SHA-256"}}}}); '
            "nothing installed"
        ) from None
    if set(manifest) != set(files):
        extra, missing = sorted(set(files) - set(manifest)), sorted(set(manifest) - set(files))
        raise ToolError(
            f"update: the bundle's files and its manifest differ (not in the manifest: {extra}; "
            f"missing: {missing}); nothing installed"
        )
    for name, raw in files.items():
        if not _DEP_WHEEL.fullmatch(name):
            raise ToolError(f"update: the bundle's {name!r} is not a wheel's file name; nothing installed")
        found = hashlib.sha256(raw).hexdigest()
        if not isinstance(manifest[name], str) or found != manifest[name].strip().lower():
            raise ToolError(
                f"update: SHA-256 mismatch in the bundle: {name} has {found}, the manifest names "
                f"{manifest[name]}; nothing installed"
            )
    releases = [n for n in files if _RELEASE.fullmatch(n)]
    if len(releases) != 1:
        raise ToolError(f"update: a bundle holds exactly one edgeclaw wheel, this one {len(releases)}")
    [release] = releases
    return release, files.pop(release), manifest[release], tuple(sorted(files.items()))
