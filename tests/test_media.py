"""The media tools: tts with real espeak-ng and each HTTP provider's wire format on loopback, image
info on real PNG/JPEG files with EXIF (written by Pillow), describe through each chat provider's
image format, the sim camera's pattern decoded, and files fetched back in chunks with read_bytes."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import wave
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import Runtime, build_runtime
from edgeclaw.errors import ConfigErrors, ToolRefused
from edgeclaw.tools.base import ToolContext
from tests.llm_server import (
    Scripted,
    ScriptedLLM,
    anthropic_text,
    ollama_text,
    openai_text,
    openai_tools,
)
from tests.mqtt_support import Caller, Mosquitto, needs_mosquitto

PIL = pytest.importorskip("PIL.Image")  # a test-only dependency: an independent writer and decoder

CTX = ToolContext(channel="cli", session_key="cli:media-test")
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


def runtime_with(tmp_path: Path, **config: Any) -> Runtime:
    base = {"board": "sim", "state_dir": str(tmp_path / "state")}
    return build_runtime(config_from_dict({**base, **config}, "test.toml"), require_secrets=False)


def wav_bytes(seconds: float, rate: int = 16000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\0\0" * int(seconds * rate))
    return out.getvalue()


def wav_seconds(path: Path) -> float:
    with wave.open(str(path)) as w:
        return w.getnframes() / w.getframerate()


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


# -- tts -------------------------------------------------------------------------------------------
@needs_espeak
async def test_espeak_writes_a_wav_whose_stated_length_is_its_real_length(tmp_path):
    runtime = runtime_with(tmp_path)
    try:
        out = await runtime.registry.execute("tts", {"text": "watering started", "provider": "espeak"}, CTX)
        assert out.ok, out.for_llm
        path = runtime.workspace / out.data["path"]
        real = wav_seconds(path)
        # Two words at espeak's default rate: about a second, and the answer says what the file holds.
        assert 0.5 < real < 4.0
        assert out.data["duration_s"] == pytest.approx(real, abs=0.01)
        assert out.data["format"] == "wav" and out.data["provider"] == "espeak"
        assert out.data["path"] in out.for_llm and "s," in out.for_llm
        longer = await runtime.registry.execute(
            "tts", {"text": "the greenhouse fan is on and the soil is dry " * 3, "path": "long.wav"}, CTX
        )
        assert longer.ok and wav_seconds(runtime.workspace / "long.wav") > 2 * real
    finally:
        await runtime.aclose()


@needs_espeak
@pytest.mark.skipif(shutil.which("aplay") is None, reason="aplay (alsa-utils) is not installed")
async def test_play_goes_to_the_configured_alsa_device_and_a_bad_device_is_said(tmp_path):
    # ALSA's "null" device takes the sound and plays it nowhere: aplay runs its whole path.
    runtime = runtime_with(tmp_path, tools={"media": {"tts": {"audio_device": "null"}}})
    try:
        out = await runtime.registry.execute("tts", {"text": "pump on", "play": True}, CTX)
        assert out.ok and out.data["played"] is True, out.for_llm
    finally:
        await runtime.aclose()
    runtime = runtime_with(tmp_path, tools={"media": {"tts": {"audio_device": "nosuchdevice"}}})
    try:
        out = await runtime.registry.execute("tts", {"text": "pump on", "play": True, "path": "p.wav"}, CTX)
        assert out.ok and out.data["played"] is False
        assert "not played: aplay failed" in out.for_llm and (runtime.workspace / "p.wav").exists()
    finally:
        await runtime.aclose()


@needs_espeak
async def test_text_starting_with_a_dash_is_spoken_not_taken_as_an_option(tmp_path):
    runtime = runtime_with(tmp_path)
    try:
        out = await runtime.registry.execute("tts", {"text": "--version", "path": "dash.wav"}, CTX)
        assert out.ok, out.for_llm
        assert wav_seconds(runtime.workspace / "dash.wav") > 0.3
    finally:
        await runtime.aclose()


async def test_openai_speech_wire_format_and_key_in_the_header(tmp_path, llm, monkeypatch):
    monkeypatch.setenv("SPEECH_KEY", "sk-speech-test-0123456789abcdef")
    llm.reply(Scripted(raw=wav_bytes(1.5), content_type="audio/wav"))
    tts = {
        "chain": ["cloud"],
        "providers": {"cloud": {"kind": "openai", "base_url": f"{llm.url}/v1", "api_key_env": "SPEECH_KEY"}},
    }
    runtime = build_runtime(
        config_from_dict(
            {"board": "sim", "state_dir": str(tmp_path / "state"), "tools": {"media": {"tts": tts}}}, "t.toml"
        )
    )
    try:
        out = await runtime.registry.execute("tts", {"text": "hello", "voice": "nova"}, CTX)
        assert out.ok, out.for_llm
        assert llm.paths == ["/v1/audio/speech"]
        body = llm.requests[0]
        assert body == {
            "model": "gpt-4o-mini-tts",
            "input": "hello",
            "voice": "nova",
            "response_format": "wav",
        }
        assert llm.headers[0]["authorization"] == "Bearer sk-speech-test-0123456789abcdef"
        assert out.data["duration_s"] == pytest.approx(1.5, abs=0.01) and out.data["provider"] == "cloud"
    finally:
        await runtime.aclose()


async def test_elevenlabs_pcm_becomes_a_wav_and_its_errors_keep_their_words(tmp_path, llm):
    pcm = b"\x01\x00" * 16000  # one second of 16 kHz PCM, as ElevenLabs sends pcm_16000
    llm.reply(
        Scripted(401, {"detail": {"status": "invalid_api_key", "message": "Invalid API key"}}),
        Scripted(raw=pcm, content_type="application/octet-stream"),
    )
    tts = {"chain": ["eleven"], "providers": {"eleven": {"kind": "elevenlabs", "base_url": llm.url}}}
    runtime = runtime_with(tmp_path, tools={"media": {"tts": {**tts, "espeak_fallback": False}}})
    try:
        refused = await runtime.registry.execute("tts", {"text": "hi"}, CTX)
        assert not refused.ok and "HTTP 401: Invalid API key" in refused.for_llm
        out = await runtime.registry.execute("tts", {"text": "hi", "voice": "voice123"}, CTX)
        assert out.ok, out.for_llm
        assert llm.paths[-1] == "/v1/text-to-speech/voice123?output_format=pcm_16000"
        assert llm.requests[-1] == {"text": "hi", "model_id": "eleven_multilingual_v2"}
        assert wav_seconds(runtime.workspace / out.data["path"]) == pytest.approx(1.0)
    finally:
        await runtime.aclose()


async def test_minimax_hex_audio_and_its_status_codes(tmp_path, llm):
    mp3 = bytes.fromhex("fffb9064") + b"\0" * 4176  # MPEG-1 Layer III, 128 kbit/s, 44.1 kHz frames
    llm.reply(
        Scripted(body={"base_resp": {"status_code": 1004, "status_msg": "authentication failed"}}),
        Scripted(body={"data": {"audio": mp3.hex(), "status": 2}, "base_resp": {"status_code": 0}}),
    )
    providers = {"mm": {"kind": "minimax", "base_url": llm.url, "group_id": "g42", "voice": "narrator"}}
    tts = {"chain": ["mm"], "providers": providers, "espeak_fallback": False}
    runtime = runtime_with(tmp_path, tools={"media": {"tts": tts}})
    try:
        refused = await runtime.registry.execute("tts", {"text": "hi", "format": "mp3"}, CTX)
        assert not refused.ok and "MiniMax status 1004: authentication failed" in refused.for_llm
        out = await runtime.registry.execute("tts", {"text": "hi", "format": "mp3"}, CTX)
        assert out.ok, out.for_llm
        assert llm.paths[-1] == "/v1/t2a_v2?GroupId=g42"
        sent = llm.requests[-1]
        assert sent["text"] == "hi" and sent["voice_setting"]["voice_id"] == "narrator"
        assert sent["audio_setting"]["format"] == "mp3"
        assert (runtime.workspace / out.data["path"]).read_bytes() == mp3
        assert out.data["duration_s"] == pytest.approx(len(mp3) * 8 / 128000, rel=0.01)
    finally:
        await runtime.aclose()


async def test_a_429_is_tried_again_and_a_dead_provider_hands_over_to_the_next(tmp_path, llm):
    llm.reply(
        Scripted(429, {"error": {"message": "slow down"}}, headers={"retry-after": "0"}),
        Scripted(raw=wav_bytes(0.5), content_type="audio/wav"),
    )
    providers = {
        "dead": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "timeout_s": 2},
        "busy": {"kind": "openai", "base_url": f"{llm.url}/v1"},
    }
    tts = {"chain": ["dead", "busy"], "providers": providers, "espeak_fallback": False}
    runtime = runtime_with(tmp_path, tools={"media": {"tts": tts}})
    try:
        out = await runtime.registry.execute("tts", {"text": "hi"}, CTX)
        assert out.ok, out.for_llm
        assert out.data["provider"] == "busy" and len(llm.requests) == 2  # the 429, then its retry
    finally:
        await runtime.aclose()


async def test_no_provider_and_no_espeak_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # espeak-ng not found
    runtime = runtime_with(tmp_path)
    try:
        out = await runtime.registry.execute("tts", {"text": "hi"}, CTX)
        assert not out.ok
        assert "espeak-ng is not installed" in out.for_llm and "no speech provider could speak" in out.for_llm
        mp3 = await runtime.registry.execute("tts", {"text": "hi", "format": "mp3", "play": True}, CTX)
        assert not mp3.ok and "play takes WAV only" in mp3.for_llm
    finally:
        await runtime.aclose()


EDGE_STAND_IN = """#!{python}
# Stands in for edge-tts's command line (its documented options), which needs Microsoft's service.
import argparse, pathlib, sys
p = argparse.ArgumentParser()
p.add_argument("--file"); p.add_argument("--voice"); p.add_argument("--write-media")
a = p.parse_args()
pathlib.Path("{log}").write_text(repr(sys.argv) + "\\n" + pathlib.Path(a.file).read_text())
pathlib.Path(a.write_media).write_bytes(bytes.fromhex("fffb9064") + bytes(4176))
"""


async def test_edge_runs_edge_tts_with_the_text_in_a_file_never_on_the_command_line(tmp_path, monkeypatch):
    import os
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "edge-call.txt"
    program = bin_dir / "edge-tts"
    program.write_text(EDGE_STAND_IN.format(python=sys.executable, log=log))
    program.chmod(0o755)
    tts = {"chain": ["edge"], "providers": {"edge": {"kind": "edge"}}, "espeak_fallback": False}
    runtime = runtime_with(tmp_path, tools={"media": {"tts": tts}})
    try:
        missing = await runtime.registry.execute("tts", {"text": "hi", "format": "mp3"}, CTX)
        assert not missing.ok and "edge-tts is not installed" in missing.for_llm
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        wav = await runtime.registry.execute("tts", {"text": "hi"}, CTX)
        assert not wav.ok and "MP3 only" in wav.for_llm
        out = await runtime.registry.execute(
            "tts", {"text": "--rate=-50% the pump is on", "format": "mp3"}, CTX
        )
        assert out.ok, out.for_llm
        argv, said = log.read_text().split("\n", 1)
        assert said == "--rate=-50% the pump is on" and "pump" not in argv
        assert "'--voice', 'en-US-AriaNeural'" in argv and out.data["format"] == "mp3"
    finally:
        await runtime.aclose()


def test_a_chain_naming_a_provider_without_a_table_is_refused(tmp_path):
    with pytest.raises(ConfigErrors) as e:
        runtime_with(tmp_path, tools={"media": {"tts": {"chain": ["nowhere"]}}})
    assert "tools.media.tts.chain[0]" in str(e.value)


# -- image info ------------------------------------------------------------------------------------
def exif_jpeg(path: Path, size: tuple[int, int] = (320, 200)) -> None:
    image = PIL.new("RGB", size, (10, 120, 200))
    exif = PIL.Exif()
    exif[0x010F] = "Raspberry Pi"  # Make
    exif[0x0110] = "Camera Module 3"  # Model
    exif[0x0132] = "2026:11:30 06:00:01"  # DateTime
    exif[0x0112] = 1  # Orientation
    gps = exif.get_ifd(0x8825)
    gps[1], gps[2] = "N", (52.0, 31.0, 12.0)
    gps[3], gps[4] = "W", (13.0, 24.0, 36.0)
    image.save(path, "JPEG", exif=exif)


async def test_image_info_reads_format_size_and_exif_of_real_files(tmp_path):
    runtime = runtime_with(tmp_path)
    try:
        exif_jpeg(runtime.workspace / "site.jpg")
        PIL.new("RGBA", (64, 48)).save(runtime.workspace / "icon.png")
        out = await runtime.registry.execute("image", {"action": "info", "path": "site.jpg"}, CTX)
        assert out.ok, out.for_llm
        assert (out.data["format"], out.data["width"], out.data["height"]) == ("jpeg", 320, 200)
        exif = out.data["exif"]
        assert exif["Make"] == "Raspberry Pi" and exif["Model"] == "Camera Module 3"
        assert exif["DateTime"] == "2026:11:30 06:00:01" and exif["Orientation"] == 1
        assert exif["GPSLatitude"] == pytest.approx(52.52) and exif["GPSLongitude"] == pytest.approx(-13.41)
        png = await runtime.registry.execute("image", {"action": "info", "path": "icon.png"}, CTX)
        assert png.ok and (png.data["width"], png.data["height"]) == (64, 48)
        assert png.data["details"]["colour"] == "RGBA" and png.data["exif"] == {}
    finally:
        await runtime.aclose()


async def test_damaged_and_foreign_files_are_named_as_such(tmp_path):
    runtime = runtime_with(tmp_path)
    try:
        exif_jpeg(runtime.workspace / "site.jpg")
        whole = (runtime.workspace / "site.jpg").read_bytes()
        sof = whole.index(b"\xff\xc0")
        (runtime.workspace / "cut.jpg").write_bytes(whole[: sof - 40])
        (runtime.workspace / "notes.txt").write_text("not a picture")
        cut = await runtime.registry.execute("image", {"action": "info", "path": "cut.jpg"}, CTX)
        assert not cut.ok and "cut.jpg" in cut.for_llm and "JPEG" in cut.for_llm
        text = await runtime.registry.execute("image", {"action": "info", "path": "notes.txt"}, CTX)
        assert not text.ok and "not a PNG, JPEG" in text.for_llm
        outside = await runtime.registry.execute("image", {"action": "info", "path": "/etc/passwd"}, CTX)
        assert not outside.ok and outside.refused
    finally:
        await runtime.aclose()


def test_exif_offsets_pointing_outside_the_block_are_ignored():
    from edgeclaw.backends.media.image_info import parse_exif

    # Little-endian TIFF, one IFD entry: Make, ASCII, 50 characters at offset 0xFFFF (past the end).
    block = b"II*\0\x08\0\0\0" + b"\x01\0" + b"\x0f\x01\x02\0\x32\0\0\0\xff\xff\0\0" + b"\0\0\0\0"
    assert parse_exif(block) == {}
    assert parse_exif(b"not exif") == {}


async def test_generate_saves_the_image_the_images_api_returns(tmp_path, llm, monkeypatch):
    monkeypatch.setenv("IMAGES_KEY", "sk-images-test-0123456789abcdef")
    picture = io.BytesIO()
    PIL.new("RGB", (64, 64), (0, 128, 0)).save(picture, "PNG")
    llm.reply(
        Scripted(400, {"error": {"message": "Your prompt was rejected by the safety system"}}),
        Scripted(body={"created": 1, "data": [{"b64_json": base64.b64encode(picture.getvalue()).decode()}]}),
        Scripted(body={"data": [{"url": "https://example.com/x.png"}]}),
    )
    image = {"enabled": True, "base_url": f"{llm.url}/v1", "api_key_env": "IMAGES_KEY"}
    runtime = build_runtime(
        config_from_dict(
            {"board": "sim", "state_dir": str(tmp_path / "state"), "tools": {"media": {"image": image}}}, "t"
        )
    )
    try:
        args = {"action": "generate", "prompt": "a green square", "size": "256x256"}
        refused = await runtime.registry.execute("image", args, CTX)
        assert not refused.ok and "HTTP 400: Your prompt was rejected" in refused.for_llm
        out = await runtime.registry.execute("image", {**args, "path": "art/square.png"}, CTX)
        assert out.ok, out.for_llm
        assert (runtime.workspace / "art/square.png").read_bytes() == picture.getvalue()
        assert llm.paths[-1] == "/v1/images/generations"
        assert llm.requests[-1] == {
            "model": "gpt-image-1",
            "prompt": "a green square",
            "size": "256x256",
            "n": 1,
        }
        assert llm.headers[-1]["authorization"] == "Bearer sk-images-test-0123456789abcdef"
        linked = await runtime.registry.execute("image", args, CTX)
        assert not linked.ok and "a URL is not fetched" in linked.for_llm
    finally:
        await runtime.aclose()


# -- describe --------------------------------------------------------------------------------------
def provider_config(kind: str, url: str) -> dict[str, Any]:
    base = {"openai": f"{url}/v1", "anthropic": url, "ollama": url}[kind]
    return {"kind": kind, "model": "vision-model", "base_url": base, "stream": False}


def image_in_request(kind: str, body: dict[str, Any]) -> tuple[str, str]:
    """(media type, base64) of the picture the request carries, in the provider's own format."""
    user = [m for m in body["messages"] if m["role"] == "user"][-1]
    if kind == "openai":
        url = next(p["image_url"]["url"] for p in user["content"] if p["type"] == "image_url")
        head, data = url.split(",", 1)
        return head.removeprefix("data:").removesuffix(";base64"), data
    if kind == "anthropic":
        block = next(b for b in user["content"] if b["type"] == "image")
        return block["source"]["media_type"], block["source"]["data"]
    return "image/png", user["images"][0]


