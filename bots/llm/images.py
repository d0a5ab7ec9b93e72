"""What an image shown to a model costs in input tokens, as each provider's documentation says."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bots.llm.base import ImageInput

__all__ = ("image_tokens",)

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
