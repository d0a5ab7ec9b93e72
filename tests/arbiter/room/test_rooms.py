"""Several rooms by URL, each its own channel; a room's history and settings survive a restart of the arbiter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp.test_utils import TestClient, TestServer

from arbiter.room import add_room
from arbiter.server import open_arbiter
from tests.conftest import make_settings
from tests.support.events import next_event, no_event_within, read_until

if TYPE_CHECKING:
    from tests.arbiter.room.conftest import Room
    from tests.support.clock import FakeClock


async def test_two_rooms_are_two_channels(room: Room) -> None:
    await room.say("in the kitchen", channel="kitchen")
    await room.say("in the garden", channel="garden")
    await room.patch({"paused": True}, channel="garden")

    kitchen, garden = await room.snapshot("kitchen"), await room.snapshot("garden")
    assert [m["text"] for m in kitchen["history"]] == ["in the kitchen"]
    assert [m["text"] for m in garden["history"]] == ["in the garden"]
    assert kitchen["settings"]["paused"] is False
    assert garden["settings"]["paused"] is True
    assert room.opened == ["kitchen", "garden"]
    channels = {c.channel_id for c in (await room.service.channels()).channels}
    assert channels == {"kitchen", "garden"}


async def test_a_rooms_stream_carries_only_that_room(room: Room) -> None:
    async with room.client.ws_connect("/room/api/kitchen/events") as kitchen:
        await next_event(kitchen)
        await room.say("in the garden", channel="garden")
        await room.patch({"capacity": 90}, channel="garden")
        await no_event_within(kitchen, 0.1)
        await room.say("in the kitchen", channel="kitchen")
        (event,) = await read_until(kitchen, lambda e: e["type"] == "message")
    assert event["channel_id"] == "kitchen"
    assert event["message"]["text"] == "in the kitchen"


async def test_history_and_settings_survive_a_restart(sqlite_url: str, clock: FakeClock) -> None:
    opened: list[str] = []

    async def on_open(channel_id: str) -> None:
        opened.append(channel_id)

    async with open_arbiter(make_settings(sqlite_url), clock=clock) as arbiter:
        add_room(arbiter.app, on_open=on_open)
        async with TestClient(TestServer(arbiter.app)) as client:
            for text in ("before the restart", "and one more"):
                response = await client.post("/room/api/lobby/say", json={"name": "Yui", "text": text})
                assert response.status == 200
            response = await client.patch("/room/api/lobby/settings", json={"tiers": {"aizuchi": {"cost": 8}}})
            assert response.status == 200
            before = await (await client.get("/room/api/lobby/snapshot")).json()

    async with open_arbiter(make_settings(sqlite_url), clock=clock) as arbiter:
        add_room(arbiter.app, on_open=on_open)
        async with TestClient(TestServer(arbiter.app)) as client:
            after = await (await client.get("/room/api/lobby/snapshot")).json()

    assert [m["text"] for m in after["history"]] == ["before the restart", "and one more"]
    assert after["history"] == before["history"]
    assert after["settings"]["tiers"]["aizuchi"]["cost"] == 8
    assert after["last_seq"] == 2
    # A new process has no personas in the room yet, although its channel exists: they are asked to join again.
    assert opened == ["lobby", "lobby"]
