"""The images people give the local room: each checked from its bytes, then held in the arbiter's memory and served
back to the page and to the personas.

Why the arbiter holds the bytes: the room runs on a loopback address, and a model provider fetches an image's
address from its own servers, so it can never reach one here. So the room keeps what it accepted and serves it at
``/room/images/<sha256>.<ext>``; the history records that address with ``local`` set, and a persona fetches the
bytes and sends them to its model inline (``bots.image_fetch``). The page shows the same address.

What is accepted: PNG, JPEG, GIF or WebP (what both providers take), read from the bytes, never from a file name or
a declared type; at most ``ARBITER_IMAGE_MAX_BYTES`` each and ``ARBITER_IMAGES_PER_MESSAGE`` a message (the bounds
the history keeps Discord's images within). Anything else is refused with what is wrong, before anything is kept.

Held in memory, newest kept, up to ``STORE_BYTES`` in all: the room is for trying the personas at one machine, and
its images need not outlive the process. An image no longer held (the arbiter restarted) answers 404: the page
says so and a persona skips it with one line in its log, reading the message by its text.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from dataclasses import dataclass

from arbiter.core.errors import InvalidRequest, TooLarge
from arbiter.core.images import IMAGE_TYPES, ImageBounds, Sniffed, sniff

__all__ = ("NAME_PATTERN", "STORE_BYTES", "Accepted", "RoomImages", "check_image")

STORE_BYTES = 256 * 1024 * 1024
NAME_PATTERN = r"[0-9a-f]{64}\.(?:png|jpg|gif|webp)"
_NAME = re.compile(NAME_PATTERN)
_EXTENSION = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}
_TAKEN = "PNG, JPEG, GIF or WebP"


@dataclass(frozen=True, slots=True)
class Accepted:
    """An image the room took: its name in the store (the hash of its bytes), what it is, and the bytes."""

    name: str
    image: Sniffed
    data: bytes


def check_image(data: bytes, bounds: ImageBounds, *, label: str) -> Accepted:
    """``data`` as the room takes it, or the refusal that says what is wrong (``label`` names it: "image 1
    (cat.png)")."""
    if len(data) > bounds.max_bytes:
        raise TooLarge(
            f"{label} is {len(data):,} bytes; the room takes images up to {bounds.max_bytes:,} bytes"
            " (ARBITER_IMAGE_MAX_BYTES)",
            field="image",
            code="image_too_large",
        )
    found = sniff(data)
    if found is None:
        raise InvalidRequest(
            f"{label} is not an image (its bytes are none of {_TAKEN})", field="image", code="not_an_image"
        )
    if found.media_type not in IMAGE_TYPES:
        raise InvalidRequest(
            f"{label} is {found.media_type}; the room takes {_TAKEN}, what the models take",
            field="image",
            code="image_type",
        )
    name = f"{hashlib.sha256(data).hexdigest()}.{_EXTENSION[found.media_type]}"
    return Accepted(name, found, data)


class RoomImages:
    """The accepted images' bytes by name, in memory: the newest kept, up to ``limit`` bytes in all."""

    def __init__(self, limit: int = STORE_BYTES) -> None:
        self._limit = limit
        self._held: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._bytes = 0

    def put(self, accepted: Accepted) -> bool:
        """Hold ``accepted``; False if it was held already (the same bytes given again)."""
        if accepted.name in self._held:
            self._held.move_to_end(accepted.name)
            return False
        self._held[accepted.name] = (accepted.image.media_type, accepted.data)
        self._bytes += len(accepted.data)
        while self._bytes > self._limit and len(self._held) > 1:
            _name, (_type, data) = self._held.popitem(last=False)
            self._bytes -= len(data)
        return True

    def discard(self, name: str) -> None:
        held = self._held.pop(name, None)
        if held is not None:
            self._bytes -= len(held[1])

    def get(self, name: str) -> tuple[str, bytes] | None:
        """The media type and bytes held under ``name``, or None."""
        return self._held.get(name) if _NAME.fullmatch(name) else None