@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
async def test_describe_sends_the_picture_in_each_providers_format(tmp_path, llm, kind):
    reply = {"openai": openai_text, "anthropic": anthropic_text, "ollama": ollama_text}[kind]
    llm.reply(reply("Colour bars above a lit lamp."))
    runtime = runtime_with(
        tmp_path, providers={"vision": provider_config(kind, llm.url)}, agent={"providers": ["vision"]}
    )
    try:
        PIL.new("RGB", (32, 32), (255, 0, 0)).save(runtime.workspace / "red.png")
        out = await runtime.registry.execute(
            "image", {"action": "describe", "path": "red.png", "question": "What colour is it?"}, CTX
        )
        assert out.ok, out.for_llm
        assert out.data["description"] == "Colour bars above a lit lamp."
        media_type, data = image_in_request(kind, llm.requests[0])
        assert media_type == "image/png"
        assert base64.b64decode(data) == (runtime.workspace / "red.png").read_bytes()
        assert "What colour is it?" in json.dumps(llm.requests[0])
    finally:
        await runtime.aclose()


async def test_describe_without_a_provider_says_so(tmp_path):
    runtime = runtime_with(tmp_path)
    try:
        PIL.new("RGB", (8, 8)).save(runtime.workspace / "x.png")
        out = await runtime.registry.execute("image", {"action": "describe", "path": "x.png"}, CTX)
        assert not out.ok and "needs a chat provider" in out.for_llm
    finally:
        await runtime.aclose()


