"""Speech synthesis: HTTP services (OpenAI-compatible, ElevenLabs, MiniMax, Edge's read-aloud service)
and programs on the board (espeak-ng, piper), tried in a chain like the chat providers.

Every HTTP provider goes through one lazily made client; its key comes from the config (environment
or file) and travels in a header, never a URL. A failure that may pass (429, 5xx, no connection, no
answer in time) hands over to the next provider, as does any other refusal, whose words are kept:
the caller learns why each provider did not speak. Text reaches the programs on their standard
input, never their command line, so a text that starts with "-" is text, not an option.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from edgeclaw.backends.http_client import SharedClient, error_detail, parse_retry_after
from edgeclaw.backends.media.audio import audio_format, sized_wav, wav_from_pcm
from edgeclaw.backends.media.programs import ProgramFailed, run_program
from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

FORMATS = ("wav", "mp3")
OPENAI_URL = "https://api.openai.com/v1"
ELEVENLABS_URL = "https://api.elevenlabs.io"
MINIMAX_URL = "https://api.minimax.io"
# ElevenLabs' raw PCM rate asked for a WAV (its WAV is our header around it), MiniMax's sample rate.
ELEVENLABS_PCM_RATE = 16000
MINIMAX_SAMPLE_RATE = 32000
MAX_RETRY_AFTER_S = 5.0  # a 429 that asks for a longer wait moves on to the next provider
MAX_AUDIO_BYTES = 20 * 1024 * 1024
# MiniMax answers HTTP 200 and says in base_resp what went wrong; these codes are "not now".
MINIMAX_TRANSIENT = frozenset({1000, 1001, 1002, 1039})


class SpeechError(BackendError):
    def __init__(self, message: str, *, retryable: bool = False, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Speech:
    audio: bytes
    format: str  # "wav" | "mp3"
    provider: str
    voice: str


@dataclass(frozen=True, slots=True)
class VoiceSettings:
    """One provider's settings ([tools.media.tts.providers.NAME] as the config gives them)."""

    kind: str
    base_url: str = ""
    model: str = ""
    voice: str = ""
    group_id: str = ""  # MiniMax's account group, when the account has one
    timeout_s: float = 30.0


class SpeechProvider(Protocol):
    name: str
    kind: str

    def available(self) -> str:
        """ "" when it can be asked; else why not (a program that is not installed)."""
        ...

    async def synthesize(self, text: str, voice: str, fmt: str) -> Speech: ...


# -- programs on the board -------------------------------------------------------------------------
async def _run_program(argv: list[str], text: str, timeout_s: float, what: str) -> bytes:
    try:
        return await run_program(argv, text.encode("utf-8"), timeout_s, what)
    except ProgramFailed as e:
        raise SpeechError(str(e), retryable=e.timed_out) from None


class _ProgramSpeech:
    """A provider that is a program on the board: its name and settings."""

    kind = ""

    def __init__(self, name: str, settings: VoiceSettings) -> None:
        self.name = name
        self.settings = settings


class EspeakProvider(_ProgramSpeech):
    """espeak-ng (Debian's espeak-ng): offline, small, robotic; always WAV."""

    kind = "espeak"

    def available(self) -> str:
        return "" if shutil.which("espeak-ng") else "espeak-ng is not installed (Debian package espeak-ng)"

    async def synthesize(self, text: str, voice: str, fmt: str) -> Speech:
        if fmt != "wav":
            raise SpeechError(f"{self.name}: espeak-ng writes WAV only, not {fmt}")
        program = shutil.which("espeak-ng")
        if program is None:
            raise SpeechError(f"{self.name}: {self.available()}")
        voice = voice or self.settings.voice or "en"
        argv = [program, "--stdout", "-v", voice]
        audio = await _run_program(argv, text, self.settings.timeout_s, f"{self.name} (espeak-ng)")
        if audio_format(audio) != "wav":
            raise SpeechError(f"{self.name}: espeak-ng gave no WAV (unknown voice {voice!r}?)")
        return Speech(sized_wav(audio), "wav", self.name, voice)


class PiperProvider(_ProgramSpeech):
    """piper (the `piper-tts` extra, where it installs): offline neural voices from an .onnx model."""

    kind = "piper"

    def available(self) -> str:
        if not shutil.which("piper"):
            return "piper is not installed (pip install 'edgeclaw[piper]')"
        if not self.settings.model:
            return "no voice model configured (model = path of a piper .onnx voice)"
        return ""

    async def synthesize(self, text: str, voice: str, fmt: str) -> Speech:
        if fmt != "wav":
            raise SpeechError(f"{self.name}: piper writes WAV only, not {fmt}")
        if why := self.available():
            raise SpeechError(f"{self.name}: {why}")
        program = shutil.which("piper") or "piper"
        model = voice or self.settings.model
        with tempfile.TemporaryDirectory(prefix="edgeclaw-piper-") as tmp:
            out = Path(tmp) / "speech.wav"
            argv = [program, "--model", model, "--output_file", str(out)]
            await _run_program(argv, text, self.settings.timeout_s, f"{self.name} (piper)")
            try:
                audio = out.read_bytes()
            except OSError:
                raise SpeechError(f"{self.name}: piper wrote no audio") from None
        return Speech(audio, "wav", self.name, model)


