"""The screenshot tool: known pixels written into a framebuffer (the sim board's file, and a device
path on a real board's profile), read back as a PNG with Pillow."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.hw_support import call, make_runtime, ok, write_profile

# (x, y) -> an RGB565-exact colour (its low bits are what 5 and 6 bits expand back to)
KNOWN = {(0, 0): (255, 0, 0), (319, 0): (0, 255, 0), (0, 239): (0, 0, 255), (160, 120): (255, 255, 255)}


def rgb565_le(rgb: tuple[int, int, int]) -> bytes:
    r, g, b = rgb
    return struct.pack("<H", (r >> 3) << 11 | (g >> 2) << 5 | b >> 3)


def write_pixels(path: Path, width: int, height: int, pixel: Any, size: int) -> None:
    frame = bytearray(width * height * size)
    for (x, y), rgb in KNOWN.items():
        if x < width and y < height:
            at = (y * width + x) * size
            frame[at : at + size] = pixel(rgb)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(frame))


def read_png(path: Path) -> Image.Image:
    with Image.open(path) as picture:
        assert picture.format == "PNG"
        return picture.convert("RGB")


@pytest.fixture
async def sim(tmp_path):
    runtime = make_runtime(tmp_path)
    yield runtime
    await runtime.aclose()


async def test_known_pixels_in_the_sim_framebuffer_come_back_in_the_png(sim):
    write_pixels(sim.state_dir / "sim" / "fb0.fb", 320, 240, rgb565_le, 2)
    result = await ok(sim, "screenshot")
    assert result["display"] == "screen" and result["path"].startswith("screenshots/screen-")
    picture = read_png(sim.workspace / result["path"])
    assert picture.size == (320, 240)
    for (x, y), rgb in KNOWN.items():
        assert picture.getpixel((x, y)) == rgb, (x, y)
    assert picture.getpixel((1, 1)) == (0, 0, 0)
    data = picture.tobytes()
    assert sum(1 for i in range(0, len(data), 3) if data[i : i + 3] != bytes(3)) == len(KNOWN)


async def test_what_canvas_presents_is_what_screenshot_sees(sim):
    await ok(sim, "canvas", display="screen", action="clear", color="#0000ff")
    await ok(sim, "canvas", display="screen", action="text", text="hello", color="yellow", present=True)
    shot = await ok(sim, "screenshot", display="screen", path="shots/now.png")
    assert shot["path"] == "shots/now.png"
    seen = read_png(sim.workspace / "shots/now.png")
    drawn = read_png(sim.workspace / "canvas/screen.png")
    assert seen.tobytes() == drawn.tobytes()  # blue and yellow survive RGB565 exactly
    assert seen.getpixel((319, 239)) == (0, 0, 255)


async def test_screenshot_refuses_what_it_cannot_read(sim):
    oled = await call(sim, "screenshot", display="oled")
    assert oled.refused and "memory cannot be read back" in oled.error and "canvas/oled.png" in oled.error
    unknown = await call(sim, "screenshot", display="hdmi")
    assert unknown.refused and "board profile 'sim' declares no display 'hdmi'" in unknown.error
    outside = await call(sim, "screenshot", path="/etc/shot.png")
    assert outside.refused and "outside the workspace" in outside.error
    wrong = await call(sim, "screenshot", path="shot.jpg")
    assert wrong.refused and "must end in .png" in wrong.error


FB_PROFILE = """
[[displays]]
name = "hdmi"
kind = "framebuffer"
width = 64
height = 48
device = "{device}"
format = "xrgb8888"
access = "ro"
"""


async def test_a_real_boards_xrgb8888_framebuffer_read_only(tmp_path):
    device = tmp_path / "kiosk-fb"
    write_pixels(device, 64, 48, lambda rgb: bytes((rgb[2], rgb[1], rgb[0], 0xFF)), 4)
    device.write_bytes(device.read_bytes()[:-4] + bytes((0x10, 0x20, 0x30, 0)))  # the last pixel
    board = write_profile(tmp_path, "kiosk", FB_PROFILE.format(device=device))
    runtime = make_runtime(tmp_path, board=board)
    try:
        shot = await ok(runtime, "screenshot")
        picture = read_png(runtime.workspace / shot["path"])
        assert picture.size == (64, 48)
        assert picture.getpixel((0, 0)) == (255, 0, 0) and picture.getpixel((63, 47)) == (0x30, 0x20, 0x10)
        drawn = await call(runtime, "canvas", display="hdmi", action="clear")
        assert drawn.refused and "granted read-only by board profile 'kiosk'" in drawn.error
        device.write_bytes(b"\0" * 100)  # shorter than the declared frame
        short = await call(runtime, "screenshot")
        assert not short.ok and "less than a 64x48 xrgb8888 frame" in short.error
        device.unlink()
        gone = await call(runtime, "screenshot")
        assert not gone.ok and "does not exist" in gone.error
    finally:
        await runtime.aclose()


async def test_a_board_without_a_framebuffer_refuses_naming_its_profile(tmp_path):
    runtime = make_runtime(tmp_path, board="generic-linux")
    try:
        outcome = await call(runtime, "screenshot")
        assert (
            outcome.refused
            and "board profile 'generic-linux' declares no framebuffer display" in outcome.error
        )
    finally:
        await runtime.aclose()


async def test_doctor_says_whether_the_displays_are_usable(tmp_path):
    from edgeclaw.cli.doctor import display_findings

    device = tmp_path / "kiosk-fb"
    device.write_bytes(bytes(64 * 48 * 4))
    runtime = make_runtime(tmp_path, board=write_profile(tmp_path, "kiosk", FB_PROFILE.format(device=device)))
    try:
        [found] = display_findings(runtime)
        assert found.level == "ok" and f"{device} readable (screenshot)" in found.detail
        device.unlink()
        [found] = display_findings(runtime)
        assert found.level == "FAIL" and "does not exist; screenshot cannot work" in found.detail
    finally:
        await runtime.aclose()
    sim = make_runtime(tmp_path / "sim")
    try:
        assert [
            (f.check, f.detail.endswith(tools))
            for f, tools in zip(display_findings(sim), ("(canvas)", "(screenshot, canvas)"), strict=True)
        ] == [("display oled", True), ("display screen", True)]
    finally:
        await sim.aclose()


async def test_canvas_and_screenshot_on_an_xrgb8888_framebuffer(tmp_path):
    body = "simulated = true\n" + FB_PROFILE.format(device="sim:fb1").replace('access = "ro"', "")
    runtime = make_runtime(tmp_path, board=write_profile(tmp_path, "panel", body))
    try:
        await ok(runtime, "canvas", action="rect", x=1, y=0, width=2, height=1, color="#102030", fill=True)
        await ok(runtime, "canvas", action="present")
        fb = (runtime.state_dir / "sim" / "fb1.fb").read_bytes()
        assert len(fb) == 64 * 48 * 4 and fb[:12] == bytes(4) + bytes.fromhex("30201000") * 2  # B, G, R, X
        shot = read_png(runtime.workspace / (await ok(runtime, "screenshot"))["path"])
        assert [shot.getpixel((x, 0)) for x in range(4)] == [(0, 0, 0), (16, 32, 48), (16, 32, 48), (0, 0, 0)]
    finally:
        await runtime.aclose()


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
async def test_a_tab_of_the_callers_own_browser(tmp_path):
    """source browser: a tab of the caller's browser, as the daemon wires it (sandboxed chromium); another
    caller, with no browser of its own, gets none of it."""
    from edgeclaw.tools.base import ToolContext
    from tests.web_support import Page, Site

    with Site("127.0.0.1") as site:
        site.routes["/"] = lambda _seen: Page(body=b"<h1>shot</h1>", headers={"Content-Type": "text/html"})
        web = {"allow_networks": ["127.0.0.1/32"], "ports": [site.port]}
        runtime = make_runtime(tmp_path, tools={"rate_limit": 0, "web": web})
        try:
            tab = (await ok(runtime, "browser", action="open", url=site.url("/")))["tab"]
            shot = await ok(runtime, "screenshot", source="browser", tab=tab, path="shots/page.png")
            assert shot["path"] == "shots/page.png" and shot["tab"] == tab
            assert read_png(runtime.workspace / "shots/page.png").size[0] > 100
            other = ToolContext(channel="cli", session_key="hw-test-2", caller="cli:someone-else")
            outcome = await runtime.registry.execute("screenshot", {"source": "browser"}, other)
            assert not outcome.ok and "no browser is running for this caller" in outcome.error
            refused = await call(runtime, "screenshot", source="browser", display="screen")
            assert not refused.ok and "a browser tab is named by tab" in refused.error
        finally:
            await runtime.aclose()
