"""Dropped connections and sessions: discord.py RESUMEs and gets every event exactly once."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import aiohttp
import discord
import pytest

from tests.support.fake_discord import Op, RecordingClient, running

if TYPE_CHECKING:
    from tests.fake_discord.conftest import World
    from tests.support.fake_discord import FakeDiscord

CONTENT = discord.Intents.default() | discord.Intents(message_content=True)


class NoWaitClient(RecordingClient):
    """discord.py waits 5 s before identifying again after a lost session (to respect Discord's identify rate
    limit); a test has no such limit."""

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        return None


@pytest.mark.parametrize("code", [None, 4000], ids=["connection-lost", "closed-4000"])
async def test_a_dropped_bot_resumes_and_gets_each_message_once(
    fake: FakeDiscord, world: World, code: int | None
) -> None:
    hana = fake.add_bot("hana")
    client = RecordingClient(intents=CONTENT)

    async with running(client, hana.token):
        await fake.human_says(world.lounge, world.member, "before")
        await fake.drop(hana, code=code)
        await fake.human_says(world.lounge, world.member, "while away")
        await fake.wait_until(lambda: client.resumed and len(client.messages) >= 2)
        await fake.human_says(world.lounge, world.member, "after")
        await fake.wait_until(lambda: len(client.messages) >= 3)

    assert client.contents() == ["before", "while away", "after"]
    assert len(fake.gateway_ops(hana, Op.IDENTIFY)) == 1
    [resume] = fake.gateway_ops(hana, Op.RESUME)
    assert resume.path == "/resume"  # discord.py resumes on READY's resume_gateway_url
    assert resume.data["session_id"] == fake.sessions[0].id
    assert len(fake.sessions) == 1


async def test_a_reconnect_request_makes_the_bot_resume(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana")
    client = RecordingClient(intents=CONTENT)

    async with running(client, hana.token):
        await fake.request_reconnect(hana)
        await fake.wait_until(lambda: client.resumed)
        await fake.human_says(world.lounge, world.member, "still there?")
        await fake.wait_until(lambda: client.messages)

    assert client.contents() == ["still there?"]
    assert len(fake.gateway_ops(hana, Op.RESUME)) == 1


async def test_an_invalidated_session_makes_the_bot_identify_again(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana")
    client = NoWaitClient(intents=CONTENT)

    async with running(client, hana.token):
        await fake.invalidate(hana)
        await fake.wait_until(lambda: len(fake.gateway_ops(hana, Op.IDENTIFY)) == 2)
        await fake.wait_connected(hana)
        await fake.human_says(world.lounge, world.member, "welcome back")
        await fake.wait_until(lambda: client.messages)

    assert client.contents() == ["welcome back"]
    assert [s.valid for s in fake.sessions] == [False, True]
    assert client.resumed == 0


async def frames(ws: aiohttp.ClientWebSocketResponse, count: int) -> list[dict[str, Any]]:
    return [json.loads(await ws.receive_str(timeout=2.0)) for _ in range(count)]


async def test_the_gateway_refuses_a_bad_token_with_4004(fake: FakeDiscord, world: World) -> None:
    async with aiohttp.ClientSession() as session, session.ws_connect(f"{fake.gateway_url}?v=10&encoding=json") as ws:
        [hello] = await frames(ws, 1)
        await ws.send_json({"op": Op.IDENTIFY, "d": {"token": "nope", "intents": 0, "properties": {}}})
        closing = await ws.receive(timeout=2.0)

    assert hello["op"] == Op.HELLO
    assert closing.type is aiohttp.WSMsgType.CLOSE
    assert closing.data == 4004


async def test_resuming_an_unknown_session_is_refused_and_a_known_one_replays(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana")
    identify = {"token": hana.token, "intents": CONTENT.value, "properties": {}}
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(fake.gateway_url) as ws:
            await frames(ws, 1)
            await ws.send_json({"op": Op.IDENTIFY, "d": identify})
            ready, guild = await frames(ws, 2)
            await ws.close(code=4000)  # a close that means "I'll be back": 1000 would end the session
        await fake.human_says(world.lounge, world.member, "missed")

        async with session.ws_connect(fake.resume_gateway_url) as ws:
            await frames(ws, 1)
            await ws.send_json({"op": Op.RESUME, "d": {"token": hana.token, "session_id": "nope", "seq": 2}})
            [refused] = await frames(ws, 1)

        async with session.ws_connect(fake.resume_gateway_url) as ws:
            await frames(ws, 1)
            resume = {"token": hana.token, "session_id": ready["d"]["session_id"], "seq": guild["s"]}
            await ws.send_json({"op": Op.RESUME, "d": resume})
            replayed, resumed = await frames(ws, 2)

    assert (ready["t"], ready["s"], guild["t"], guild["s"]) == ("READY", 1, "GUILD_CREATE", 2)
    assert (refused["op"], refused["d"]) == (Op.INVALID_SESSION, False)
    assert (replayed["t"], replayed["s"], replayed["d"]["content"]) == ("MESSAGE_CREATE", 3, "missed")
    assert (resumed["t"], resumed["s"]) == ("RESUMED", 4)
