"""The board's displays: an OLED over I2C, a TFT over SPI, a framebuffer device, behind one protocol.

A `Display` takes a whole frame (a Pillow image of its own size and mode: "1" for an OLED, "RGB"
for the others) and shows it; a framebuffer can also be read back (`capture`). Each driver speaks
to its panel through the board's own backends (`BoardBackends.i2c`, `.spi`, `.gpio`), so the
profile's grants bound a display as they bound the raw bus tools. Pillow is an optional extra
(`edgeclaw[display]`), imported when a frame is first converted (`frame.pillow`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from edgeclaw.board.schema import OLED_KINDS, TFT_KINDS, DisplayGrant

if TYPE_CHECKING:
    from edgeclaw.backends.hub import BoardBackends


class Display(Protocol):
    """One screen. `mode` is the Pillow mode its frames take ("1" or "RGB")."""

    grant: DisplayGrant
    mode: str

    async def present(self, image: Any) -> None: ...
    async def capture(self) -> Any: ...


def open_display(grant: DisplayGrant, backends: BoardBackends) -> Display:
    """The driver for a declared display, over the backends that reach it."""
    if grant.kind in OLED_KINDS:
        from edgeclaw.backends.display.ssd1306 import OledDisplay

        assert grant.bus is not None and grant.address is not None  # the profile's checks
        return OledDisplay(grant, backends.i2c(grant.bus), backends.profile.i2c_bus(grant.bus))
    if grant.kind in TFT_KINDS:
        from edgeclaw.backends.display.st7789 import TftDisplay

        assert grant.bus is not None and grant.chip_select is not None
        spi_grant = backends.profile.spi_device(grant.bus, grant.chip_select)
        pin = backends.profile.gpio_pin(grant.dc_pin)
        assert spi_grant is not None and pin is not None
        return TftDisplay(
            grant, backends.spi(grant.bus, grant.chip_select), spi_grant, backends.gpio(), pin.pin
        )
    from edgeclaw.backends.display.framebuffer import FramebufferDisplay

    return FramebufferDisplay(grant, backends.drivers.framebuffer_path(grant.device), backends.timeout_s)
