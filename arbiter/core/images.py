"""Images shown in a message: what the history keeps of each (a reference, never the bytes), and the bounds that
hold at intake.

An image is kept as the platform gives it: its address, media type, size in bytes and pixel dimensions, and when
that address stops working. Discord signs its attachment addresses and they expire (``ex=``, a hexadecimal Unix
time, about a day after the message was read); after that the address answers 404 and the image is gone for the
personas: they skip it and read the message's text alone (``expired``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ("IMAGE_TYPES", "ImageBounds", "ImageRef", "bounded", "signed_expiry")

# What both model providers take as image input (Anthropic's vision guide, OpenAI's images and vision guide).
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


@dataclass(frozen=True, slots=True)
class ImageRef:
    url: str
    content_type: str
    size: int | None = None  # bytes; unknown for an embed's image
    width: int | None = None
    height: int | None = None
    expires_at: float | None = None  # Unix time after which ``url`` no longer answers; None: not known to expire

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


@dataclass(frozen=True, slots=True)
class ImageBounds:
    """How many images of one message the history keeps, and the largest it keeps (bytes)."""

    per_message: int = 4
    max_bytes: int = 5 * 1024 * 1024


def bounded(images: Iterable[ImageRef], bounds: ImageBounds) -> tuple[ImageRef, ...]:
    """The images a message keeps: those of a type the models take, within the size, the first few."""
    kept = [
        image
        for image in images
        if image.content_type in IMAGE_TYPES
        and (image.size is None or image.size <= bounds.max_bytes)
        and urlsplit(image.url).scheme in ("http", "https")
    ]
    return tuple(kept[: bounds.per_message])


def signed_expiry(url: str) -> float | None:
    """When a signed Discord CDN address expires (its ``ex`` parameter, hexadecimal seconds), or None."""
    values = parse_qs(urlsplit(url).query).get("ex")
    if not values:
        return None
    try:
        return float(int(values[0], 16))
    except ValueError:
        return None
