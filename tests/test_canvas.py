"""The canvas tool on the sim board: frames drawn, pushed through the real I2C backend into the sim
SSD1306's display RAM (read back pixel by pixel), and the PNG the tool writes compared with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from edgeclaw.backends.display.st7789 import CASET, RAMWR, RASET, TftDisplay
from edgeclaw.backends.spi import SPIDevice
from edgeclaw.board import load_profile, read_profile
from edgeclaw.errors import ConfigErrors
from tests.hw_support import call, make_runtime, ok


@pytest.fixture
async def sim(tmp_path):
    runtime = make_runtime(tmp_path)
    yield runtime
    await runtime.aclose()


def oled(runtime: Any) -> Any:
    """The sim SSD1306 behind the sim profile's display "oled" (0x3c on I2C bus 1)."""
    return runtime.registry.get("canvas").backends.sim.displays["oled"]


def ram_pixels(chip: Any, width: int = 128, height: int = 64) -> set[tuple[int, int]]:
    return {(x, y) for y in range(height) for x in range(width) if chip.pixel(x, y)}


def png_pixels(path: Path) -> set[tuple[int, int]]:
    with Image.open(path) as picture:
        mono = picture.convert("L")
        return {(x, y) for y in range(mono.height) for x in range(mono.width) if mono.getpixel((x, y))}


async def test_text_presented_reaches_the_oled_ram_and_matches_the_png(sim):
    result = await ok(sim, "canvas", action="text", text="Hello edgeclaw, this line wraps", present=True)
    assert result["png"] == "canvas/oled.png" and result["presented"]
    chip = oled(sim)
    # The init sequence set the chip up as a 128x64 panel and turned it on.
    assert chip.display_on and chip.charge_pump and chip.contrast == 0xCF
    assert chip.settings[0xA8] == (63,) and chip.settings[0xDA] == (0x12,)
    lit = ram_pixels(chip)
    assert lit == png_pixels(sim.workspace / "canvas/oled.png")
    assert 100 < len(lit) < 128 * 64 // 2
    assert {y for _, y in lit} & set(range(12, 24))  # a second line: the text wrapped
    assert chip.lit(*next(iter(lit)))


async def test_drawing_without_present_changes_the_png_but_not_the_screen(sim):
    await ok(sim, "canvas", action="rect", x=0, y=0, width=10, height=10, fill=True)
    assert len(png_pixels(sim.workspace / "canvas/oled.png")) == 100
    assert not ram_pixels(oled(sim))
    done = await ok(sim, "canvas", action="present")
    assert done["presented"] and len(ram_pixels(oled(sim))) == 100


async def test_rectangles_and_lines_land_on_exact_pixels(sim):
    await ok(sim, "canvas", action="rect", x=10, y=5, width=20, height=12, fill=True)
    await ok(sim, "canvas", action="rect", x=40, y=20, width=8, height=8)  # outline
    await ok(sim, "canvas", action="line", x=60, y=0, x2=60, y2=63)
    await ok(sim, "canvas", action="line", x=70, y=30, x2=127, y2=30, present=True)
    filled = {(x, y) for x in range(10, 30) for y in range(5, 17)}
    outline = {(x, y) for x in range(40, 48) for y in range(20, 28) if x in (40, 47) or y in (20, 27)}
    vertical = {(60, y) for y in range(64)}
    horizontal = {(x, 30) for x in range(70, 128)}
    assert ram_pixels(oled(sim)) == filled | outline | vertical | horizontal
    # Cleared, and a pixel drawn black on white.
    await ok(sim, "canvas", action="clear", color="white")
    await ok(sim, "canvas", action="line", x=5, y=5, x2=5, y2=5, color="black", present=True)
    assert ram_pixels(oled(sim)) == {(x, y) for x in range(128) for y in range(64)} - {(5, 5)}


async def test_a_bitmap_from_the_workspace_is_dithered_to_one_bit(sim):
    gradient = Image.new("L", (64, 64))
    gradient.putdata([x * 4 for y in range(64) for x in range(64)])
    gradient.save(sim.workspace / "ramp.png")
    result = await call(sim, "canvas", action="bitmap", path="ramp.png", x=32, present=True)
    assert result.ok and "64x64, dithered to 1 bit" in result.for_llm
    lit = ram_pixels(oled(sim))
    assert lit == png_pixels(sim.workspace / "canvas/oled.png")
    assert all(32 <= x < 96 for x, _ in lit)
    # Dithered: the dark left edge is mostly unlit, the bright right edge mostly lit, the middle mixed.
    assert sum(1 for x, _ in lit if x < 40) < 40
    assert sum(1 for x, _ in lit if x >= 88) > 400
    assert 400 < sum(1 for x, _ in lit if 56 <= x < 72) < 650


