"""A picture given to the local room reaches a persona's real model as an inline image: ``run_room`` (what
``aizuchi run`` starts without a Discord token) with Rin on the local Anthropic or OpenAI wire server, through the
official SDK clients. The room's address is on this machine, which no provider can fetch, so the image must arrive
as base64 (an Anthropic ``base64`` source, an OpenAI data URL) that the servers check as the APIs do, and its cost
is in the channel's tokens for the day."""

from __future__ import annotations

import base64
import io
import re
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from aizuchi.run import run_room
from arbiter.core.usage import budget_tokens
from arbiter.settings import ArbiterSettings
from bots.llm.base import ImageInput
from tests.discord.test_images import seeing_profile
from tests.discord.test_run import bots_settings, running_task
from tests.support.eventually import eventually
from tests.support.llm_images import image_charge
from tests.support.llm_server import FAKE_KEY, FAKE_KEY_ENV, FakeLLMServer, decision_reply
from tests.support.pictures import png

if TYPE_CHECKING:
    from pathlib import Path


def inline_images(api: str, body: dict[str, Any]) -> list[tuple[str, bytes]]:
    """The inline images of a request, as (media type, bytes); an image by address fails the test."""
    found: list[tuple[str, bytes]] = []
    for message in body["messages"]:
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            if api == "anthropic" and part.get("type") == "image":
                source = part["source"]
                assert source["type"] == "base64", source
                found.append((source["media_type"], base64.b64decode(source["data"])))
            if api == "openai" and part.get("type") == "image_url":
                match = re.fullmatch(r"data:(image/\w+);base64,(.+)", part["image_url"]["url"])
                assert match is not None, part["image_url"]["url"][:80]
                found.append((match[1], base64.b64decode(match[2])))
    return found


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_a_room_picture_reaches_the_model_inline_and_is_counted(
    api: str, tmp_path: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    picture = png(640, 480)
    reply = decision_reply("tools", {"action": "remark", "text": "What an orange!"}, usage=(100, 5))
    profiles = tmp_path / "profiles.toml"
    async with FakeLLMServer(reply) as llm:
        profiles.write_text(seeing_profile(api, llm))
        settings = ArbiterSettings(_env_file=None, database_url=sqlite_url, port=0, persona_tokens={})
        bots = bots_settings(
            tmp_path, personas=["rin"], profiles_file=profiles, profile="seeing", AIZUCHI_PERSONA_TOKENS={}
        )
        async with running_task(run_room(settings, bots, {FAKE_KEY_ENV: FAKE_KEY})), aiohttp.ClientSession() as web:

            async def room_url() -> str | None:
                found = re.search(r"open (http://127\.0\.0\.1:\d+)/room/lobby", capsys.readouterr().out)
                return found[1] if found else None

            base = await eventually(room_url, what="the room's address")
            form = aiohttp.FormData()
            form.add_field("name", "Yui")
            form.add_field("text", "Rin, look at this!")
            form.add_field("image", io.BytesIO(picture), filename="orange.png", content_type="image/png")
            async with web.post(f"{base}/room/api/lobby/say", data=form) as said:
                assert said.status == 200, await said.text()
            await eventually(lambda: llm.requests, what="rin asks her model")

            async def answered() -> list[dict[str, Any]]:
                async with web.get(f"{base}/room/api/lobby/snapshot") as got:
                    snapshot = await got.json()
                spoke = [m for m in snapshot["history"] if m["author_kind"] == "persona"]
                return [snapshot] if spoke else []

            [snapshot] = await eventually(answered, what="rin answers in the room", every=0.05)

    assert llm.refusals == []
    [request] = llm.requests
    assert inline_images(api, request.body) == [("image/png", picture)]
    assert "/room/images/" not in str(request.body)  # never the room's address: no provider could fetch it
    [said] = [m for m in snapshot["history"] if m["author_kind"] == "human"]
    assert said["images"][0]["local"] is True
    # Charged as the server read the bytes (640 x 480), and in the day's tokens as the provider reported it.
    charged = image_charge(api, [ImageInput("data:", "image/png", 640, 480)])
    assert charged > 0
    # The persona's stable prompt is written to the provider's cache on this first call: counted at its price.
    [(prompt, completion, read, written)] = llm.usages
    assert (prompt - read - written, completion) == (100 + charged, 5)
    assert snapshot["status"]["tokens_today"] == budget_tokens(prompt, completion, cache_read=read, cache_write=written)
