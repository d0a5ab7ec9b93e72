"""Images shown in a message: what the history keeps of each (a reference, never the bytes), and the bounds that
hold at intake.

An image is kept as the platform gives it: its address, media type, size in bytes and pixel dimensions, and when
that address stops working. Discord signs its attachment addresses and they expire (``ex=``, a hexadecimal Unix
time, about a day after the message was read); after that the address answers 404 and the image is gone for the
personas: they skip it and read the message's text alone (``expired``).

An image a person gives the local room is not on the web: the arbiter holds its bytes and serves them on a
loopback address (``local``), which no model provider can fetch, so a persona sends those bytes inline. What the
room accepts is read from the bytes themselves (``sniff``), never from a file name or a declared type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ("IMAGE_TYPES", "ImageBounds", "ImageRef", "Sniffed", "bounded", "signed_expiry", "sniff")

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
    local: bool = False  # the arbiter holds the bytes at ``url``, an address only this machine reaches (the room)

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


@dataclass(frozen=True, slots=True)
class Sniffed:
    """What a file's first bytes say it is: a media type, and the pixel dimensions when its header gives them."""

    media_type: str
    width: int | None = None
    height: int | None = None


# Formats a person may well try that the models do not take: named in the refusal rather than "not an image".
_OTHER_FORMATS = (
    (b"BM", "image/bmp"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
    (b"\x00\x00\x01\x00", "image/x-icon"),
)


def sniff(data: bytes) -> Sniffed | None:
    """The image ``data`` holds, by its signature (PNG, JPEG, GIF, WebP with their dimensions; a few other image
    formats by name only), or None when it is not an image at all."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24 and data[12:16] == b"IHDR":
        return Sniffed("image/png", int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big"))
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return Sniffed("image/gif", int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little"))
    if data.startswith(b"\xff\xd8\xff"):
        return Sniffed("image/jpeg", *_jpeg_size(data))
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return Sniffed("image/webp", *_webp_size(data))
    if data[4:8] == b"ftyp" and data[8:12] in (b"heic", b"heix", b"mif1", b"avif"):
        return Sniffed("image/avif" if data[8:12] == b"avif" else "image/heic")
    for signature, media_type in _OTHER_FORMATS:
        if data.startswith(signature):
            return Sniffed(media_type)
    return None


def _jpeg_size(data: bytes) -> tuple[int | None, int | None]:
    """A JPEG's dimensions, from its first start-of-frame marker (SOF0-SOF15 but DHT, JPG and DAC)."""
    at = 2
    while at + 9 <= len(data):
        if data[at] != 0xFF:
            return None, None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return int.from_bytes(data[at + 7 : at + 9], "big"), int.from_bytes(data[at + 5 : at + 7], "big")
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            at += 2
            continue
        at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    return None, None


def _webp_size(data: bytes) -> tuple[int | None, int | None]:
    """A WebP's dimensions from its first chunk: lossy (VP8), lossless (VP8L) or extended (VP8X)."""
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        return int.from_bytes(data[26:28], "little") & 0x3FFF, int.from_bytes(data[28:30], "little") & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None, None