async def test_a_chart_has_its_minimum_and_maximum_written_beside_it(sim):
    result = await call(
        sim, "canvas", action="chart", values=[3, 1, 4, 1, 5, 9, 2, 6], style="bar", present=True
    )
    assert result.ok and "1 to 9" in result.for_llm
    lit = ram_pixels(oled(sim))
    assert lit == png_pixels(sim.workspace / "canvas/oled.png")
    # The tallest bar (9, the sixth) reaches the top row; the labels sit at the left.
    assert any(y == 0 for x, y in lit if x > 20)
    assert any(x < 10 for x, _ in lit)
    line = await call(sim, "canvas", action="chart", values=[0.5, 0.25, 0.75])
    assert line.ok and "0.25 to 0.75" in line.for_llm


async def test_bad_input_gets_a_clear_error(sim):
    cases = [
        ({"action": "text", "display": "tv", "text": "x"}, "board profile 'sim' declares no display 'tv'"),
        ({"action": "rect", "x": 120, "y": 0, "width": 20, "height": 5}, "does not fit the 128x64 screen"),
        ({"action": "line", "x": 0, "y": 0, "x2": 128, "y2": 10}, "end (128, 10) is off the 128x64 screen"),
        ({"action": "text", "text": "word " * 200}, "fit below y=0"),
        ({"action": "text", "text": "x", "y": 60}, "0 fit below y=60"),
        ({"action": "text", "text": "bell\x07"}, "printable characters"),
        ({"action": "bitmap", "path": "/etc/passwd"}, "outside the workspace"),
        ({"action": "bitmap", "path": "../x.png"}, "refused"),
        ({"action": "bitmap", "path": "missing.png"}, "missing.png"),
        ({"action": "chart", "values": []}, "at least one value"),
        ({"action": "text"}, "text needs text"),
    ]
    for args, words in cases:
        outcome = await call(sim, "canvas", **args)
        assert not outcome.ok, args
        assert words in outcome.error, (args, outcome.error)
    (sim.workspace / "notes.txt").write_text("not a picture")
    outcome = await call(sim, "canvas", action="bitmap", path="notes.txt")
    assert not outcome.ok and "cannot read notes.txt as a picture" in outcome.error
    assert not ram_pixels(oled(sim))  # nothing reached the screen


async def test_a_board_without_displays_refuses_naming_its_profile(tmp_path):
    runtime = make_runtime(tmp_path, board="generic-linux")
    try:
        outcome = await call(runtime, "canvas", action="clear")
        assert outcome.refused and "board profile 'generic-linux' declares no display" in outcome.error
    finally:
        await runtime.aclose()


async def test_the_framebuffer_is_a_canvas_too(sim):
    await ok(
        sim,
        "canvas",
        display="screen",
        action="rect",
        x=0,
        y=0,
        width=4,
        height=2,
        color="#ff0000",
        fill=True,
    )
    await ok(sim, "canvas", display="screen", action="present")
    fb = (sim.state_dir / "sim" / "fb0.fb").read_bytes()
    assert len(fb) == 320 * 240 * 2
    assert fb[:8] == bytes.fromhex("00f8") * 4  # RGB565 red, little-endian, as a Linux framebuffer holds it
    assert fb[640:648] == bytes.fromhex("00f8") * 4 and fb[1280:1288] == bytes(8)


# -- the board profile's [[displays]] ----------------------------------------------------------------
SIM_I2C = """
[board]
name = "{name}"
simulated = true
[[i2c]]
bus = 1
read = [{{ first = 0x08, last = 0x77 }}]
write = {write}
"""


def profile_text(name: str, write: str, display: str) -> str:
    return SIM_I2C.format(name=name, write=write) + display


