"""A wheel sent over MQTT in parts (`update_chunk`): kept under STATE/updates/<upload>/<i>.part until
`update` assembles them; parts left an hour without an `update` are removed."""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from edgeclaw.config.schema import GatewayConfig
from edgeclaw.errors import ToolError

_UPLOAD = re.compile(r"[A-Za-z0-9_-]{1,64}")
UPLOAD_MAX_AGE_S = 3600.0  # chunks left this long without an `update` are removed


def store_chunk(
    state_dir: Path, config: GatewayConfig, upload: str, index: int, total: int, data: str
) -> dict[str, Any]:
    """One base64 part of a wheel: kept until `update` assembles them."""
    if not _UPLOAD.fullmatch(upload):
        raise ToolError("update_chunk: upload must be 1-64 letters, digits, '_' or '-'")
    if total < 1 or total * config.update_chunk_bytes > config.update_max_bytes + config.update_chunk_bytes:
        raise ToolError(f"update_chunk: total {total} parts of at most {config.update_chunk_bytes} bytes "
                        f"would exceed gateway.update_max_bytes ({config.update_max_bytes})")  # fmt: skip
    if not 0 <= index < total:
        raise ToolError(f"update_chunk: index {index} is outside 0..{total - 1}")
    try:
        part = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ToolError(f"update_chunk: data is not base64 ({e})") from None
    if len(part) > config.update_chunk_bytes:
        raise ToolError(
            f"update_chunk: {len(part)} bytes; gateway.update_chunk_bytes is {config.update_chunk_bytes}"
        )
    uploads = state_dir / "updates"
    _forget_old_uploads(uploads)
    where = uploads / upload
    where.mkdir(parents=True, exist_ok=True)
    meta = where / "total"
    if meta.exists() and meta.read_text() != str(total):
        raise ToolError(
            f"update_chunk: upload {upload!r} was started with total {meta.read_text()}, not {total}"
        )
    meta.write_text(str(total))
    tmp = where / f"{index}.part.new"
    tmp.write_bytes(part)
    os.replace(tmp, where / f"{index}.part")
    received = len(list(where.glob("*.part")))
    return {"text": f"part {index + 1} of {total} of upload {upload!r} received ({received}/{total})",
            "upload": upload, "received": received, "total": total}  # fmt: skip


def _forget_old_uploads(uploads: Path) -> None:
    if not uploads.is_dir():
        return
    for where in uploads.iterdir():
        with contextlib.suppress(OSError):
            if time.time() - where.stat().st_mtime > UPLOAD_MAX_AGE_S:
                shutil.rmtree(where)


def assemble(state_dir: Path, upload: str) -> bytes:
    if not _UPLOAD.fullmatch(upload):
        raise ToolError("update: upload must be 1-64 letters, digits, '_' or '-'")
    where = state_dir / "updates" / upload
    try:
        total = int((where / "total").read_text())
    except (OSError, ValueError):
        raise ToolError(f"update: no upload {upload!r} (send its parts with update_chunk first)") from None
    missing = [i for i in range(total) if not (where / f"{i}.part").exists()]
    if missing:
        raise ToolError(f"update: upload {upload!r} lacks part(s) {missing[:10]} of {total}")
    return b"".join((where / f"{i}.part").read_bytes() for i in range(total))