# -- HTTP services ---------------------------------------------------------------------------------
class _HttpSpeech:
    kind = ""

    def __init__(self, name: str, settings: VoiceSettings, key: str, client: SharedClient) -> None:
        self.name = name
        self.settings = settings
        self._key = key
        self._client = client

    def available(self) -> str:
        return ""

    async def _post(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[bytes, str]:
        """The answer's bytes and content type; raises SpeechError in the provider's words."""
        import httpx

        timeout = self.settings.timeout_s
        try:
            async with self._client.get().stream(
                "POST", url, json=body, headers=headers, timeout=timeout
            ) as response:
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > MAX_AUDIO_BYTES:
                        raise SpeechError(f"{self.name}: answer over {MAX_AUDIO_BYTES} bytes")
                status, kind = response.status_code, response.headers.get("content-type", "")
                retry_after = response.headers.get("retry-after")
        except httpx.TimeoutException:
            raise SpeechError(f"{self.name}: no answer within {timeout:g} s", retryable=True) from None
        except httpx.HTTPError as e:
            raise SpeechError(
                f"{self.name}: cannot reach {url}: {type(e).__name__}", retryable=True
            ) from None
        if status >= 400:
            detail = error_detail(bytes(data).decode("utf-8", "replace"))
            said = f": {detail}" if detail else ""
            raise SpeechError(
                f"{self.name}: HTTP {status}{said}",
                retryable=status == 429 or status >= 500,
                retry_after=parse_retry_after(retry_after),
            )
        return bytes(data), kind

    def _audio(self, data: bytes, fmt: str, voice: str) -> Speech:
        found = audio_format(data)
        if found != fmt:
            raise SpeechError(f"{self.name}: asked for {fmt}, the answer is {found} ({len(data)} bytes)")
        return Speech(data, fmt, self.name, voice)


class OpenAISpeech(_HttpSpeech):
    """`POST {base}/audio/speech` (OpenAI, and servers that copy it: LocalAI, Kokoro-FastAPI, …)."""

    kind = "openai"

    async def synthesize(self, text: str, voice: str, fmt: str) -> Speech:
        s = self.settings
        voice = voice or s.voice or "alloy"
        body = {"model": s.model or "gpt-4o-mini-tts", "input": text, "voice": voice, "response_format": fmt}
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        url = (s.base_url or OPENAI_URL).rstrip("/") + "/audio/speech"
        data, _ = await self._post(url, body, headers)
        return self._audio(data, fmt, voice)


class ElevenLabsSpeech(_HttpSpeech):
    """`POST {base}/v1/text-to-speech/{voice_id}?output_format=…` with the `xi-api-key` header."""

    kind = "elevenlabs"

    async def synthesize(self, text: str, voice: str, fmt: str) -> Speech:
        s = self.settings
        voice = voice or s.voice or "21m00Tcm4TlvDq8ikWAM"  # ElevenLabs' stock voice "Rachel"
        # Its MP3 comes as MP3; a WAV is asked for as raw 16-bit PCM and given a header here.
        output = "mp3_44100_128" if fmt == "mp3" else f"pcm_{ELEVENLABS_PCM_RATE}"
        url = f"{(s.base_url or ELEVENLABS_URL).rstrip('/')}/v1/text-to-speech/{voice}?output_format={output}"
        body = {"text": text, "model_id": s.model or "eleven_multilingual_v2"}
        data, _ = await self._post(url, body, {"xi-api-key": self._key} if self._key else {})
        if fmt == "wav":
            if audio_format(data) != "unknown" or len(data) % 2:
                raise SpeechError(f"{self.name}: asked for 16-bit PCM, got {audio_format(data)}")
            data = wav_from_pcm(data, ELEVENLABS_PCM_RATE)
        return self._audio(data, fmt, voice)


class MiniMaxSpeech(_HttpSpeech):
    """MiniMax's `POST {base}/v1/t2a_v2`: JSON back, the audio hex-encoded in `data.audio`."""

    kind = "minimax"

    async def synthesize(self, text: str, voice: str, fmt: str) -> Speech:
        s = self.settings
        voice = voice or s.voice or "English_expressive_narrator"
        body = {
            "model": s.model or "speech-02-hd",
            "text": text,
            "stream": False,
            "output_format": "hex",
            "voice_setting": {"voice_id": voice, "speed": 1, "vol": 1, "pitch": 0},
            "audio_setting": {"sample_rate": MINIMAX_SAMPLE_RATE, "format": fmt, "channel": 1},
        }
        url = (s.base_url or MINIMAX_URL).rstrip("/") + "/v1/t2a_v2"
        if s.group_id:
            url += f"?GroupId={s.group_id}"
        data, _ = await self._post(url, body, {"Authorization": f"Bearer {self._key}"} if self._key else {})
        import json

        try:
            answer = json.loads(data)
        except ValueError:
            raise SpeechError(f"{self.name}: the answer is not JSON ({len(data)} bytes)") from None
        base = answer.get("base_resp") if isinstance(answer, dict) else None
        code = base.get("status_code", 0) if isinstance(base, dict) else 0
        if code:
            said = base.get("status_msg", "") if isinstance(base, dict) else ""
            raise SpeechError(
                f"{self.name}: MiniMax status {code}: {said}", retryable=code in MINIMAX_TRANSIENT
            )
        hex_audio = (answer.get("data") or {}).get("audio") if isinstance(answer, dict) else None
        try:
            audio = bytes.fromhex(hex_audio) if isinstance(hex_audio, str) else b""
        except ValueError:
            audio = b""
        if not audio:
            raise SpeechError(f"{self.name}: the answer carries no audio")
        return self._audio(audio, fmt, voice)


class EdgeSpeech(_ProgramSpeech):
    """Edge's read-aloud voices through the `edge-tts` program (the `edge-tts` extra): it speaks the
    service's WebSocket protocol and its rotating client token, which plain HTTP cannot. The text
    goes in a private file (`--file`), never on the command line; the service answers MP3 only."""

    kind = "edge"

    def available(self) -> str:
        return (
            "" if shutil.which("edge-tts") else "edge-tts is not installed (pip install 'edgeclaw[edge-tts]')"
        )

    async def synthesize(self, text: str, voice: str, fmt: str) -> Speech:
        if fmt != "mp3":
            raise SpeechError(f"{self.name}: Edge's voices come as MP3 only, not {fmt}")
        program = shutil.which("edge-tts")
        if program is None:
            raise SpeechError(f"{self.name}: {self.available()}")
        voice = voice or self.settings.voice or "en-US-AriaNeural"
        with tempfile.TemporaryDirectory(prefix="edgeclaw-edge-") as tmp:
            words, out = Path(tmp) / "text.txt", Path(tmp) / "speech.mp3"
            words.write_text(text, encoding="utf-8")
            argv = [program, "--file", str(words), "--voice", voice, "--write-media", str(out)]
            await _run_program(argv, "", self.settings.timeout_s, f"{self.name} (edge-tts)")
            try:
                audio = out.read_bytes()
            except OSError:
                raise SpeechError(f"{self.name}: edge-tts wrote no audio") from None
        if audio_format(audio) != "mp3":
            raise SpeechError(f"{self.name}: edge-tts wrote no MP3 ({len(audio)} bytes)")
        return Speech(audio, "mp3", self.name, voice)


def make_provider(name: str, settings: VoiceSettings, key: str, client: SharedClient) -> SpeechProvider:
    if settings.kind == "espeak":
        return EspeakProvider(name, settings)
    if settings.kind == "piper":
        return PiperProvider(name, settings)
    if settings.kind == "edge":
        return EdgeSpeech(name, settings)
    http = {"openai": OpenAISpeech, "elevenlabs": ElevenLabsSpeech, "minimax": MiniMaxSpeech}
    if settings.kind not in http:
        raise ValueError(f"unknown speech provider kind {settings.kind!r}")
    return http[settings.kind](name, settings, key, client)


class SpeechChain:
    """The providers in order; espeak-ng last when it is installed and not in the chain already."""

    def __init__(self, providers: Sequence[SpeechProvider], *, espeak_fallback: bool = True) -> None:
        self.providers = list(providers)
        if espeak_fallback and not any(p.kind == "espeak" for p in self.providers):
            self.providers.append(EspeakProvider("espeak", VoiceSettings("espeak")))
        self._sleep = asyncio.sleep

    def names(self) -> list[str]:
        return [p.name for p in self.providers]

    def by_name(self) -> Mapping[str, SpeechProvider]:
        return {p.name: p for p in self.providers}

    async def synthesize(self, text: str, voice: str, fmt: str, only: str = "") -> Speech:
        """The first provider that speaks (`only`: that provider alone). Raises SpeechError
        naming why each one did not."""
        chosen = [p for p in self.providers if not only or p.name == only or p.kind == only]
        if not chosen:
            raise SpeechError(f"no speech provider {only!r} (configured: {', '.join(self.names())})")
        failures: list[str] = []
        for provider in chosen:
            if why := provider.available():
                failures.append(f"{provider.name}: {why}")
                continue
            try:
                return await self._ask(provider, text, voice, fmt)
            except SpeechError as e:
                failures.append(str(e))
        raise SpeechError("no speech provider could speak (" + "; ".join(failures) + ")")

    async def _ask(self, provider: SpeechProvider, text: str, voice: str, fmt: str) -> Speech:
        try:
            return await provider.synthesize(text, voice, fmt)
        except SpeechError as e:
            # One more try on a "not now" whose wait is short; a longer one goes to the next provider.
            wait = e.retry_after if e.retry_after is not None else 0.5
            if not e.retryable or wait > MAX_RETRY_AFTER_S:
                raise
        await self._sleep(wait)
        return await provider.synthesize(text, voice, fmt)
