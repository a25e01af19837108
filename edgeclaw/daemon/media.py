"""The media tools wired to the runtime: speech providers with their keys, the images service, the
board's camera (the sim's lamp is its LED), and `image describe` asking a chat provider."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from edgeclaw.backends.http_client import SharedClient
from edgeclaw.errors import ToolError
from edgeclaw.tools.fs.workspace import Workspace

if TYPE_CHECKING:
    from edgeclaw.backends.media.camera import LampState
    from edgeclaw.daemon.runtime import Runtime
    from edgeclaw.tools.base import Tool
    from edgeclaw.tools.media.image import Describe

DESCRIBE_SYSTEM = (
    "You describe pictures for a person who cannot see them: plainly, briefly, only what is visible."
)


def describer(runtime: Runtime, client: SharedClient) -> Describe:
    """`image describe`'s model: tools.media.describe_provider, else the main agent's first provider."""
    from edgeclaw.agent.messages import ImagePart, Message
    from edgeclaw.agent.providers.base import ProviderError
    from edgeclaw.daemon.providers import provider_from_config

    config = runtime.config
    name = config.tools.media.describe_provider or next(iter(config.agent.providers), "")

    async def describe(data: bytes, media_type: str, question: str) -> str:
        if not name or name not in config.providers:
            raise ToolError(
                "describe needs a chat provider: set [agent] providers or tools.media.describe_provider"
            )
        provider = provider_from_config(
            name, config, runtime.secrets, runtime.registry.scrubber.scrub, client
        )
        image = ImagePart(media_type, base64.b64encode(data).decode("ascii"))
        try:
            answer = await provider.complete(
                DESCRIBE_SYSTEM, [Message("user", question, images=(image,))], []
            )
        except ProviderError as e:
            raise ToolError(str(e)) from None
        text = answer.text.strip()
        if not text:
            raise ToolError(f"{name} gave no description (is {provider.model} a vision model?)")
        return text

    return describe


def media_tools(runtime: Runtime, ws: Workspace) -> list[Tool]:
    """tts, image, camera and read_bytes, sharing one HTTP client that the runtime closes."""
    from edgeclaw.backends.media.camera import Camera
    from edgeclaw.backends.media.images import GeneratorSettings, ImageGenerator
    from edgeclaw.backends.media.tts import SpeechChain, VoiceSettings, make_provider
    from edgeclaw.tools.fs.read_bytes import ReadBytesTool
    from edgeclaw.tools.hardware.camera import CameraTool
    from edgeclaw.tools.media.image import ImageTool
    from edgeclaw.tools.media.tts import TtsTool

    media = runtime.config.tools.media
    client = SharedClient()  # made on the first request of any media service
    runtime.on_close(client.aclose)
    providers = []
    for name in media.tts.chain:
        p = media.tts.providers[name]
        settings = VoiceSettings(p.kind, p.base_url, p.model, p.voice, p.group_id, p.timeout_s)
        key = runtime.secrets.get(f"tools.media.tts.providers.{name}", "")
        providers.append(make_provider(name, settings, key, client))
    chain = SpeechChain(providers, espeak_fallback=media.tts.espeak_fallback or not providers)
    generator = None
    if media.image.enabled:
        g = media.image
        key = runtime.secrets.get("tools.media.image", "")
        generator = ImageGenerator(GeneratorSettings(g.base_url, g.model, g.timeout_s), key, client)
    grant = runtime.board.spec.camera if runtime.board.spec is not None else None
    camera = None
    if grant is not None:
        lamp = _sim_lamp(runtime) if grant.kind == "sim" else None
        camera = Camera(grant.kind, grant.device, lamp=lamp)
    registry = runtime.registry
    return [
        TtsTool(chain, ws, audio_device=media.tts.audio_device, max_chars=media.tts.max_chars),
        ImageTool(ws, generator=generator, describe=describer(runtime, client)),
        CameraTool(
            camera,
            ws,
            max_width=grant.max_width if grant else 0,
            max_height=grant.max_height if grant else 0,
            board=runtime.board.name,
        ),
        ReadBytesTool(ws, max_chunk=max(1024, registry.max_output_bytes * 3 // 4 - 1024)),
    ]


def _sim_lamp(runtime: Runtime) -> LampState:
    """The sim camera's lamp: the LED pin of the sim board (the first output pin it grants)."""
    spec = runtime.board.spec
    pin = next((g.pin for g in (spec.gpio if spec else []) if g.direction == "out"), None)

    async def lit() -> bool:
        if pin is None or runtime.hardware is None:
            return False
        state = await runtime.hardware.gpio().read(pin)
        return bool(state.active)

    return lit
