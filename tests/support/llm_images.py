"""The image rules of the local LLM wire servers (``tests.support.llm_server``): what the real APIs take as image
input and refuse, and what they charge for it.

Anthropic Messages (platform.claude.com/docs/en/build-with-claude/vision; the SDK's ``ImageBlockParam``): an
``image`` block in a user message, its ``source`` one of ``base64`` (``media_type`` one of image/jpeg, image/png,
image/gif, image/webp, and ``data``) or ``url`` (an address the API fetches: http or https here); at most 600
images a request. OpenAI Chat Completions (platform.openai.com/docs/guides/images-vision; the SDK's
``ChatCompletionContentPartImageParam``): an ``image_url`` part in a user message, its ``image_url.url`` an http(s)
address or a ``data:image/...;base64,`` URL of PNG, JPEG, WebP or GIF, its ``detail`` one of auto, low, high; at
most 500 images a request. Neither takes an image in an assistant message.

Inline images are read as the APIs read them: the base64 must decode, and its bytes be an image of a kind both take.
Anthropic refuses bytes that are no image ("Could not process image"), bytes of another kind than the block's
``media_type`` ("The image was specified using the image/png media type, but the image appears to be a
image/jpeg image"), a base64 text over 5 MB (the vision guide's per-image limit, which the API holds to the encoded
length) and a side over 8000 px (the vision guide). OpenAI refuses a data URL whose bytes are no image of the four
kinds or over 20 MB ("You uploaded an unsupported image...", code ``invalid_image_format``); it reads the kind from
the bytes, not the URL's media type.

An image by address is fetched, as both APIs fetch it, and the whole request refused when it cannot be downloaded
(a 4xx or 5xx, a refused connection, a timeout) or is not an image: Anthropic with a 400 invalid_request_error
"Unable to download the file. Please verify the URL and try again." (quoted alike by many public projects that met
it, signed addresses expired after a day among them), OpenAI with a 400 ``invalid_image_url`` "Error while
downloading <url>." ("Timeout while downloading <url>." for a slow host, as users report it; the providers' guides
say only that the address must be reachable). Here an address is fetched from this machine, where the real APIs
fetch from theirs: a loopback address they could never reach is fetched all the same, so the tests can serve
pictures (the persona side never gives a provider the room's: ``bots.image_fetch``); and plain http is taken,
where Anthropic answers "Only HTTPS URLs are supported.", since the fake Discord's CDN has no TLS.

Charged: each image by its dimensions as read from its bytes (``bots.llm.images.image_tokens``), added to the
scripted input tokens."""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from dataclasses import replace
from typing import Any

import aiohttp

from arbiter.core.images import sniff
from bots.llm.base import ImageInput
from bots.llm.images import image_tokens

__all__ = ("ImageRefused", "claude_images", "fetch_images", "gpt_images", "image_charge")

IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
CLAUDE_MAX_IMAGES = 600
GPT_MAX_IMAGES = 500
_DATA_URL = re.compile(r"^data:(image/(?:png|jpeg|webp|gif));base64,([A-Za-z0-9+/=]+)$")
CLAUDE_MAX_BASE64 = 5 * 1024 * 1024
CLAUDE_MAX_SIDE = 8000
GPT_MAX_BYTES = 20 * 1024 * 1024
_GPT_UNSUPPORTED = (
    "You uploaded an unsupported image. Please make sure your image is below 20 MB in size and is of one the"
    " following formats: ['png', 'jpeg', 'gif', 'webp']."
)
_CLAUDE_UNREADABLE = "Could not process image"
FETCH_TIMEOUT_S = 5.0


class ImageRefused(Exception):
    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


