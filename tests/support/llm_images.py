"""The image rules of the local LLM wire servers (``tests.support.llm_server``): what the real APIs take as image
input and refuse, and what they charge for it.

Anthropic Messages (platform.claude.com/docs/en/build-with-claude/vision; the SDK's ``ImageBlockParam``): an
``image`` block in a user message, its ``source`` one of ``base64`` (``media_type`` one of image/jpeg, image/png,
image/gif, image/webp, and ``data``) or ``url`` (an address the API fetches: http or https here); at most 600
images a request. OpenAI Chat Completions (platform.openai.com/docs/guides/images-vision; the SDK's
``ChatCompletionContentPartImageParam``): an ``image_url`` part in a user message, its ``image_url.url`` an http(s)
address or a ``data:image/...;base64,`` URL of PNG, JPEG, WebP or GIF, its ``detail`` one of auto, low, high; at
most 500 images a request. Neither takes an image in an assistant message.

Charged: the servers cannot see an image behind its address, so each is counted as the most one costs after the
provider scales it (``bots.images.image_tokens`` without dimensions), added to the scripted input tokens."""

from __future__ import annotations

import re
from typing import Any

from bots.llm.base import ImageInput
from bots.llm.images import image_tokens

__all__ = ("ImageRefused", "claude_images", "gpt_images", "image_charge")

IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
CLAUDE_MAX_IMAGES = 600
GPT_MAX_IMAGES = 500
_DATA_URL = re.compile(r"^data:(image/(?:png|jpeg|webp|gif));base64,[A-Za-z0-9+/=]+$")


class ImageRefused(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


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
                if source.get("media_type") not in IMAGE_TYPES:
                    raise ImageRefused(
                        f"{where}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif'"
                        " or 'image/webp'"
                    )
                if not isinstance(source.get("data"), str) or not source["data"]:
                    raise ImageRefused(f"{where}.source.base64.data: Field required")
                found.append(ImageInput("data:", source["media_type"]))
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
            found.append(ImageInput(url, ""))
    if len(found) > GPT_MAX_IMAGES:
        raise ImageRefused(f"Too many images in the request: {len(found)} > {GPT_MAX_IMAGES}.", "messages")
    return found


def image_charge(api: str, images: list[ImageInput]) -> int:
    """The input tokens the images cost (each as much as one can: see the module's doc)."""
    return sum(image_tokens(api, image) for image in images)