# -- camera ----------------------------------------------------------------------------------------
def lamp_brightness(path: Path) -> int:
    with PIL.open(path) as picture:
        width, height = picture.size
        return sum(picture.convert("RGB").getpixel((width // 2, height * 5 // 6)))


async def test_sim_camera_pattern_is_a_real_png_with_bars_and_the_led_as_its_lamp(tmp_path):
    runtime = runtime_with(tmp_path)
    try:
        dark = await runtime.registry.execute("camera", {"width": 320, "height": 240}, CTX)
        assert dark.ok, dark.for_llm
        path = runtime.workspace / dark.data["path"]
        with PIL.open(path) as picture:
            assert picture.format == "PNG" and picture.size == (320, 240)
            rgb = picture.convert("RGB")
            bars = [rgb.getpixel((x * 40 + 20, 40)) for x in range(8)]
        assert bars == [
            (255, 255, 255), (255, 255, 0), (0, 255, 255), (0, 255, 0),
            (255, 0, 255), (255, 0, 0), (0, 0, 255), (0, 0, 0),
        ]  # fmt: skip
        assert lamp_brightness(path) < 200
        lit = await runtime.registry.execute("gpio", {"action": "write", "pin": 17, "value": 1}, CTX)
        assert lit.ok, lit.for_llm
        on = await runtime.registry.execute("camera", {"width": 320, "height": 240}, CTX)
        assert lamp_brightness(runtime.workspace / on.data["path"]) > 600
    finally:
        await runtime.aclose()


async def test_camera_bounds_come_from_the_board_profile(tmp_path):
    runtime = runtime_with(tmp_path)
    try:
        big = await runtime.registry.execute("camera", {"width": 4000, "height": 3000}, CTX)
        assert not big.ok and big.refused
        assert "4000" in big.for_llm or "maximum" in big.for_llm
        # The tool's own bound holds even where its schema is not asked first.
        tool = runtime.registry.get("camera")
        assert tool is not None
        with pytest.raises(ToolRefused, match="over the board profile's camera bound 640x480"):
            await tool.check({"width": 641, "height": 480}, CTX)
        over = await runtime.registry.execute("camera", {"width": 640, "height": 480, "path": "a.gif"}, CTX)
        assert not over.ok and "must end in .png" in over.for_llm
    finally:
        await runtime.aclose()
    generic = build_runtime(
        config_from_dict({"board": "generic-linux", "state_dir": str(tmp_path / "g")}, "t.toml"),
        require_secrets=False,
    )
    try:
        none = await generic.registry.execute("camera", {}, CTX)
        assert not none.ok and none.refused and "grants no camera" in none.for_llm
    finally:
        await generic.aclose()


# -- files back in chunks --------------------------------------------------------------------------
async def read_back(runtime: Runtime, path: str, length: int) -> bytes:
    data, offset = b"", 0
    while offset is not None:
        out = await runtime.registry.execute(
            "read_bytes", {"path": path, "offset": offset, "length": length}, CTX
        )
        assert out.ok, out.for_llm
        chunk = base64.b64decode(out.data["base64"])
        assert hashlib.sha256(chunk).hexdigest() == out.data["sha256"]
        data += chunk
        offset = out.data["next_offset"]
    return data


async def test_a_photo_comes_back_whole_in_chunks(tmp_path):
    runtime = runtime_with(tmp_path)
    try:
        photo = await runtime.registry.execute("camera", {}, CTX)
        assert photo.ok
        path = photo.data["path"]
        whole = (runtime.workspace / path).read_bytes()
        assert await read_back(runtime, path, 4096) == whole
        first = await runtime.registry.execute("read_bytes", {"path": path, "length": 16}, CTX)
        assert first.data["media_type"] == "image/png" and first.data["size"] == len(whole)
    finally:
        await runtime.aclose()


async def test_bytes_holding_a_secret_are_withheld(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDIA_KEY", "mm-very-secret-value-0123456789")
    tts = {"chain": ["mm"], "providers": {"mm": {"kind": "minimax", "api_key_env": "MEDIA_KEY"}}}
    runtime = build_runtime(
        config_from_dict(
            {"board": "sim", "state_dir": str(tmp_path / "state"), "tools": {"media": {"tts": tts}}}, "t.toml"
        )
    )
    try:
        (runtime.workspace / "dump.bin").write_bytes(b"\x00\x01junk mm-very-secret-value-0123456789 \xff")
        out = await runtime.registry.execute("read_bytes", {"path": "dump.bin"}, CTX)
        assert "base64" not in (out.data or {})
        assert "withheld" in out.for_llm and "very-secret" not in json.dumps(out.data)
    finally:
        await runtime.aclose()


# -- end to end: "take a photo and tell me if the light is on" --------------------------------------
def describe_request(body: dict[str, Any]) -> bool:
    user = [m for m in body["messages"] if m["role"] == "user"]
    return bool(user) and isinstance(user[-1]["content"], list)


def last_tool_result(body: dict[str, Any]) -> str:
    return [m for m in body["messages"] if m["role"] == "tool"][-1]["content"]


def describe_the_photo(body: dict[str, Any]) -> Scripted:
    path = last_tool_result(body).split(": ", 1)[1].split(" ", 1)[0]
    return openai_tools(("image", {"action": "describe", "path": path, "question": "Is the lamp lit?"}))


def lamp_answer(body: dict[str, Any]) -> Scripted:
    _, data = image_in_request("openai", body)
    with PIL.open(io.BytesIO(base64.b64decode(data))) as picture:
        width, height = picture.size
        lit = sum(picture.convert("RGB").getpixel((width // 2, height * 5 // 6))) > 600
    return openai_text("The lamp is lit." if lit else "The lamp is dark.")


def relay(body: dict[str, Any]) -> Scripted:
    return openai_text("Photo taken. " + last_tool_result(body).split(": ", 1)[1])


def test_camera_then_describe_end_to_end_on_the_sim_board(run_cli, state_env, llm):
    Path(state_env["EDGECLAW_CONFIG"]).write_text(
        'board = "sim"\n[agent]\nproviders = ["local"]\nprovider_attempts = 1\n'
        f'[providers.local]\nkind = "openai"\nmodel = "m"\nbase_url = "{llm.url}/v1"\nstream = false\n'
    )
    llm.route(describe_request, lamp_answer, lamp_answer)
    llm.reply(openai_tools(("camera", {"width": 320, "height": 240})), describe_the_photo, relay)
    out = run_cli("chat", "--message", "take a photo and tell me if the light is on", timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("The lamp is dark.")
    llm.reply(
        openai_tools(("gpio", {"action": "write", "pin": 17, "value": 1})),
        openai_tools(("camera", {"width": 320, "height": 240})),
        describe_the_photo,
        relay,
    )
    lit = run_cli("chat", "--message", "switch the light on, then check it with a photo", timeout=60)
    assert lit.returncode == 0, lit.stderr
    assert lit.stdout.strip().endswith("The lamp is lit.")


# -- over MQTT: a photo taken and fetched back by a backend ----------------------------------------
@needs_mosquitto
async def test_a_backend_takes_a_photo_over_mqtt_and_fetches_it_in_chunks(tmp_path):
    from tests.fleet_support import FleetDaemon

    broker = Mosquitto(tmp_path / "broker").start()
    daemon = FleetDaemon(tmp_path / "dev", "cam-01", broker.port).start()
    base, answers = "edgeclaw/cam-01", "backend/answers"
    try:
        async with Caller(broker.port, [answers, f"{base}/status"]) as c:
            await c.wait_for(
                lambda: any(r.json.get("state") == "online" for r in c.on(f"{base}/status")), 30, "online"
            )

            async def call(n: int, tool: str, args: dict[str, Any]) -> dict[str, Any]:
                request = {"id": f"r{n}", "tool": tool, "args": args}
                await c.publish(
                    f"{base}/tool/call", request, response_topic=answers, correlation=f"c{n}".encode()
                )
                found = await c.wait_for(
                    lambda: [r for r in c.on(answers) if r.correlation == f"c{n}".encode()], 30, f"answer {n}"
                )
                return found[0].json

            photo = await call(0, "camera", {"width": 320, "height": 240})
            assert photo["ok"], photo
            # The answer names the file; it carries no picture.
            assert photo["data"]["path"].startswith("media/") and "base64" not in photo["data"]
            data, offset, n = b"", 0, 1
            while offset is not None:
                chunk = await call(
                    n, "read_bytes", {"path": photo["data"]["path"], "offset": offset, "length": 256}
                )
                assert chunk["ok"], chunk
                piece = base64.b64decode(chunk["data"]["base64"])
                assert hashlib.sha256(piece).hexdigest() == chunk["data"]["sha256"]
                data, offset, n = data + piece, chunk["data"]["next_offset"], n + 1
            assert len(data) == photo["data"]["bytes"] and n > 2
            with PIL.open(io.BytesIO(data)) as picture:
                assert picture.size == (320, 240)
    finally:
        daemon.stop()
        broker.stop()


async def test_a_camera_without_its_program_names_what_to_install(tmp_path, monkeypatch):
    from edgeclaw.backends.media.camera import Camera, capture_command
    from edgeclaw.errors import BackendError

    monkeypatch.setenv("PATH", str(tmp_path))
    for kind, wanted in (("rpicam", "rpicam-apps"), ("v4l2", "fswebcam or ffmpeg")):
        with pytest.raises(BackendError, match=wanted):
            await Camera(kind).capture(640, 480, "jpeg")
    # The size and the device reach each program as its own options say.
    still = capture_command("/usr/bin/rpicam-still", Path("/t/o.jpg"), 640, 480, "jpeg", "1")
    assert still[-4:] == ["-e", "jpg", "-o", "/t/o.jpg"] and still[-6:-4] == ["--camera", "1"]
    assert "640x480" in capture_command("/usr/bin/fswebcam", Path("/t/o.png"), 640, 480, "png", "")
    ffmpeg = capture_command("/usr/bin/ffmpeg", Path("/t/o.jpg"), 320, 240, "jpeg", "/dev/video2")
    assert ffmpeg[ffmpeg.index("-i") + 1] == "/dev/video2" and "320x240" in ffmpeg
