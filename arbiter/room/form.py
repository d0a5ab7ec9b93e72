"""A message with pictures as the page sends it: a ``multipart/form-data`` body (``name``, ``text``, and one
``image`` file per picture), read part by part within bounds, never whole first (the room's JSON bodies are
limited to 64 KB; a form's images to ``ARBITER_IMAGE_MAX_BYTES`` each), and every image checked
(``arbiter.room.images.check_image``) before anything is kept."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from aiohttp import BodyPartReader, web
from pydantic import ValidationError

from arbiter.api.errors import validation_error
from arbiter.core.errors import InvalidRequest, TooLarge
from arbiter.core.limits import MAX_TEXT_LENGTH
from arbiter.room.images import Accepted, check_image
from arbiter.room.models import SayRequest

if TYPE_CHECKING:
    from arbiter.core.images import ImageBounds

__all__ = ("read_say_form",)

_FIELD_BYTES = 4 * MAX_TEXT_LENGTH + 1024  # a name or a text field, in UTF-8, with room to spare


async def read_say_form(request: web.Request, bounds: ImageBounds) -> tuple[SayRequest, list[tuple[str, Accepted]]]:
    """A message with images, as a form: every part read within its bound and checked before anything is kept;
    each image with the name the history gives its file."""
    fields: dict[str, str] = {}
    accepted: list[tuple[str, Accepted]] = []
    try:
        reader = await request.multipart()
        parts = 0
        while (part := await reader.next()) is not None:
            parts += 1
            # Name and text, the images, and the one image too many that is refused by name below.
            if parts > bounds.per_message + 3:
                raise InvalidRequest("the form has more fields than name, text and its images", code="bad_form")
            if not isinstance(part, BodyPartReader) or part.name not in ("name", "text", "image"):
                name = part.name if isinstance(part, BodyPartReader) else "a nested form"
                raise InvalidRequest(f"unexpected form field {name!r}: expected name, text and image", field=name)
            if part.name != "image":
                raw = await _read_part(part, _FIELD_BYTES, part.name)
                try:
                    fields[part.name] = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise InvalidRequest(f"{part.name} is not UTF-8 text", field=part.name) from None
                continue
            if len(accepted) >= bounds.per_message:
                raise InvalidRequest(
                    f"a message takes at most {bounds.per_message} images (ARBITER_IMAGES_PER_MESSAGE)"
                    if bounds.per_message
                    else "the room keeps no images (ARBITER_IMAGES_PER_MESSAGE is 0)",
                    field="image",
                    code="too_many_images",
                )
            filename = _file_name(part.filename, len(accepted) + 1)
            label = f"image {len(accepted) + 1} ({filename})"
            data = await _read_part(part, bounds.max_bytes, label, image=True)
            accepted.append((filename, check_image(data, bounds, label=label)))
    except ValueError as error:  # aiohttp: not a well-formed multipart body
        raise InvalidRequest(f"the form could not be read: {error}", code="bad_form") from None
    text = fields.get("text", "").strip()
    if accepted:
        # As the Discord intake does: the text names the files, so a model shown no image still knows of them.
        text = f"{text} [attached: {', '.join(filename for filename, _ in accepted)}]".strip()
    try:
        body = SayRequest.model_validate({"name": fields.get("name", ""), "text": text})
    except ValidationError as error:
        raise validation_error(error) from None
    return body, accepted


async def _read_part(part: BodyPartReader, limit: int, label: str, *, image: bool = False) -> bytes:
    """A part's bytes, refused as soon as they pass ``limit`` (the body is never read whole first)."""
    data = bytearray()
    while chunk := await part.read_chunk(64 * 1024):
        data += chunk
        if len(data) > limit:
            if image:
                raise TooLarge(
                    f"{label} is larger than the {limit:,} bytes the room takes an image (ARBITER_IMAGE_MAX_BYTES)",
                    field="image",
                    code="image_too_large",
                )
            raise InvalidRequest(f"{label} is longer than the room takes", field=label)
    return bytes(data)


def _file_name(name: str | None, number: int) -> str:
    """A file's name as the history shows it: one line, short; a pasted picture has none of its own."""
    cleaned = re.sub(r"[\x00-\x1f\x7f\[\],]+", " ", name or "").strip()[:80]
    return cleaned or f"image-{number}"
