"""The fake's application emojis: what GET/POST/DELETE /applications/{application.id}/emojis do on Discord, and
whether a reaction's custom emoji (``name:id``) is one the reacting bot may use.

As Discord documents them (docs/resources/emoji): an application owns at most 2,000 emojis, usable by its bot
anywhere without Use External Emojis; a name is 2 to 32 letters, digits and underscores; the image is a data URI
(PNG, JPEG, GIF, WebP or AVIF) of at most 256 KiB. A bad name or image is 400 Invalid Form Body (50035) naming the
field; the 2,001st emoji is 400 Maximum number of emojis reached (30008). A name the application already uses is
refused too (50035 on ``name``, APPLICATION_EMOJI_NAME_ALREADY_TAKEN, as Discord answers it; the docs do not list it).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .records import ApiError

if TYPE_CHECKING:
    from .model import FakeBot
    from .rest import Call
    from .server import FakeDiscord

__all__ = ("MAX_APP_EMOJIS", "AppEmoji", "create_app_emoji", "delete_app_emoji", "list_app_emojis", "usable_emoji")

MAX_APP_EMOJIS = 2000
MAX_EMOJI_BYTES = 256 * 1024
_NAME = re.compile(r"[A-Za-z0-9_]{2,32}")
_DATA_URI = re.compile(r"data:image/(png|jpeg|gif|webp|avif);base64,(.*)", re.DOTALL)


@dataclass
class AppEmoji:
    id: int
    name: str
    image: bytes
    kind: str  # the image's type, from its data URI: png, jpeg, gif, webp, avif
    uploader: FakeBot

    def payload(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "name": self.name,
            "roles": [],
            "user": self.uploader.payload(),
            "require_colons": True,
            "managed": False,
            "animated": self.kind == "gif",
            "available": True,
        }


def _owned(call: Call) -> list[AppEmoji]:
    """The emojis of the application in the path, which must be the calling bot's."""
    if call.params["application_id"] != str(call.bot.application_id):
        raise ApiError(403, 50001, "Missing Access")
    return call.fake.app_emojis.setdefault(call.bot.application_id, [])


def _invalid(field: str, code: str, message: str) -> ApiError:
    return ApiError(400, 50035, "Invalid Form Body", errors={field: {"_errors": [{"code": code, "message": message}]}})


async def list_app_emojis(call: Call) -> tuple[int, Any]:
    return 200, {"items": [emoji.payload() for emoji in _owned(call)]}


async def create_app_emoji(call: Call) -> tuple[int, Any]:
    emojis = _owned(call)
    body = call.body if isinstance(call.body, dict) else {}
    name, image = body.get("name"), body.get("image")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _invalid("name", "STRING_TYPE_REGEX", "Must be 2 to 32 letters, digits or underscores.")
    if any(emoji.name == name for emoji in emojis):
        raise _invalid("name", "APPLICATION_EMOJI_NAME_ALREADY_TAKEN", "Emoji name already taken.")
    match = _DATA_URI.fullmatch(image) if isinstance(image, str) else None
    try:
        data = base64.b64decode(match.group(2), validate=True) if match is not None else b""
    except binascii.Error:
        data = b""
    if not data:
        raise _invalid("image", "IMAGE_INVALID", "Invalid image data")
    if len(data) > MAX_EMOJI_BYTES:
        raise _invalid("image", "BINARY_TYPE_MAX_SIZE", "File cannot be larger than 256.0 kb.")
    if len(emojis) >= MAX_APP_EMOJIS:
        raise ApiError(400, 30008, f"Maximum number of emojis reached ({MAX_APP_EMOJIS})")
    assert match is not None
    emoji = AppEmoji(id=call.fake.snowflake(), name=name, image=data, kind=match.group(1), uploader=call.bot)
    emojis.append(emoji)
    return 201, emoji.payload()


async def delete_app_emoji(call: Call) -> tuple[int, Any]:
    emojis = _owned(call)
    emoji = next((e for e in emojis if str(e.id) == call.params["emoji_id"]), None)
    if emoji is None:
        raise ApiError(404, 10014, "Unknown Emoji")
    emojis.remove(emoji)
    return 204, None


def usable_emoji(fake: FakeDiscord, bot: FakeBot, raw: str) -> str:
    """A reaction's emoji as Discord takes it: a Unicode emoji, or ``name:id`` of an emoji the bot may use (here: its
    own application's; the fake has no server emojis). A bare word, or an id it cannot use, is Unknown Emoji."""
    name, colon, emoji_id = raw.removeprefix(":").partition(":")
    if not colon:
        if raw.isascii():
            raise ApiError(400, 10014, "Unknown Emoji")
        return raw
    if not any(str(emoji.id) == emoji_id for emoji in fake.app_emojis.get(bot.application_id, [])):
        raise ApiError(400, 10014, "Unknown Emoji")
    return f"{name}:{emoji_id}"