def _decoded(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _claude_inline(source: dict[str, Any], where: str) -> ImageInput:
    media_type, text = source.get("media_type"), source.get("data")
    if media_type not in IMAGE_TYPES:
        raise ImageRefused(
            f"{where}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"
        )
    if not isinstance(text, str) or not text:
        raise ImageRefused(f"{where}.source.base64.data: Field required")
    if len(text) > CLAUDE_MAX_BASE64:
        raise ImageRefused(
            f"{where}.source.base64: image exceeds 5 MB maximum: {len(text)} bytes > {CLAUDE_MAX_BASE64} bytes"
        )
    data = _decoded(text)
    found = sniff(data) if data is not None else None
    if found is None or found.media_type not in IMAGE_TYPES:
        raise ImageRefused(_CLAUDE_UNREADABLE)
    if found.media_type != media_type:
        raise ImageRefused(
            f"{where}.source.base64.data: The image was specified using the {media_type} media type, but the image"
            f" appears to be a {found.media_type} image"
        )
    if max(found.width or 0, found.height or 0) > CLAUDE_MAX_SIDE:
        raise ImageRefused(
            f"{where}.source.base64.data: At least one of the image dimensions exceed max allowed size:"
            f" {CLAUDE_MAX_SIDE} pixels"
        )
    return ImageInput("data:", media_type, found.width, found.height, data)


def _gpt_inline(url: str, param: str) -> ImageInput:
    match = _DATA_URL.match(url)
    assert match is not None
    data = _decoded(match[2])
    found = sniff(data) if data is not None else None
    if data is None or found is None or found.media_type not in IMAGE_TYPES or len(data) > GPT_MAX_BYTES:
        raise ImageRefused(_GPT_UNSUPPORTED, param, code="invalid_image_format")
    return ImageInput("data:", found.media_type, found.width, found.height, data)


def _web(url: object) -> bool:
    return isinstance(url, str) and re.match(r"^https?://[^\s/]+", url) is not None


def claude_images(messages: Any) -> list[ImageInput]:
    """The image blocks of ``messages``, checked as the Messages API checks them."""
    found: list[ImageInput] = []
    for index, message in enumerate(messages if isinstance(messages, list) else []):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for number, block in enumerate(content):
            if not isinstance(block, dict) or block.get("type") != "image":
                continue
            where = f"messages.{index}.content.{number}.image"
            if message.get("role") != "user":
                raise ImageRefused(f"{where}: image blocks are only allowed in user messages")
            source = block.get("source")
            kind = source.get("type") if isinstance(source, dict) else None
            if kind == "base64":
                assert isinstance(source, dict)
                found.append(_claude_inline(source, where))
            elif kind == "url":
                assert isinstance(source, dict)
                if not _web(source.get("url")):
                    raise ImageRefused(f"{where}.source.url.url: not a URL the API can fetch (http or https)")
                found.append(ImageInput(source["url"], ""))
            else:
                raise ImageRefused(
                    f"{where}.source: Input tag {kind!r} found using 'type' does not match any of the expected tags:"
                    " 'base64', 'url', 'file'"
                )
    if len(found) > CLAUDE_MAX_IMAGES:
        raise ImageRefused(f"messages: too many images in the request: {len(found)} > {CLAUDE_MAX_IMAGES}")
    return found


def gpt_images(messages: Any) -> list[ImageInput]:
    """The image parts of ``messages``, checked as Chat Completions checks them."""
    found: list[ImageInput] = []
    for index, message in enumerate(messages if isinstance(messages, list) else []):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for number, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            param = f"messages[{index}].content[{number}].image_url"
            if message.get("role") != "user":
                raise ImageRefused(
                    "Invalid value: 'image_url'. Image parts are only supported in user messages.", param
                )
            spec = part.get("image_url")
            url = spec.get("url") if isinstance(spec, dict) else None
            if not isinstance(url, str) or not (_web(url) or _DATA_URL.match(url)):
                raise ImageRefused(
                    "Invalid image URL: expected an http(s) URL or a base64 data URL of an image.", param
                )
            assert isinstance(spec, dict)
            if spec.get("detail", "auto") not in ("auto", "low", "high"):
                raise ImageRefused(
                    f"Invalid value: '{spec.get('detail')}'. Supported values are: 'auto', 'low', and 'high'.",
                    f"{param}.detail",
                )
            found.append(_gpt_inline(url, param) if url.startswith("data:") else ImageInput(url, ""))
    if len(found) > GPT_MAX_IMAGES:
        raise ImageRefused(f"Too many images in the request: {len(found)} > {GPT_MAX_IMAGES}.", "messages")
    return found


async def fetch_images(api: str, images: list[ImageInput]) -> list[ImageInput]:
    """``images`` with those by address downloaded (their kind and dimensions read from the bytes), or the refusal
    of the whole request that the API answers when one cannot be (see the module's doc)."""
    by_address = [image for image in images if image.data is None]
    if not by_address:
        return images
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        fetched = await asyncio.gather(*(_download(session, api, image) for image in by_address))
    downloaded = iter(fetched)
    return [image if image.data is not None else next(downloaded) for image in images]


async def _download(session: aiohttp.ClientSession, api: str, image: ImageInput) -> ImageInput:
    try:
        async with session.get(image.url) as response:
            data = await response.read() if response.status == 200 else None
    except (aiohttp.ClientError, TimeoutError):
        data = None
    if data is None:
        if api == "anthropic":
            raise ImageRefused("Unable to download the file. Please verify the URL and try again.")
        raise ImageRefused(f"Error while downloading {image.url}.", "messages", code="invalid_image_url")
    found = sniff(data)
    if found is None or found.media_type not in IMAGE_TYPES:
        if api == "anthropic":
            raise ImageRefused(_CLAUDE_UNREADABLE)
        raise ImageRefused(_GPT_UNSUPPORTED, "messages", code="invalid_image_format")
    return replace(image, media_type=found.media_type, width=found.width, height=found.height, data=data)


def image_charge(api: str, images: list[ImageInput]) -> int:
    """The input tokens the images cost, by their dimensions as read from their bytes."""
    return sum(image_tokens(api, image) for image in images)
