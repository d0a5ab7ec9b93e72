"""A person shows the personas a picture on the local Discord: the attachment's reference goes through the arbiter
to the persona's model, on the local Anthropic and OpenAI wire servers, as a valid image block or part (the
servers refuse what the real APIs refuse, and download it as they do), and its cost is counted in the persona's tokens
for the day. An image that has expired, or cannot be downloaded before it would (deleted, forbidden, not an image),
is skipped with one line, and the persona answers the message by its text: the provider never refuses the
request over it."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING

import pytest

from aizuchi.run import run_bots
from arbiter.core.usage import budget_tokens
from bots.llm.base import DecisionRequest, ImageInput, LLMBadRequest, Turn
from bots.llm.profiles import create_provider
from tests.discord.conftest import arbiter_bot, build_world
from tests.discord.test_run import ENDPOINTS, bots_settings, following, running_task, tokens_of
from tests.support.eventually import eventually
from tests.support.fake_discord import running
from tests.support.fleet import live_arbiter
from tests.support.llm_images import image_charge
from tests.support.llm_server import FAKE_KEY, FAKE_KEY_ENV, FakeLLMServer, decision_reply, fake_profile
from tests.support.room import ROOM_PERSONAS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from tests.discord.conftest import World
    from tests.support.fake_discord import FakeDiscord
    from tests.support.fleet import Live

TOKENS = {persona_id: f"{persona_id}-run-token-0123456789abcdef" for persona_id in ROOM_PERSONAS}
MODELS = {"anthropic": "claude-haiku-5-5", "openai": "gpt-5.6-luna"}


@pytest.fixture
def world(fake: FakeDiscord) -> World:
    return build_world(fake, ROOM_PERSONAS)


def shown_images(api: str, body: dict[str, object]) -> list[str]:
    """The image addresses a request's messages carry, read as each API reads them."""
    found: list[str] = []
    for message in body["messages"]:  # type: ignore[attr-defined]
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            if api == "anthropic" and part.get("type") == "image":
                assert part["source"]["type"] == "url"
                found.append(part["source"]["url"])
            if api == "openai" and part.get("type") == "image_url":
                found.append(part["image_url"]["url"])
    return found


def seeing_profile(api: str, llm: FakeLLMServer) -> str:
    """profiles.toml with one profile, ``seeing``: a model that takes images, on the local wire server of ``api``."""
    base_url = llm.anthropic_url if api == "anthropic" else llm.openai_url
    extra = '\nextra_body = { reasoning_effort = "none" }' if api == "openai" else ""
    return (
        f'[profiles.seeing]\nprovider = "{api}"\nmodel = "{MODELS[api]}"\nbase_url = "{base_url}"\n'
        f'api_key_env = "{FAKE_KEY_ENV}"\nmax_retries = 0\nimages = true{extra}\n'
    )