def load(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "board.toml"
    path.write_text(text)
    return read_profile(path)


def problems(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigErrors) as caught:
        load(tmp_path, text)
    return str(caught.value)


OLED_AT_3C = (
    '[[displays]]\nname = "oled"\nkind = "ssd1306"\nwidth = 128\nheight = 64\nbus = 1\naddress = 0x3C\n'
)


def test_an_oled_must_sit_at_an_address_its_bus_grants_for_writing(tmp_path):
    assert load(tmp_path, profile_text("ok", "[0x3C]", OLED_AT_3C)).display("oled").address == 0x3C
    said = problems(tmp_path, profile_text("ro", "[0x48]", OLED_AT_3C))
    assert "displays[0].address" in said and "not in I2C bus 1's write list (0x48)" in said
    said = problems(tmp_path, profile_text("nobus", "[0x3C]", OLED_AT_3C.replace("bus = 1", "bus = 3")))
    assert "I2C bus 3 is not granted" in said


def test_display_entries_are_checked(tmp_path):
    bad = [
        (OLED_AT_3C.replace("height = 64", "height = 60"), "pages of 8"),
        (OLED_AT_3C.replace("width = 128", "width = 200"), "at most 128x64"),
        (OLED_AT_3C.replace('name = "oled"', 'name = "my oled!"'), "letters, digits"),
        (OLED_AT_3C + OLED_AT_3C, "used twice"),
        (OLED_AT_3C.replace("\nbus = 1\naddress = 0x3C", ""), "expected bus and address"),
        (OLED_AT_3C + 'format = "rgb565"\n', "takes mono"),
        (OLED_AT_3C + 'access = "ro"\n', "cannot be read back"),
        (
            '[[displays]]\nname = "fb"\nkind = "framebuffer"\nwidth = 320\nheight = 240\n',
            "framebuffer device",
        ),
        (
            '[[displays]]\nname = "fb"\nkind = "framebuffer"\nwidth = 320\nheight = 240\n'
            'device = "/dev/fb0"\nformat = "bgr233"\n',
            "takes rgb565, xrgb8888",
        ),
        (
            '[[displays]]\nname = "tft"\nkind = "st7789"\nwidth = 240\nheight = 240\nbus = 0\n'
            'chip_select = 0\ndc_pin = "dc"\n',
            "SPI 0.0 is not granted",
        ),
    ]
    for display, words in bad:
        said = problems(tmp_path, profile_text("bad", "[0x3C]", display))
        assert words in said, (display, said)
    real = '[board]\nname = "real"\n[[displays]]\nname = "fb"\nkind = "framebuffer"\nwidth = 8\nheight = 8\n'
    assert "only a simulated board" in problems(tmp_path, real + 'device = "sim:fb0"\n')


TFT_PROFILE = """
[board]
name = "tft"
[[spi]]
bus = 0
chip_select = 1
max_speed_hz = 32_000_000
access = "{access}"
[[gpio]]
pin = 25
name = "dc"
direction = "{direction}"
[[displays]]
name = "tft"
kind = "st7789"
width = 240
height = 240
bus = 0
chip_select = 1
dc_pin = "dc"
"""


def test_a_tft_needs_a_writable_spi_device_and_an_output_pin_for_d_c(tmp_path):
    assert load(tmp_path, TFT_PROFILE.format(access="rw", direction="out")).display("tft").dc_pin == "dc"
    assert "needs access = 'rw'" in problems(tmp_path, TFT_PROFILE.format(access="ro", direction="out"))
    assert "granted GPIO output pin" in problems(tmp_path, TFT_PROFILE.format(access="rw", direction="in"))


def test_the_sim_profile_declares_its_oled_and_framebuffer():
    sim = load_profile("sim")
    assert [(d.name, d.kind, d.width, d.height) for d in sim.displays] == [
        ("oled", "ssd1306", 128, 64),
        ("screen", "framebuffer", 320, 240),
    ]
    assert sim.i2c_bus(1).may_write(0x3C)


# -- SH1106 and ST7789 -------------------------------------------------------------------------------
async def _present_sh1106(tmp_path: Path) -> Any:
    from edgeclaw.backends.hub import BoardBackends
    from edgeclaw.backends.sim.drivers import SimDrivers
    from edgeclaw.config.schema import HardwareConfig
    from edgeclaw.tools.ui.drawing import Frame

    display = OLED_AT_3C.replace('"ssd1306"', '"sh1106"') + "column_offset = 2\n"
    profile = load(tmp_path, profile_text("sh", "[0x3C]", display))
    config = HardwareConfig()
    drivers = SimDrivers(tmp_path, timeout_s=2, flash_timeout_s=2, wiring=[], displays=profile.displays)
    backends = BoardBackends(profile, config, tmp_path, drivers=drivers)
    frame = Frame(128, 64, "1")
    frame.rect(0, 0, 3, 9, None, True)
    await backends.display("oled").present(frame.image)
    chip = backends.sim.displays["oled"]
    await backends.aclose()
    return chip


async def test_sh1106_page_addressing(tmp_path):
    chip = await _present_sh1106(tmp_path)
    assert chip.sh1106 and chip.columns == 132 and chip.display_on
    lit = {(x, y) for y in range(64) for x in range(132) if chip.pixel(x, y)}
    assert lit == {(x, y) for x in range(2, 5) for y in range(9)}  # shifted by the panel's column offset
    assert 0x20 not in chip.settings and 0xB7 in chip.commands  # page addressing only, all 8 pages


class RecordingSPI:
    """An SPI driver that keeps what was clocked out, beside the D/C level at the time."""

    label = "SPI 0.1"

    def __init__(self, log: list[tuple[str, bytes]], dc: dict[str, bool]) -> None:
        self.log, self.dc = log, dc

    def transfer(self, data: bytes, speed_hz: int, mode: int, bits_per_word: int) -> bytes:
        self.log.append(("data" if self.dc["level"] else "command", bytes(data)))
        return bytes(len(data))

    def close(self) -> None:
        pass


class DCPin:
    def __init__(self, dc: dict[str, bool]) -> None:
        self.dc = dc

    async def write(self, pin: int, active: bool) -> None:
        assert pin == 25
        self.dc["level"] = active


async def test_st7789_gets_its_init_a_window_and_rgb565_pixels_high_byte_first(tmp_path, monkeypatch):
    from edgeclaw.backends.display import st7789
    from edgeclaw.tools.ui.drawing import Frame

    async def no_wait(_s: float) -> None:
        return None

    monkeypatch.setattr(st7789.asyncio, "sleep", no_wait)
    profile = load(tmp_path, TFT_PROFILE.format(access="rw", direction="out"))
    grant = profile.display("tft")
    log: list[tuple[str, bytes]] = []
    dc = {"level": False}
    spi = SPIDevice(RecordingSPI(log, dc), timeout_s=2, threaded=False)
    display = TftDisplay(grant, spi, profile.spi_device(0, 1), DCPin(dc), 25)  # type: ignore[arg-type]
    frame = Frame(240, 240, "RGB")
    frame.rect(0, 0, 1, 1, "#ff0000", True)
    frame.rect(1, 0, 1, 1, "#0000ff", True)
    await display.present(frame.image)
    commands = [data[0] for kind, data in log if kind == "command"]
    assert commands[:2] == [0x01, 0x11] and 0x3A in commands and commands[-3:] == [CASET, RASET, RAMWR]
    assert ("data", b"\x55") in log  # COLMOD: 16 bits a pixel
    caset = log.index(("command", bytes([CASET])))
    assert log[caset + 1] == ("data", bytes([0, 0, 0, 239]))
    assert log[caset + 3] == ("data", bytes([0, 0, 0, 239]))
    pixels = b"".join(data for kind, data in log[caset + 5 :] if kind == "data")
    assert len(pixels) == 240 * 240 * 2 and max(len(d) for _, d in log) <= 4096
    assert pixels[:4] == bytes.fromhex("f800001f")  # red, then blue: RGB565 high byte first
    log.clear()
    await display.present(frame.image)  # initialised once: the next frame is window and pixels only
    assert [data[0] for kind, data in log if kind == "command"] == [CASET, RASET, RAMWR]


def edgeclaw_cli(tmp_path: Path, *args: str) -> Any:
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "HOME": str(tmp_path)}
    env["EDGECLAW_STATE_DIR"] = str(tmp_path / "state")
    done = subprocess.run(
        [sys.executable, "-m", "edgeclaw", *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)


def test_a_cli_tool_call_draws_and_writes_the_png(tmp_path):
    args = '{"action": "rect", "width": 3, "height": 2, "fill": true, "present": true}'
    result = edgeclaw_cli(tmp_path, "tool", "call", "canvas", args, "--board", "sim", "--json")
    assert result["ok"] and result["data"]["presented"]
    assert png_pixels(tmp_path / "state" / "workspace" / result["data"]["png"]) == {
        (x, y) for x in range(3) for y in range(2)
    }


def test_tools_list_shows_the_ui_group_with_its_schemas(tmp_path):
    listed = edgeclaw_cli(tmp_path, "tools", "list", "--json", "--board", "sim")
    ui = {t["name"]: t for t in listed if t["group"] == "ui"}
    assert set(ui) == {"canvas", "screenshot", "browser"}
    canvas = ui["canvas"]["parameters"]
    assert canvas["properties"]["action"]["enum"] == [
        "text",
        "line",
        "rect",
        "bitmap",
        "chart",
        "clear",
        "present",
    ]
    sizes = "oled (ssd1306 128x64), screen (framebuffer 320x240); default 'oled'."
    assert canvas["properties"]["display"]["description"] == sizes
    assert ui["screenshot"]["parameters"]["properties"]["display"]["description"] == "Default 'screen'."


# -- the sim SSD1306 on its own: the datasheet's command set -----------------------------------------
def test_the_sim_ssd1306_follows_the_datasheets_addressing():
    from edgeclaw.backends.sim.ssd1306 import SSD1306

    chip = SSD1306()
    assert chip.read(1) == b"\x40"  # status: display off after reset
    chip.write(bytes((0x80, 0xAF, 0x80, 0x81, 0x80, 0x10)))  # Co = 1: one command byte per control byte
    assert chip.display_on and chip.contrast == 0x10 and chip.read(1) == b"\x00"
    # Page addressing (the reset default): B2h, column 0x15 from its two nibbles, then data.
    chip.write(bytes((0x00, 0xB2, 0x05, 0x11)))
    chip.write(bytes((0x40, 0xFF, 0x01)))
    assert chip.ram[2][0x15] == 0xFF and chip.ram[2][0x16] == 0x01
    assert chip.pixel(0x15, 16) and chip.pixel(0x15, 23) and chip.pixel(0x16, 16) and not chip.pixel(0x16, 17)
    # Horizontal addressing inside a window: columns 10-11 of pages 1-2, wrapping column then page.
    chip.write(bytes((0x00, 0x20, 0x00, 0x21, 10, 11, 0x22, 1, 2)))
    chip.write(bytes((0x40, 1, 2, 3, 4)))
    assert [chip.ram[1][10], chip.ram[1][11], chip.ram[2][10], chip.ram[2][11]] == [1, 2, 3, 4]
    chip.write(bytes((0x40, 5)))
    assert chip.ram[1][10] == 5 and chip.ram[1][12] == 0  # the fifth byte wrapped to the window's start
    # Vertical addressing: page first, then column.
    chip.write(bytes((0x00, 0x20, 0x01, 0x21, 20, 21, 0x22, 0, 1)))
    chip.write(bytes((0x40, 7, 8, 9)))
    assert (chip.ram[0][20], chip.ram[1][20], chip.ram[0][21]) == (7, 8, 9)
    # Inverse display and entire display on change what is seen, not the RAM.
    chip.write(bytes((0x00, 0xA7)))
    assert not chip.lit(0x15, 16) and chip.lit(0, 63) and chip.pixel(0x15, 16)
    chip.write(bytes((0x00, 0xA6, 0xA5)))
    assert chip.lit(0, 63)
    chip.write(bytes((0x00, 0xA4, 0xAE)))
    assert not chip.lit(0x15, 16)


async def test_a_display_that_stops_answering_is_a_clear_error(sim):
    await ok(sim, "canvas", action="text", text="before")
    sim.registry.get("canvas").backends.i2c(1).driver.inject(0x3C, "nack")
    outcome = await call(sim, "canvas", action="present")
    assert not outcome.ok and "display 'oled': no device acknowledged at 0x3c on bus 1" in outcome.error


async def test_the_i2c_write_grant_is_checked_again_when_the_display_opens(tmp_path):
    from edgeclaw.backends.base import DeviceUnavailable
    from edgeclaw.backends.display.ssd1306 import OledDisplay
    from edgeclaw.board import I2CBusGrant

    profile = load(tmp_path, profile_text("ok", "[0x3C]", OLED_AT_3C))
    grant = profile.display("oled")
    with pytest.raises(DeviceUnavailable, match="0x3c on I2C bus 1 may not be written"):
        OledDisplay(grant, None, I2CBusGrant(bus=1, write=[0x48]))  # type: ignore[arg-type]
    with pytest.raises(DeviceUnavailable, match="may not be written"):
        OledDisplay(grant, None, None)  # type: ignore[arg-type]


def test_the_device_profile_gets_the_ui_tools_and_remote_does_not():
    from edgeclaw.config.policy_rules import PROFILES

    assert {"canvas", "screenshot"} <= set(PROFILES["device"] or ())
    remote = PROFILES["remote"] or ()
    assert not {"group:ui", "canvas", "screenshot"} & set(remote)


async def test_text_over_the_schemas_bound_is_refused_before_drawing(sim):
    outcome = await call(sim, "canvas", action="text", text="x" * 1001)
    assert not outcome.ok and "1000" in outcome.error


async def test_without_pillow_the_tools_say_how_to_install_it(sim, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "PIL", None)  # `from PIL import Image` raises ImportError
    drawn = await call(sim, "canvas", action="text", text="x")
    assert not drawn.ok and "'PIL' is not installed (pip install 'edgeclaw[display]'" in drawn.error
    shot = await call(sim, "screenshot")
    assert not shot.ok and "pip install 'edgeclaw[display]'" in shot.error


async def test_a_huge_bitmap_and_non_finite_chart_values_are_refused(sim):
    Image.new("1", (5000, 4000)).save(sim.workspace / "huge.png")
    huge = await call(sim, "canvas", action="bitmap", path="huge.png")
    assert not huge.ok and "huge.png is 5000x4000: too large to draw" in huge.error
    tool = sim.registry.get("canvas")
    frame = tool._frame(sim.board.display("oled"))
    from edgeclaw.tools.ui.drawing import DrawError

    with pytest.raises(DrawError, match="finite"):
        frame.chart([1.0, float("inf")], "line", (0, 0, None, None), None)


def test_text_wraps_at_spaces_keeps_newlines_and_cuts_a_word_wider_than_a_line():
    from edgeclaw.tools.ui.drawing import Frame

    frame = Frame(128, 64, "1")  # the built-in font: 6 pixels a character
    assert frame.wrap("one two\n\nthree", 128) == ["one two", "", "three"]
    assert frame.wrap("aaaa bbbb cccc", 60) == ["aaaa bbbb", "cccc"]
    assert frame.wrap("abcdefghijkl", 30) == ["abcde", "fghij", "kl"]
    assert frame.wrap("abc", 3) == ["a", "b", "c"]  # narrower than a character: one a line


async def test_st7789_through_the_spi_backend_fills_the_sim_controllers_frame_memory(tmp_path, monkeypatch):
    """The real SPIDevice and GPIOController (gpiozero's mock pins) in front of a sim ST7789 that reads
    the D/C pin with every byte: the picture read back pixel by pixel is the frame drawn."""
    from edgeclaw.backends.display import st7789
    from edgeclaw.backends.gpio import GPIOController, GpiozeroDriver
    from edgeclaw.backends.sim.st7789 import ST7789
    from edgeclaw.tools.ui.drawing import Frame

    async def no_wait(_s: float) -> None:
        return None

    monkeypatch.setattr(st7789.asyncio, "sleep", no_wait)
    profile = load(
        tmp_path,
        TFT_PROFILE.format(access="rw", direction="out").replace("dc_pin", "row_offset = 40\ndc_pin"),
    )
    grant = profile.display("tft")
    pins = GpiozeroDriver(profile.spec.gpio, mock=True)
    gpio = GPIOController(pins, timeout_s=2, threaded=False)
    chip = ST7789(lambda: bool(pins.factory.pin(25).state))
    display = TftDisplay(
        grant, SPIDevice(chip, timeout_s=2, threaded=False), profile.spi_device(0, 1), gpio, 25
    )
    frame = Frame(240, 240, "RGB")
    frame.clear("#000080")
    frame.rect(10, 20, 30, 5, "#ff8000", True)
    frame.text(0, 100, "st7789", "white", None)
    await display.present(frame.image)
    assert chip.display_on and not chip.sleeping and chip.inverted and chip.colmod == 0x55
    assert chip.window == (0, 239, 40, 279)  # the panel's rows sit at row_offset in the controller's RAM
    expected = frame.image.convert("RGB")
    for y in range(240):
        for x in range(240):
            r, g, b = expected.getpixel((x, y))
            want = (r & 0xF8 | r >> 5, g & 0xFC | g >> 6, b & 0xF8 | b >> 5)  # RGB565 and back
            assert chip.pixel(x, y + 40) == want, (x, y)
    assert chip.pixel(0, 0) == (0, 0, 0)  # above the window: untouched
    gpio.close()
