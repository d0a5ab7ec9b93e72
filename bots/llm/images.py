"""What an image shown to a model costs in input tokens, as each provider's documentation says; how large an image
each takes inline; and what a file is by its first bytes."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bots.llm.base import ImageInput

__all__ = ("INLINE_MAX_BYTES", "image_tokens", "media_type_of")

# The largest image (its bytes) each provider takes inline. Anthropic refuses an image whose base64 text is over
# 5 MB (its vision guide's per-image limit, held to the encoded length), so 3/4 of that in bytes; OpenAI takes
# images up to 20 MB (its images and vision guide; a request's whole payload up to 50 MB).
INLINE_MAX_BYTES = {"anthropic": 5 * 1024 * 1024 * 3 // 4, "openai": 20 * 1024 * 1024}

# The signatures of the four kinds both providers take (the arbiter reads the same, with the dimensions, in
# ``arbiter.core.images.sniff``, which the persona side may not import).
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def media_type_of(data: bytes) -> str | None:
    """Which of PNG, JPEG, GIF and WebP ``data`` starts as, or None (another format, or not an image)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((media_type for signature, media_type in _SIGNATURES if data.startswith(signature)), None)


# When the dimensions are not known (an embed's picture may not say), what an image is taken to cost: the most
# one costs after the provider scales it. Anthropic: its largest unresized image (about 1.15 megapixels) is about
# 1,600 tokens; OpenAI at high detail: 768 x 2000 px, 2 x 4 tiles.
_UNKNOWN_TOKENS = {"anthropic": 1600, "openai": 85 + 170 * 8}


def image_tokens(provider: str, image: ImageInput) -> int:
    """What an image costs in input tokens, as each provider's documentation says. Anthropic: about width x height
    / 750, after scaling the long edge to at most 1568 px. OpenAI (detail "auto", counted as "high"): the image
    fits 2048 x 2048, then its short side 768 px; 170 tokens per 512 px tile, and 85 more."""
    if image.width is None or image.height is None or image.width <= 0 or image.height <= 0:
        return _UNKNOWN_TOKENS.get(provider, 0)
    width, height = float(image.width), float(image.height)
    if provider == "anthropic":
        scale = min(1.0, 1568 / max(width, height))
        return max(1, math.ceil(width * scale * height * scale / 750))
    if provider == "openai":
        scale = min(1.0, 2048 / max(width, height))
        width, height = width * scale, height * scale
        scale = min(1.0, 768 / min(width, height))
        width, height = width * scale, height * scale
        return 85 + 170 * math.ceil(width / 512) * math.ceil(height / 512)
    return 0
