"""Images made by a service: the OpenAI-compatible images API (`POST {base}/images/generations`)."""

from __future__ import annotations

import base64
import binascii

from edgeclaw.backends.http_client import SharedClient, error_detail
from edgeclaw.backends.media.image_info import media_type_of
from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

OPENAI_URL = "https://api.openai.com/v1"
MAX_IMAGE_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class GeneratorSettings:
    base_url: str = ""
    model: str = "gpt-image-1"
    timeout_s: float = 120.0


class ImageGenerator:
    def __init__(self, settings: GeneratorSettings, key: str, client: SharedClient) -> None:
        self.settings = settings
        self._key = key
        self._client = client

    async def generate(self, prompt: str, size: str) -> tuple[bytes, str]:
        """The image's bytes and media type; raises BackendError in the service's words."""
        import httpx

        s = self.settings
        body: dict[str, object] = {"model": s.model, "prompt": prompt, "size": size, "n": 1}
        if not s.model.startswith("gpt-image"):
            body["response_format"] = "b64_json"  # gpt-image models always answer so, and refuse the key
        url = (s.base_url or OPENAI_URL).rstrip("/") + "/images/generations"
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        try:
            response = await self._client.get().post(url, json=body, headers=headers, timeout=s.timeout_s)
        except httpx.TimeoutException:
            raise BackendError(f"image generation: no answer within {s.timeout_s:g} s") from None
        except httpx.HTTPError as e:
            raise BackendError(f"image generation: cannot reach {url}: {type(e).__name__}") from None
        if response.status_code >= 400:
            detail = error_detail(response.text)
            raise BackendError(
                f"image generation: HTTP {response.status_code}" + (f": {detail}" if detail else "")
            )
        try:
            item = response.json()["data"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise BackendError("image generation: the answer has no data[0]") from None
        encoded = item.get("b64_json") if isinstance(item, dict) else None
        if not isinstance(encoded, str):
            raise BackendError(
                "image generation: the answer carries no b64_json image (a URL is not fetched)"
            )
        if len(encoded) > MAX_IMAGE_BYTES * 4 // 3 + 4:
            raise BackendError(f"image generation: image over {MAX_IMAGE_BYTES} bytes")
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise BackendError("image generation: b64_json is not base64") from None
        kind = media_type_of(data[:32])
        if not kind:
            raise BackendError("image generation: the answer is not a PNG, JPEG, GIF or WebP image")
        return data, kind
