"""Which display a ui tool call means, refused unless the board profile declares it."""

from __future__ import annotations

from edgeclaw.board import BoardProfile, DisplayGrant
from edgeclaw.errors import ToolRefused


def displays_text(profile: BoardProfile) -> str:
    """`oled (ssd1306 128x64), screen (framebuffer 320x240)`, or "none"."""
    return ", ".join(f"{d.name} ({d.kind} {d.width}x{d.height})" for d in profile.displays) or "none"


def display_grant(profile: BoardProfile, name: object, *, drawing: bool) -> DisplayGrant:
    """The declared display called `name`; without a name the first one the call can use (for
    drawing one granted `rw`, else a framebuffer). Refused, naming the profile, otherwise."""
    if name is None or name == "":
        for d in profile.displays:
            if (drawing and d.access == "rw") or (not drawing and d.kind == "framebuffer"):
                return d
        wanted = "display it may draw on" if drawing else "framebuffer display"
        raise ToolRefused(
            f"refused: board profile {profile.name!r} declares no {wanted} ([[displays]]; "
            f"it has: {displays_text(profile)})"
        )
    found = profile.display(str(name))
    if found is None:
        raise ToolRefused(
            f"refused: board profile {profile.name!r} declares no display {str(name)[:64]!r} "
            f"(its displays: {displays_text(profile)})"
        )
    return found
