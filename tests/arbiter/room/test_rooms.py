"""Several rooms by URL, each its own channel; a room's history and settings survive a restart of the arbiter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp.test_utils import TestClient, TestServer
from pydantic import SecretStr

from arbiter.contract import Tier
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


async def test_old_messages_keep_the_colour_of_a_persona_no_longer_taking_part(
    sqlite_url: str, clock: FakeClock
) -> None:
    async with open_arbiter(make_settings(sqlite_url), clock=clock) as arbiter:
        await arbiter.service.ensure_channel("lobby")
        await arbiter.service.register_persona("hana", "はな", color="#f08a24")
        await arbiter.service.register_persona("kai", "Kai")  # no colour in its file: the page picks one
        for persona_id in ("hana", "kai"):
            clock.advance(1)
            await arbiter.service.record_message("lobby", author_id="yui", author_name="Yui", text="hi")
            await arbiter.service.consume("lobby", persona_id, "へえ", tier=Tier.AIZUCHI)

    # The next run has another cast: hana and kai have no token now.
    settings = make_settings(sqlite_url).model_copy(update={"persona_tokens": {"mio": SecretStr("mio-" + "x" * 24)}})
    async with open_arbiter(settings, clock=clock) as arbiter:
        add_room(arbiter.app)
        async with TestClient(TestServer(arbiter.app)) as client:
            snapshot = await (await client.get("/room/api/lobby/snapshot")).json()

    assert [p["id"] for p in snapshot["personas"]] == ["mio"]
    assert snapshot["colors"] == {"hana": "#f08a24"}
    assert [m["author_id"] for m in snapshot["history"] if m["author_kind"] == "persona"] == ["hana", "kai"]
