"""Audio files as the media tools hand them on: their format and length, and playing them on the board.

Lengths come from the file's own header (WAV's sample rate and frame count, MP3's frame headers);
nothing is decoded. Playing is `aplay` (ALSA, Debian's alsa-utils): it takes WAV as it is; other
formats are refused with a note rather than handed to a player that may not exist on the board.
"""

from __future__ import annotations

import io
import shutil
import struct
import wave

from edgeclaw.backends.media.programs import run_program
from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

# MPEG-1 Layer III bit rates (kbit/s) by the header's 4-bit index, and MPEG-2/2.5's.
_MP3_RATES_V1 = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 0)
_MP3_RATES_V2 = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 0)
_MP3_SAMPLE_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


@dataclass(frozen=True, slots=True)
class AudioInfo:
    format: str  # "wav" | "mp3" | "ogg" | "flac" | "pcm" | "unknown"
    duration_s: float | None  # None when the header does not say
    sample_rate: int | None = None
    channels: int | None = None

    def describe(self) -> str:
        length = f"{self.duration_s:.2f} s" if self.duration_s is not None else "unknown length"
        rate = f", {self.sample_rate} Hz" if self.sample_rate else ""
        return f"{self.format}, {length}{rate}"


def audio_format(data: bytes) -> str:
    """The container, from the first bytes."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "mp3"
    if data[:4] == b"OggS":
        return "ogg"
    if data[:4] == b"fLaC":
        return "flac"
    return "unknown"


def audio_info(data: bytes) -> AudioInfo:
    kind = audio_format(data)
    if kind == "wav":
        return _wav_info(data)
    if kind == "mp3":
        return _mp3_info(data)
    return AudioInfo(kind, None)


def _wav_info(data: bytes) -> AudioInfo:
    try:
        with wave.open(io.BytesIO(data)) as w:
            rate, frames, channels = w.getframerate(), w.getnframes(), w.getnchannels()
    except (wave.Error, EOFError, struct.error):
        return AudioInfo("wav", None)
    return AudioInfo("wav", frames / rate if rate else None, rate, channels)


def sized_wav(data: bytes) -> bytes:
    """A WAV with its RIFF and data sizes set to what it holds. A writer streaming to a pipe
    (`espeak-ng --stdout`) cannot know them and leaves a placeholder that players and readers
    take for hours of sound."""
    at = data.find(b"data", 12)
    if data[:4] != b"RIFF" or at < 0:
        return data
    body = len(data) - at - 8
    return (
        b"RIFF"
        + struct.pack("<I", len(data) - 8)
        + data[8 : at + 4]
        + struct.pack("<I", body)
        + data[at + 8 :]
    )


def _mp3_info(data: bytes) -> AudioInfo:
    """The length of a constant-bit-rate MP3 from its first frame header (an estimate for VBR)."""
    at = 0
    if data[:3] == b"ID3" and len(data) >= 10:
        size = data[6] << 21 | data[7] << 14 | data[8] << 7 | data[9]  # syncsafe integer
        at = 10 + size
    while at + 4 <= len(data) and not (data[at] == 0xFF and data[at + 1] & 0xE0 == 0xE0):
        at += 1
    if at + 4 > len(data):
        return AudioInfo("mp3", None)
    header = int.from_bytes(data[at : at + 4], "big")
    version = header >> 19 & 3  # 3 = MPEG-1, 2 = MPEG-2, 0 = MPEG-2.5
    rate_index, sample_index = header >> 12 & 0xF, header >> 10 & 3
    rates = _MP3_RATES_V1 if version == 3 else _MP3_RATES_V2
    if version not in _MP3_SAMPLE_RATES or sample_index == 3 or not rates[rate_index]:
        return AudioInfo("mp3", None)
    sample_rate = _MP3_SAMPLE_RATES[version][sample_index]
    seconds = (len(data) - at) * 8 / (rates[rate_index] * 1000)
    return AudioInfo("mp3", seconds, sample_rate, 1 if header >> 6 & 3 == 3 else 2)


def wav_from_pcm(pcm: bytes, sample_rate: int, channels: int = 1) -> bytes:
    """16-bit little-endian PCM wrapped in a WAV header (ElevenLabs' and others' raw output)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm)
    return out.getvalue()


async def play(path: str, device: str = "", timeout_s: float = 120.0) -> None:
    """Play a WAV file on the board's ALSA device (`aplay -D device`); raises BackendError."""
    player = shutil.which("aplay")
    if player is None:
        raise BackendError("cannot play: aplay is not installed (Debian package alsa-utils)")
    argv = [player, "-q", *(["-D", device] if device else []), path]
    await run_program(argv, None, timeout_s, "aplay")
