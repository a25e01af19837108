"""`tts`: text to speech, written to the workspace as WAV or MP3, and played on the board if asked."""

from __future__ import annotations

import asyncio
from typing import Any

from edgeclaw.backends.media.audio import audio_info, play
from edgeclaw.backends.media.tts import FORMATS, SpeechChain, SpeechError
from edgeclaw.errors import BackendError, ToolError
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.media.files import output_path, save, size_text


class TtsTool(Tool):
    name = "tts"
    group = "media"
    description = (
        "Speak a text: writes the speech to a workspace file (WAV by default) and says its path and "
        "length; play=true also plays it on the board's speaker."
    )

    def __init__(self, chain: SpeechChain, ws: Workspace, *, audio_device: str = "", max_chars: int = 2000):
        self.chain = chain
        self.ws = ws
        self.audio_device = audio_device
        self.max_chars = max_chars
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": max_chars,
                    "description": "What to say.",
                },
                "voice": {
                    "type": "string",
                    "maxLength": 200,
                    "description": "The provider's voice name or id.",
                },
                "format": {"type": "string", "enum": list(FORMATS), "description": "Default wav."},
                "provider": {
                    "type": "string",
                    "maxLength": 64,
                    "description": f"Only this provider ({', '.join(chain.names())}); default: the chain.",
                },
                "play": {"type": "boolean", "description": "Also play it on the board (WAV only)."},
                "path": {"type": "string", "maxLength": 512, "description": "Workspace path to write."},
            },
            "required": ["text"],
            "additionalProperties": False,
        }

    async def check(self, args: Args, ctx: ToolContext) -> None:
        fmt = args.get("format") or "wav"
        if args.get("play") and fmt != "wav":
            raise ToolError("play takes WAV only (aplay): ask for format wav")
        output_path(self.ws, args.get("path"), "speech", fmt)

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        fmt = args.get("format") or "wav"
        text = args["text"]
        if not text.strip():
            raise ToolError("text is empty: nothing to say")
        try:
            speech = await self.chain.synthesize(
                text, args.get("voice") or "", fmt, args.get("provider") or ""
            )
        except SpeechError as e:
            raise ToolError(str(e)) from None
        path, shown = output_path(self.ws, args.get("path"), "speech", speech.format)
        await asyncio.to_thread(save, self.ws, path, speech.audio, shown)
        info = audio_info(speech.audio)
        played = False
        note = ""
        if args.get("play"):
            try:
                await play(str(path), self.audio_device)
                played = True
            except BackendError as e:
                note = f"; not played: {e}"
        said = f"{shown} ({size_text(len(speech.audio))}, {info.describe()}) by {speech.provider}"
        return ToolResult(
            for_llm=f"Wrote speech to {said}" + ("; played" if played else "") + note,
            data={
                "path": shown,
                "bytes": len(speech.audio),
                "format": speech.format,
                "media_type": "audio/wav" if speech.format == "wav" else "audio/mpeg",
                "duration_s": None if info.duration_s is None else round(info.duration_s, 3),
                "sample_rate": info.sample_rate,
                "provider": speech.provider,
                "voice": speech.voice,
                "played": played,
            },
        )
