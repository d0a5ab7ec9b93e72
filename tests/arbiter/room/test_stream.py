"""The room's event stream: /v1's stream without a token, for the page. It starts with the pool's level, carries
what happens in the room as it happens, and with ?after=<seq> first replays what a reconnecting page missed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from arbiter.contract import Tier
from tests.conftest import auth
from tests.support.events import next_event, no_event_within, read_until

if TYPE_CHECKING:
    from collections.abc import Callable

    from aiohttp import ClientWebSocketResponse

    from tests.arbiter.room.conftest import Room
    from tests.support.clock import FakeClock

    Socket = ClientWebSocketResponse[Any]

EVENTS = "/room/api/lobby/events"


def of_type(kind: str) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event["type"] == kind


async def test_the_stream_starts_with_the_level(room: Room) -> None:
    async with room.client.ws_connect(EVENTS) as ws:
        first = await next_event(ws)
    assert first["type"] == "level"
    assert (first["level"], first["capacity"]) == (100, 100)


async def test_the_stream_of_a_new_room_opens_it(room: Room) -> None:
    async with room.client.ws_connect("/room/api/garden/events") as ws:
        await next_event(ws)
    assert room.opened == ["garden"]


async def test_what_is_said_in_the_room_arrives_as_it_happens(room: Room, clock: FakeClock) -> None:
    async with room.client.ws_connect(EVENTS) as ws:
        await next_event(ws)
        await room.say("shall we start?")
        (said,) = await read_until(ws, of_type("message"))
        assert said["message"]["text"] == "shall we start?"
        assert said["message"]["author_kind"] == "human"

        clock.advance(1)
        await room.service.consume("lobby", "kai", "うん", tier=Tier.AIZUCHI)
        events = await read_until(ws, of_type("level"))
        kinds = [event["type"] for event in events]
        assert kinds == ["message", "claim", "level"]
        assert events[0]["message"]["tier"] == "aizuchi"
        assert events[1]["claim"]["state"] == "spoken"
        assert events[2]["level"] == 95


async def test_claims_show_who_is_thinking_and_who_passed(room: Room) -> None:
    async with room.client.ws_connect(EVENTS) as ws:
        await next_event(ws)
        claim = await room.service.claim("lobby", "mio", Tier.REMARK)
        assert claim.granted and claim.claim is not None
        held, level = await read_until(ws, of_type("level"))
        assert (held["claim"]["persona"], held["claim"]["state"]) == ("mio", "held")
        assert level["level"] == 40
        await room.service.release("lobby", "mio", claim.claim.claim_id)
        released, level = await read_until(ws, of_type("level"))
        assert (released["claim"]["persona"], released["claim"]["state"]) == ("mio", "released")
        assert level["level"] == 100


async def test_settings_changes_arrive_with_the_new_level(room: Room) -> None:
    async with room.client.ws_connect(EVENTS) as ws:
        await next_event(ws)
        await room.patch({"capacity": 150, "paused": True})
        settings, level = await read_until(ws, of_type("level"))
        assert settings["type"] == "settings"
        assert settings["settings"]["capacity"] == 150
        assert settings["settings"]["paused"] is True
        assert (level["level"], level["capacity"]) == (150, 150)


async def test_edits_deletions_retractions_and_a_cleared_history_arrive(room: Room) -> None:
    await room.snapshot()
    for platform_id in ("d1", "d2"):
        await room.service.record_message(
            "lobby",
            author_id="ken",
            author_name="Ken",
            text=f"posted as {platform_id}",
            platform_message_id=platform_id,
        )
    async with room.client.ws_connect(EVENTS) as ws:
        await next_event(ws)
        await room.service.edit_message("lobby", "d1", "edited on the platform")
        (edited,) = await read_until(ws, of_type("edited"))
        assert (edited["message"]["seq"], edited["message"]["text"]) == (1, "edited on the platform")

        await room.service.delete_message("lobby", "d2")
        (deleted,) = await read_until(ws, of_type("deleted"))
        assert deleted["seq"] == 2

        spoken = await room.service.consume("lobby", "kai", "うん", tier=Tier.AIZUCHI)
        assert spoken.message is not None
        await read_until(ws, of_type("level"))
        await room.service.retract("lobby", "kai", spoken.message.seq)
        events = await read_until(ws, of_type("retracted"))
        assert events[-1]["seq"] == spoken.message.seq

        await room.service.clear_history("lobby")
        cleared = (await read_until(ws, of_type("cleared")))[-1]
        assert cleared["last_seq"] == spoken.message.seq


async def test_after_replays_what_was_missed_then_goes_live_without_a_gap_or_a_duplicate(room: Room) -> None:
    for text in ("one", "two", "three"):
        await room.say(text)
    async with room.client.ws_connect(f"{EVENTS}?after=1") as ws:
        replayed = await read_until(ws, of_type("level"))
        assert [e["message"]["text"] for e in replayed if e["type"] == "message"] == ["two", "three"]
        await room.say("four")
        (live,) = await read_until(ws, of_type("message"))
        assert (live["message"]["seq"], live["message"]["text"]) == (4, "four")
        await no_event_within(ws, 0.1)


async def test_a_page_that_reconnects_with_its_last_seq_misses_nothing(room: Room) -> None:
    async with room.client.ws_connect(EVENTS) as ws:
        await next_event(ws)
        await room.say("before the drop")
        (seen,) = await read_until(ws, of_type("message"))
    last_seq = seen["message"]["seq"]
    await room.say("while away")
    async with room.client.ws_connect(f"{EVENTS}?after={last_seq}") as ws:
        events = await read_until(ws, of_type("level"))
    assert [e["message"]["text"] for e in events if e["type"] == "message"] == ["while away"]


async def test_the_room_hears_what_the_v1_stream_hears(room: Room, clock: FakeClock) -> None:
    await room.snapshot()
    async with (
        room.client.ws_connect(EVENTS) as page,
        room.client.ws_connect("/v1/channels/lobby/events", headers=auth("hana")) as persona,
    ):
        await next_event(page)
        await next_event(persona)
        await room.say("hello, kai")
        clock.advance(1)
        claim = await room.service.claim("lobby", "kai", Tier.REMARK)
        assert claim.claim is not None
        await room.service.speak("lobby", "kai", claim.claim.claim_id, "hi there", tier=Tier.REMARK)
        await room.patch({"idle_cap": 3})

        def last(event: dict[str, Any]) -> bool:
            return event["type"] == "settings"

        assert await read_until(page, last) == await read_until(persona, last)


@pytest.mark.parametrize("query", ["?after=-1", "?after=many"])
async def test_a_bad_after_is_refused_before_the_upgrade(room: Room, query: str) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await room.client.ws_connect(EVENTS + query)
    assert refused.value.status == 422


async def test_another_sites_page_cannot_listen_in(room: Room) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await room.client.ws_connect(EVENTS, headers={"Origin": "http://evil.example"})
    assert refused.value.status == 403
