"""The event stream: GET /v1/channels/{id}/events over a WebSocket.

It starts with the channel's level, then carries what happens in the channel as it happens (messages, claims,
level changes, settings changes, retractions, a cleared history), each frame in the shape of one of
arbiter.contract's event models. ``?after=<seq>`` first replays the messages a client missed. On PostgreSQL it
also carries what other arbiters on the same database did.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from tests.conftest import auth
from tests.support.arbiters import crowd, serve
from tests.support.events import next_event, no_event_within, read_until

if TYPE_CHECKING:
    from collections.abc import Callable

    from aiohttp import ClientWebSocketResponse
    from aiohttp.test_utils import TestClient

    from arbiter.server import Arbiter
    from tests.support.clock import FakeClock

    Client = TestClient[Any, Any]
    Socket = ClientWebSocketResponse[Any]

CHANNEL = "lobby"
EVENTS = f"/v1/channels/{CHANNEL}/events"
TIERS = {
    "aizuchi": {"cost": 5, "recovery_s": 4.0},
    "remark": {"cost": 60, "recovery_s": 6.0},
    "long": {"cost": 80, "recovery_s": 8.0},
}


async def call(client: Client, method: str, path: str, who: str = "admin", body: Any = None) -> Any:
    resp = await client.request(method, path, json=body, headers=auth(who))
    assert resp.status in (200, 204), await resp.text()
    return await resp.json() if resp.status == 200 else None


async def say(client: Client, text: str) -> Any:
    body = {"author_id": "alice", "author_name": "Alice", "text": text}
    return await call(client, "POST", f"/v1/channels/{CHANNEL}/messages", body=body)


def of_type(kind: str) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event["type"] == kind


def by_type(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        grouped.setdefault(event["type"], []).append(event)
    return grouped


@pytest.fixture
async def channel(client: Client) -> Client:
    await call(client, "PUT", f"/v1/channels/{CHANNEL}", body={"capacity": 100, "tiers": TIERS})
    return client


async def subscribe(client: Client, query: str = "", who: str = "hana") -> Socket:
    return await client.ws_connect(EVENTS + query, headers=auth(who))


async def test_first_frame_is_the_current_level(channel: Client, clock: FakeClock) -> None:
    await call(channel, "POST", f"/v1/channels/{CHANNEL}/consume", "kai", {"tier": "aizuchi", "text": "へえ"})
    clock.advance(1)
    async with await subscribe(channel) as ws:
        first = await next_event(ws)
    assert first == {
        "type": "level",
        "channel_id": CHANNEL,
        "level": 95,
        "capacity": 100,
        "at": clock.value,
        "next_refund_at": clock.value - 1 + 4.0,
        "refunds": [{"at": clock.value - 1 + 4.0, "amount": 5}],  # the level at any moment until it moves again
    }


async def test_admin_may_subscribe_too(channel: Client) -> None:
    async with await subscribe(channel, who="admin") as ws:
        assert (await next_event(ws))["type"] == "level"


async def test_turns_stream_messages_claims_and_levels(channel: Client, clock: FakeClock) -> None:
    async with await subscribe(channel) as ws:
        await next_event(ws)

        observed = await say(channel, "shall we start?")
        (event,) = await read_until(ws, of_type("message"))
        history = await call(channel, "GET", f"/v1/channels/{CHANNEL}/history")
        assert event["message"] == history["messages"][0]
        assert event["message"]["seq"] == observed["seq"]

        clock.advance(1)
        claim = await call(channel, "POST", f"/v1/channels/{CHANNEL}/claims", "hana", {"tier": "remark"})
        events = by_type(await read_until(ws, of_type("level")))
        assert [e["claim"] for e in events["claim"]] == [claim["claim"]]
        assert events["claim"][0]["claim"]["state"] == "held"
        assert events["level"][0]["level"] == 40 == claim["level"]
        assert "message" not in events

        clock.advance(1)
        claim_id = claim["claim"]["claim_id"]
        spoken = await call(
            channel, "POST", f"/v1/channels/{CHANNEL}/claims/{claim_id}/speak", "hana",
            {"text": "うんうん", "tier": "aizuchi"},
        )  # fmt: skip
        events = by_type(await read_until(ws, of_type("level")))
        assert [e["message"] for e in events["message"]] == [spoken["message"]]
        (settled,) = events["claim"]
        assert (settled["claim"]["claim_id"], settled["claim"]["state"], settled["claim"]["cost"]) == (
            claim_id,
            "spoken",
            5,
        )
        assert events["level"][0]["level"] == 95
        assert events["level"][0]["next_refund_at"] == clock.value + 4.0

        clock.advance(1)
        await say(channel, "and then?")  # a new message to nod to: the latest one, hana's, is a nod
        await read_until(ws, of_type("message"))
        consumed = await call(
            channel, "POST", f"/v1/channels/{CHANNEL}/consume", "kai", {"tier": "aizuchi", "text": "なるほど"}
        )
        events = by_type(await read_until(ws, of_type("level")))
        assert [e["message"] for e in events["message"]] == [consumed["message"]]
        assert events["level"][0]["level"] == 90

        passed = await call(channel, "POST", f"/v1/channels/{CHANNEL}/claims", "mio", {"tier": "long"})
        await read_until(ws, of_type("level"))
        await call(channel, "DELETE", f"/v1/channels/{CHANNEL}/claims/{passed['claim']['claim_id']}", "mio")
        events = by_type(await read_until(ws, of_type("level")))
        assert [e["claim"]["state"] for e in events["claim"]] == ["released"]
        assert events["level"][0]["level"] == 90
        assert "message" not in events


async def test_settings_changes_are_streamed(channel: Client) -> None:
    async with await subscribe(channel) as ws:
        await next_event(ws)
        changed = await call(channel, "PATCH", f"/v1/channels/{CHANNEL}/settings", body={"topic": "ramen"})
        (event,) = await read_until(ws, of_type("settings"))
        assert event["settings"] == changed

        # A new capacity moves the level too.
        changed = await call(channel, "PATCH", f"/v1/channels/{CHANNEL}/settings", body={"capacity": 150})
        events = by_type(await read_until(ws, of_type("level")))
        assert [e["settings"] for e in events["settings"]] == [changed]
        assert (events["level"][0]["level"], events["level"][0]["capacity"]) == (150, 150)

        persona = await call(channel, "PUT", f"/v1/channels/{CHANNEL}/personas/kai", body={"muted": True})
        (event,) = await read_until(ws, of_type("settings"))
        assert event["settings"] == persona
        assert event["settings"]["personas"]["kai"]["muted"] is True


async def test_retraction_and_cleared_history_are_streamed(channel: Client) -> None:
    async with await subscribe(channel) as ws:
        await next_event(ws)
        await say(channel, "hello")
        spoken = await call(
            channel, "POST", f"/v1/channels/{CHANNEL}/consume", "kai", {"tier": "remark", "text": "this will fail"}
        )
        await read_until(ws, lambda e: e["type"] == "level" and e["level"] == 40)
        seq = spoken["message"]["seq"]
        await call(channel, "POST", f"/v1/channels/{CHANNEL}/messages/{seq}/retract", "kai")
        events = by_type(await read_until(ws, of_type("level")))
        assert events["retracted"] == [{"type": "retracted", "channel_id": CHANNEL, "seq": seq}]
        assert events["level"][0]["level"] == 100

        await call(channel, "DELETE", f"/v1/channels/{CHANNEL}/history")
        (event,) = await read_until(ws, of_type("cleared"))
        assert event == {"type": "cleared", "channel_id": CHANNEL, "last_seq": seq}


async def test_events_of_other_channels_are_not_streamed(channel: Client) -> None:
    await call(channel, "PUT", "/v1/channels/elsewhere", body={})
    async with await subscribe(channel) as ws:
        await next_event(ws)
        await call(channel, "POST", "/v1/channels/elsewhere/consume", "kai", {"tier": "aizuchi", "text": "hm"})
        await no_event_within(ws, 0.2)
        await say(channel, "here")
        (event,) = await read_until(ws, of_type("message"))
        assert event["channel_id"] == CHANNEL


# --- replay ----------------------------------------------------------------------------------------------


async def test_after_replays_missed_messages_then_goes_live(channel: Client) -> None:
    for n in range(1, 6):
        await say(channel, f"message {n}")
    async with await subscribe(channel, "?after=2") as ws:
        replayed = [await next_event(ws) for _ in range(3)]
        assert [(e["type"], e["message"]["seq"]) for e in replayed] == [("message", 3), ("message", 4), ("message", 5)]
        assert (await next_event(ws))["type"] == "level"
        await say(channel, "message 6")
        (live,) = await read_until(ws, of_type("message"))
        assert live["message"]["seq"] == 6


async def test_after_the_last_seq_replays_nothing(channel: Client) -> None:
    await say(channel, "one")
    async with await subscribe(channel, "?after=1") as ws:
        assert (await next_event(ws))["type"] == "level"
        await no_event_within(ws, 0.1)


async def test_after_has_no_gap_or_duplicate_while_messages_keep_coming(channel: Client, arbiter: Arbiter) -> None:
    service = arbiter.service

    async def chatter(author: str, count: int) -> None:
        for n in range(count):
            await service.record_message(CHANNEL, author_id=author, author_name=author, text=f"{author} {n}")

    # A backlog of several history pages, and writers that keep adding to it while the stream replays the
    # backlog and goes live: the replay and the live part meet in the middle of the new messages, and must meet
    # exactly.
    backlog = 700
    await asyncio.gather(*(chatter(f"early{w}", backlog // 7) for w in range(7)))
    writers, each = 4, 60
    chatters = [asyncio.create_task(chatter(f"late{w}", each)) for w in range(writers)]
    total = backlog + writers * each
    async with await subscribe(channel, "?after=10") as ws:
        events = await read_until(ws, lambda e: e["type"] == "message" and e["message"]["seq"] == total)
        await asyncio.gather(*chatters)
        await no_event_within(ws, 0.2)
    seqs = [e["message"]["seq"] for e in events if e["type"] == "message"]
    assert seqs == list(range(11, total + 1))


# --- refused subscriptions ---------------------------------------------------------------------------------


async def test_unknown_channel_is_404_before_the_upgrade(channel: Client) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await channel.ws_connect("/v1/channels/nowhere/events", headers=auth("hana"))
    assert refused.value.status == 404
    resp = await channel.get("/v1/channels/nowhere/events", headers=auth("hana"))
    assert resp.status == 404
    assert (await resp.json())["error"]["code"] == "unknown_channel"


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer not-a-known-token-at-all"}, {"Authorization": "Basic aGFuYQ=="}]
)
async def test_subscribing_needs_a_known_token(channel: Client, headers: dict[str, str]) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await channel.ws_connect(EVENTS, headers=headers)
    assert refused.value.status == 401


async def test_bad_after_is_refused_before_the_upgrade(channel: Client) -> None:
    resp = await channel.get(EVENTS + "?after=-1", headers=auth("hana"))
    assert resp.status == 422
    assert (await resp.json())["error"]["field"] == "after"


# --- refunds in real time ----------------------------------------------------------------------------------


async def test_level_event_arrives_when_a_refund_comes_due() -> None:
    tiers = {**TIERS, "aizuchi": {"cost": 5, "recovery_s": 0.2}}
    async with serve(None, clock=time.time) as served:
        await served.api.create_channel(CHANNEL, capacity=100, tiers=tiers)
        async with await served.client.ws_connect(EVENTS, headers=auth("hana")) as ws:
            assert (await next_event(ws))["level"] == 100
            await served.api.consume(CHANNEL, "kai", "aizuchi", "ほう")
            spent = (await read_until(ws, of_type("level")))[-1]
            assert spent["level"] == 95
            due = spent["next_refund_at"]
            assert due == pytest.approx(spent["at"] + 0.2)
            refunded = await next_event(ws, within=5)
    assert refunded["type"] == "level"
    assert (refunded["level"], refunded["next_refund_at"]) == (100, None)
    assert refunded["at"] >= due


async def test_refund_pending_when_subscribing_still_brings_a_level_event() -> None:
    # The spend happens before anyone listens, so the stream's first frame is the only hint of the refund.
    tiers = {**TIERS, "aizuchi": {"cost": 5, "recovery_s": 0.3}}
    async with serve(None, clock=time.time) as served:
        await served.api.create_channel(CHANNEL, capacity=100, tiers=tiers)
        await served.api.consume(CHANNEL, "kai", "aizuchi", "ほう")
        async with await served.client.ws_connect(EVENTS, headers=auth("hana")) as ws:
            first = await next_event(ws)
            assert first["level"] == 95
            refunded = await next_event(ws, within=5)
    assert (refunded["type"], refunded["level"], refunded["next_refund_at"]) == ("level", 100, None)
    assert refunded["at"] >= first["next_refund_at"]


# --- several arbiters on one PostgreSQL database -----------------------------------------------------------


@pytest.mark.postgres
async def test_streams_carry_what_other_arbiters_did(postgres_url: str, clock: FakeClock) -> None:
    async with serve(postgres_url, clock=clock) as a, serve(postgres_url, clock=clock) as b:
        await a.api.create_channel(CHANNEL, capacity=100, tiers=TIERS)
        async with (
            await a.client.ws_connect(EVENTS, headers=auth("hana")) as on_a,
            await b.client.ws_connect(EVENTS, headers=auth("kai")) as on_b,
        ):
            await next_event(on_a)
            await next_event(on_b)

            first = await a.api.consume(CHANNEL, "hana", "remark", "written through A")
            from_a = by_type(await read_until(on_b, of_type("level")))
            assert [e["message"] for e in from_a["message"]] == [first["message"]]
            assert from_a["level"][0]["level"] == 40

            second = await b.api.consume(CHANNEL, "kai", "aizuchi", "and through B")
            topic = await b.api.call("PATCH", f"/v1/channels/{CHANNEL}/settings", body={"topic": "relayed"})
            # A's own subscriber hears its own write once (not again through NOTIFY), then B's, in commit order.
            seen_on_a = await read_until(on_a, of_type("settings"))
            seen_on_b = await read_until(on_b, of_type("settings"))
            assert [e["message"]["seq"] for e in seen_on_a if e["type"] == "message"] == [1, 2]
            assert [e["message"]["seq"] for e in seen_on_b if e["type"] == "message"] == [2]
            assert [e["message"] for e in seen_on_a if e["type"] == "message"][1] == second["message"]
            assert seen_on_a[-1]["settings"] == topic == seen_on_b[-1]["settings"]
            await no_event_within(on_a, 0.2)
            await no_event_within(on_b, 0.2)


@pytest.mark.postgres
async def test_large_events_reach_other_arbiters_whole(postgres_url: str, clock: FakeClock) -> None:
    # A notification carries under 8000 bytes; the longest message and the settings of a large fleet are more.
    fleet = crowd(60, prefix="a-persona-with-a-rather-long-id-to-make-the-settings-large-")
    async with (
        serve(postgres_url, clock=clock, extra_personas=fleet) as a,
        serve(postgres_url, clock=clock, extra_personas=fleet) as b,
    ):
        created = await a.api.create_channel(CHANNEL)
        assert len(json.dumps(created)) > 8_000
        async with await b.client.ws_connect(EVENTS, headers=auth("kai")) as on_b:
            await next_event(on_b)
            long_text = "長い話" * 1_333
            await a.api.say(CHANNEL, "alice", long_text)
            # Earlier events (the channel's creation, relayed from A) may arrive first; the message ends the read.
            message = (await read_until(on_b, of_type("message")))[-1]
            assert message["message"]["text"] == long_text
            changed = await a.api.call("PATCH", f"/v1/channels/{CHANNEL}/settings", body={"topic": "a big fleet"})
            settings = (await read_until(on_b, of_type("settings")))[-1]
            assert settings["settings"] == changed
