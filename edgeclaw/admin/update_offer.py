"""An update an administrator offers a device: shown to Home Assistant as the version it could move to,
installed when someone presses Install there and the config lets Home Assistant ask for it.

The offer is what an `update` request would carry (the wheel's URL, its SHA-256, its signature when
updates are signed) plus the version it holds, made by an admin (the gateway tool's `offer_update`,
over MQTT `admin/gateway` only with the admin key) and kept in `update-offer.json` in the state
directory. Offering installs nothing: the wheel is fetched and checked, signature included, only when
the update runs (admin/update.py), exactly as if the admin had sent `update` with these fields.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from edgeclaw.errors import ToolError

OFFER_FILE = "update-offer.json"
UPDATE_FIELDS = ("url", "sha256", "signature", "allow_downgrade")  # what the update request takes from it
VERSION = re.compile(r"^[0-9][0-9A-Za-z.+-]{0,63}$")


def read_offer(state_dir: Path) -> dict[str, Any] | None:
    """The standing offer, or None (none made, or unreadable: nothing is offered then)."""
    try:
        offer = json.loads((state_dir / OFFER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return offer if isinstance(offer, dict) and isinstance(offer.get("version"), str) else None


def offered_version(state_dir: Path, running: str) -> str:
    """What Home Assistant shows as the latest version: the offer's when it is newer than `running`."""
    offer = read_offer(state_dir)
    if offer is None:
        return running
    from edgeclaw.admin.update import release_key  # checking wheels: only once an update is offered

    try:
        newer = release_key(offer["version"]) > release_key(running)
    except ToolError:  # a version that cannot be compared is not shown as newer
        return running
    return offer["version"] if newer else running


def offer_update(state_dir: Path, args: dict[str, Any], by: str, running: str) -> dict[str, Any]:
    """Keep `args` (version, url, sha256, signature) as the offer; ToolError naming what is wrong."""
    from edgeclaw.admin.update import check_newer

    version = args.get("version")
    if not isinstance(version, str) or not VERSION.match(version):
        raise ToolError("offer_update: give the offered wheel's version (e.g. 0.2.0)")
    for field in ("url", "sha256"):
        if not args.get(field):
            raise ToolError(f"offer_update: give the wheel's {field}, as for update")
    check_newer(version, running, args.get("allow_downgrade") is True)
    offer = {k: args[k] for k in UPDATE_FIELDS if args.get(k)}
    offer.update(version=version, by=by, ts=round(time.time(), 3))
    path = state_dir / OFFER_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(offer), encoding="utf-8")
    os.replace(tmp, path)
    text = f"edgeclaw {version} offered (installed when Home Assistant asks for it)"
    return {"ok": True, "text": text, **offer}


def update_request(state_dir: Path) -> dict[str, Any]:
    """The `update` request the standing offer stands for; ToolError when none is offered."""
    offer = read_offer(state_dir)
    if offer is None:
        raise ToolError("no update is offered to install (an admin offers one with offer_update)")
    return {"action": "update", **{k: offer[k] for k in UPDATE_FIELDS if offer.get(k)}}