@contextlib.asynccontextmanager
async def seeing_rin(
    api: str, answer: str, world: World, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[tuple[FakeLLMServer, Live, str]]:
    """The arbiter's bot and Rin, her model on ``api``'s wire server taking images and answering ``answer``; once
    she follows the lounge: the server, the arbiter and the lounge's id."""
    caplog.set_level(logging.INFO, logger="bots")
    profiles = tmp_path / "profiles.toml"
    reply = decision_reply("tools", {"action": "remark", "text": answer}, usage=(100, 5))
    async with (
        FakeLLMServer(reply) as llm,
        live_arbiter(extra_tokens=TOKENS) as live,
        running(arbiter_bot(live.arbiter, world), world.arbiter.token),
    ):
        profiles.write_text(seeing_profile(api, llm))
        lounge = str(world.lounge.id)
        await live.channel(lounge)
        bots = bots_settings(tmp_path, arbiter_url=live.url, profiles_file=profiles, profile="seeing")
        env = tokens_of(world, **{FAKE_KEY_ENV: FAKE_KEY})
        async with running_task(run_bots(bots, env, ENDPOINTS, only=["rin"])) as task:
            await following(world, caplog, task, ("rin",))
            yield llm, live, lounge


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_a_photo_reaches_the_personas_model_as_an_image_and_is_counted(
    api: str, *, fake: FakeDiscord, world: World, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with seeing_rin(api, "What a cat!", world, tmp_path, caplog) as (llm, live, lounge):
        # Signed for a day from now (the arbiter's clock is the wall clock; the fake Discord's is its own).
        a_day = time.time() + 86_400 - fake.clock()
        photo = fake.image_attachment("cat.jpg", content_type="image/jpeg", width=1024, height=768, expires_in_s=a_day)
        await fake.human_says(world.lounge, world.member, "Rin, look at my cat!", attachments=[photo])
        await eventually(lambda: llm.requests, what="rin asks her model")
        await eventually(
            lambda: any(m.author is world.personas["rin"] for m in world.lounge.messages), what="rin answers"
        )
        status = await live.status(lounge, "rin")

    assert llm.refusals == []
    [request] = llm.requests
    assert shown_images(api, request.body) == [photo["url"]]
    # The wire server downloaded it from the fake CDN and charged it by the dimensions its bytes give.
    charged = image_charge(api, [ImageInput(photo["url"], "image/jpeg", 1024, 768)])
    assert charged > 0
    # The persona's stable prompt is written to the provider's cache on this first call: counted at its price.
    [(prompt, completion, read, written)] = llm.usages
    assert (prompt - read - written, completion) == (100 + charged, 5)
    assert status.tokens_today == budget_tokens(prompt, completion, cache_read=read, cache_write=written)


async def test_an_expired_image_is_skipped_with_one_line(
    *, fake: FakeDiscord, world: World, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with seeing_rin("anthropic", "Hm?", world, tmp_path, caplog) as (llm, _, _):
        # Signed an hour before the arbiter's now: expired (a message read back from long ago, say).
        an_hour_ago = time.time() - 3600 - fake.clock()
        old = fake.image_attachment("old.png", expires_in_s=an_hour_ago)
        await fake.human_says(world.lounge, world.member, "Rin, remember this one?", attachments=[old])
        await eventually(lambda: llm.requests, what="rin asks her model")

    assert llm.refusals == []
    assert shown_images("anthropic", llm.requests[0].body) == []
    skipped = [line for line in caplog.messages if "skipping an image" in line]
    assert len(skipped) == 1 and skipped[0].startswith("persona=rin: skipping an image of message ")


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("what", ["deleted", "not an image"])
async def test_an_image_that_cannot_be_downloaded_is_skipped_and_the_message_answered(
    api: str, what: str, *, fake: FakeDiscord, world: World, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with seeing_rin(api, "Nice one!", world, tmp_path, caplog) as (llm, live, lounge):
        a_day = time.time() + 86_400 - fake.clock()
        if what == "deleted":
            photo = fake.image_attachment("cat.png", expires_in_s=a_day)
            fake.delete_attachment(photo)  # taken down before anyone looked: its address answers 404
        else:
            # Discord says image/png; the CDN serves a page (a link checker's, a login wall's).
            photo = fake.image_attachment("cat.png", expires_in_s=a_day, data=b"<!doctype html><p>Sign in</p>")
        await fake.human_says(world.lounge, world.member, "Rin, what do you think?", attachments=[photo])
        await eventually(
            lambda: any(m.author is world.personas["rin"] for m in world.lounge.messages), what="rin answers"
        )
        status = await live.status(lounge, "rin")

    assert llm.refusals == []  # the provider was never shown it
    [request] = llm.requests
    assert shown_images(api, request.body) == []
    assert "[attached: cat.png]" in json.dumps(request.body)  # the message is read by its text
    [(prompt, completion, read, written)] = llm.usages
    assert (prompt - read - written, completion) == (100, 5)  # no image charged
    assert status.tokens_today == budget_tokens(prompt, completion, cache_read=read, cache_write=written)
    skipped = [line for line in caplog.messages if "skipping an image" in line]
    expected = "its address answered 404" if what == "deleted" else "not an image"
    assert len(skipped) == 1 and skipped[0].startswith("persona=rin: skipping an image of message ")
    assert expected in skipped[0]


async def test_a_wire_server_refuses_an_unreachable_image_as_the_api_does(*, fake: FakeDiscord) -> None:
    """What the check spares the persona: shown the deleted attachment's address, the API refuses the request."""
    photo = fake.image_attachment("cat.png")
    fake.delete_attachment(photo)
    async with FakeLLMServer(decision_reply("tools", {"action": "remark", "text": "?"})) as llm:
        provider = create_provider(fake_profile(llm, "anthropic", images=True, max_retries=0), {FAKE_KEY_ENV: FAKE_KEY})
        ask = (Turn("user", "Ann: look!", images=(ImageInput(photo["url"], "image/png", 800, 600),)),)
        with pytest.raises(LLMBadRequest, match="Unable to download the file"):
            await provider.decide(DecisionRequest(system="-", turns=ask, actions=("remark",)))
        await provider.aclose()
    assert [refusal.message for refusal in llm.refusals] == [
        "Unable to download the file. Please verify the URL and try again."
    ]
