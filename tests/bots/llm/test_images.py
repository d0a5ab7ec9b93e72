"""What a persona's model is shown of the conversation's images (``bots.images``), what they cost by each
provider's documentation, how each SDK adapter sends them (or not, when the profile says the model takes none), and
the offline stand-in noticing a picture by its kind."""

from __future__ import annotations

import base64
import json
import logging
from typing import TYPE_CHECKING, Any

import pytest

from arbiter.contract import AuthorKind, ImageView, MessageView
from bots.images import ChosenImage, prompt_images
from bots.llm import DecisionRequest, ScriptedProvider, Turn
from bots.llm.base import ImageInput
from bots.llm.images import image_tokens
from bots.llm.scene import Scene, SceneLine
from bots.llm.scripted import GENERIC
from bots.worker.config import RuntimeConfig
from tests.support.llm_server import decision_reply
from tests.support.pictures import PictureHost, gif, png

if TYPE_CHECKING:
    from tests.bots.llm.conftest import MakeProvider
    from tests.support.llm_server import FakeLLMServer

NOW = 1_790_000_000.0


def photo(name: str, *, size: int = 1000, expires_at: float | None = None, kind: str = "image/png") -> ImageView:
    return ImageView(url=f"https://cdn.example/{name}", content_type=kind, size=size, expires_at=expires_at)


def said(seq: int, *images: ImageView, kind: AuthorKind = AuthorKind.HUMAN) -> MessageView:
    return MessageView(
        seq=seq, author_id="u", author_kind=kind, author_name="Ann", text=f"m{seq}", at=NOW, images=list(images)
    )


def names(chosen: tuple[ChosenImage, ...]) -> list[str]:
    return [item.image.url.rsplit("/", 1)[1] for item in chosen]


def test_only_the_latest_messages_images_are_shown_oldest_first() -> None:
    window = [said(1, photo("old.png")), said(2, photo("a.png")), said(3), said(4, photo("b.png"), photo("c.png"))]
    config = RuntimeConfig(image_messages=3)
    assert names(prompt_images(window, NOW, config, persona="rin")) == ["a.png", "b.png", "c.png"]
    assert prompt_images(window, NOW, RuntimeConfig(image_messages=0), persona="rin") == ()


def test_the_count_and_bytes_per_prompt_keep_the_newest() -> None:
    window = [said(1, photo("a.png", size=600)), said(2, photo("b.png", size=600), photo("c.png", size=300))]
    assert names(prompt_images(window, NOW, RuntimeConfig(images_per_prompt=2), persona="rin")) == ["b.png", "c.png"]
    by_bytes = RuntimeConfig(image_bytes_per_prompt=1000)
    assert names(prompt_images(window, NOW, by_bytes, persona="rin")) == ["b.png", "c.png"]


def test_an_expired_image_is_skipped_with_one_line_and_a_bots_image_is_not_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="bots.images")
    window = [
        said(1, photo("gone.png", expires_at=NOW - 60), photo("live.png", expires_at=NOW + 60)),
        said(2, photo("bot.png"), kind=AuthorKind.BOT),
    ]
    assert names(prompt_images(window, NOW, RuntimeConfig(), persona="rin")) == ["live.png"]
    assert caplog.messages == ["persona=rin: skipping an image of message 1: its address expired 60 s ago"]


@pytest.mark.parametrize(
    ("provider", "width", "height", "tokens"),
    [
        # Anthropic's vision guide: width x height / 750, after scaling the long edge to 1568 px.
        ("anthropic", 1000, 1000, 1334),
        ("anthropic", 200, 200, 54),
        ("anthropic", 3136, 1568, 1640),  # scaled to 1568 x 784
        # OpenAI's images guide, detail high: 1024 x 1024 -> 768 x 768, 4 tiles; 2048 x 4096 -> 768 x 1536, 6 tiles.
        ("openai", 1024, 1024, 765),
        ("openai", 2048, 4096, 1105),
        ("openai", 256, 256, 255),
    ],
)
def test_an_images_cost_is_estimated_as_its_provider_documents(
    provider: str, width: int, height: int, tokens: int
) -> None:
    assert image_tokens(provider, ImageInput("https://x/y.png", "image/png", width, height)) == tokens


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("takes_images", [True, False])
async def test_the_adapters_send_images_before_the_text_only_when_the_profile_says(
    api: Any, takes_images: bool, llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.script(decision_reply("tools", {"action": "remark", "text": "Cute!"}))
    provider = make_provider(api, images=takes_images)
    async with PictureHost() as host:
        url = host.put("cat.png", png(800, 600))
        ask = (Turn("user", "Ann: look!", images=(ImageInput(url, "image/png", 800, 600),)),)

        await provider.decide(DecisionRequest(system="You are Rin.", turns=ask, actions=("remark",)))

    [message] = [m for m in llm_server.requests[0].body["messages"] if m["role"] == "user"]
    if not takes_images:
        assert message["content"] == "Ann: look!"
    elif api == "anthropic":
        assert message["content"] == [
            {"type": "image", "source": {"type": "url", "url": url}},
            {"type": "text", "text": "Ann: look!"},
        ]
    else:
        assert message["content"] == [
            {"type": "image_url", "image_url": {"url": url, "detail": "auto"}},
            {"type": "text", "text": "Ann: look!"},
        ]


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_an_image_with_its_bytes_goes_inline(
    api: Any, llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.script(decision_reply("tools", {"action": "remark", "text": "Cute!"}))
    provider = make_provider(api, images=True)
    photo = gif(40, 30)
    local = ImageInput("http://127.0.0.1:8765/room/images/x.gif", "image/gif", 40, 30, data=photo)

    await provider.decide(
        DecisionRequest(system="-", turns=(Turn("user", "Ann: look!", images=(local,)),), actions=("remark",))
    )

    [message] = [m for m in llm_server.requests[0].body["messages"] if m["role"] == "user"]
    encoded = base64.b64encode(photo).decode()
    if api == "anthropic":
        source = {"type": "base64", "media_type": "image/gif", "data": encoded}
        assert message["content"][0] == {"type": "image", "source": source}
    else:
        assert message["content"][0]["image_url"]["url"] == f"data:image/gif;base64,{encoded}"
    assert "room/images" not in json.dumps(llm_server.requests[0].body)


@pytest.mark.parametrize(("kinds", "lines"), [(("image/jpeg",), "photos"), (("image/gif",), "gifs")])
async def test_the_offline_stand_in_notices_a_picture_by_its_kind(kinds: tuple[str, ...], lines: str) -> None:
    scene = Scene(names=("Rin",), lines=(SceneLine("Ann", "person", "look at this", images=kinds),))
    provider = ScriptedProvider(("Mm.",), ("A remark.",), seed=1, language="en")
    request = DecisionRequest(system="-", turns=(Turn("user", "-"),), actions=("remark",), scene=scene)

    result = await provider.decide(request)

    assert result.decision.text in {line.replace("{name}", "Ann") for line in getattr(GENERIC["en"], lines)}
