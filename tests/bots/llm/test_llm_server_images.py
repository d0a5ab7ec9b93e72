"""The local wire servers read images as the real APIs do (``tests.support.llm_images``): an inline image's bytes
must be an image of the kind it says (Anthropic) and within the size and dimensions, and an image by address is
downloaded, the whole request refused when it cannot be, as both APIs refuse it; what is shown is charged by the
dimensions its bytes give."""

from __future__ import annotations

import base64
import io
import json
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from bots.llm.base import ImageInput
from bots.llm.images import image_tokens
from tests.bots.llm.test_llm_server import CLAUDE_OK, GPT_OK, claude_image, edited, gpt_image
from tests.support.llm_server import FakeLLMServer, text_reply
from tests.support.pictures import PictureHost, gif, jpeg_header, png, refused_url

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@pytest.fixture
async def server() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as running:
        yield running


@pytest.fixture
async def host() -> AsyncIterator[PictureHost]:
    async with PictureHost() as running:
        yield running


async def post(server: FakeLLMServer, api: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    """``body`` posted as the SDKs post it (a large one streamed, as aiohttp asks)."""
    url = f"{server.anthropic_url}/v1/messages" if api == "anthropic" else f"{server.openai_url}/chat/completions"
    data = io.BytesIO(json.dumps(body).encode())
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session, session.post(url, data=data, headers=headers) as response:
        return response.status, dict(response.headers), await response.json()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def by_address(api: str, url: str) -> dict[str, Any]:
    if api == "anthropic":
        return edited(CLAUDE_OK, messages=claude_image({"type": "url", "url": url}))
    return edited(GPT_OK, messages=gpt_image({"url": url, "detail": "auto"}))


def inline(api: str, data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    if api == "anthropic":
        return edited(CLAUDE_OK, messages=claude_image({"type": "base64", "media_type": media_type, "data": b64(data)}))
    return edited(GPT_OK, messages=gpt_image({"url": f"data:{media_type};base64,{b64(data)}"}))


def input_tokens(api: str, answer: dict[str, Any]) -> int:
    return int(answer["usage"]["input_tokens" if api == "anthropic" else "prompt_tokens"])


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_an_image_by_address_is_downloaded_and_charged_by_its_size(
    api: str, server: FakeLLMServer, host: PictureHost
) -> None:
    url = host.put("cat.png", png(1000, 1000))
    server.script(text_reply("Sure.", usage=(10, 2)), text_reply("Sure.", usage=(10, 2)))

    status, _, answer = await post(server, api, by_address(api, url))
    status_inline, _, answer_inline = await post(server, api, inline(api, png(1000, 1000)))

    assert (status, status_inline) == (200, 200), (answer, answer_inline)
    assert host.fetched == ["/cat.png"]
    charged = image_tokens(api, ImageInput(url, "image/png", 1000, 1000))
    # What each answer said was spent, less what the prompt cache read and wrote (its own prices).
    uncached = [prompt - read - written for prompt, _, read, written in server.usages]
    assert uncached == [10 + charged, 10 + charged]


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("what", ["deleted", "forbidden", "refused", "not an image"])
async def test_an_address_that_cannot_be_downloaded_fails_the_whole_request(
    api: str, what: str, server: FakeLLMServer, host: PictureHost
) -> None:
    if what == "deleted":
        url = host.url("gone.png")
    elif what == "forbidden":
        url = host.put("private.png", png())
        host.status["/private.png"] = 403
    elif what == "refused":
        url = refused_url()
    else:
        url = host.put("page.png", b"<!doctype html><p>Sign in to see this picture</p>", "text/html")
    server.script(text_reply("Sure."))

    status, _, answer = await post(server, api, by_address(api, url))

    assert status == 400, answer
    assert server.remaining == 1  # no answer was spent on it
    message = answer["error"]["message"]
    if api == "anthropic":
        expected = "Could not process image" if what == "not an image" else "Unable to download the file"
        assert answer["error"]["type"] == "invalid_request_error" and expected in message
    elif what == "not an image":
        assert answer["error"]["code"] == "invalid_image_format"
    else:
        assert answer["error"]["code"] == "invalid_image_url" and message == f"Error while downloading {url}."


CLAUDE_INLINE_REFUSED = [
    pytest.param(b"hello, world", "image/png", "Could not process image", id="not an image"),
    pytest.param(b"BM" + bytes(64), "image/png", "Could not process image", id="a kind the API does not take"),
    pytest.param(
        jpeg_header(),
        "image/png",
        "specified using the image/png media type, but the image appears to be a image/jpeg",
        id="bytes of another kind than its media type",
    ),
    pytest.param(png(8001, 1), "image/png", "exceed max allowed size: 8000 pixels", id="a side over 8000 px"),
    pytest.param(png() + bytes(4 * 1024 * 1024), "image/png", "image exceeds 5 MB maximum", id="base64 over 5 MB"),
]


@pytest.mark.parametrize(("data", "media_type", "says"), CLAUDE_INLINE_REFUSED)
async def test_anthropic_refuses_an_inline_image_as_the_api_does(
    data: bytes, media_type: str, says: str, server: FakeLLMServer
) -> None:
    server.script(text_reply("Sure."))
    status, _, answer = await post(server, "anthropic", inline("anthropic", data, media_type))
    assert status == 400 and says in answer["error"]["message"], answer


async def test_openai_reads_an_inline_images_kind_from_its_bytes(server: FakeLLMServer) -> None:
    server.script(text_reply("Sure."))
    status, _, answer = await post(server, "openai", inline("openai", gif(), "image/png"))
    assert status == 200, answer
    for data in (b"hello, world", png() + bytes(20 * 1024 * 1024)):
        status, _, answer = await post(server, "openai", inline("openai", data))
        assert status == 400 and answer["error"]["code"] == "invalid_image_format", answer
    server.refusals.clear()
