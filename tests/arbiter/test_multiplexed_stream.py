"""The multiplexed event stream (GET /v1/events) never skips a message of any channel it follows: a client that
reconnects and subscribes each channel again after the last seq it saw there gets every message after it exactly
once and in order, per channel, while messages keep being written to several channels at once; a channel that
falls behind ends alone and resumes where it is told; a persona's status comes when it asks, as the channel is then,
for any of the personas the stream acts for.

On SQLite, and on PostgreSQL with two arbiters on one database (readers and writers use either), as the
per-channel stream's own test (test_stream_joins) does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import WSMsgType
from aiohttp._websocket.writer import WebSocketWriter
from aiohttp.base_protocol import BaseProtocol
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arbiter.api.multiplex import text_frame_header
from arbiter.contract import MessageEvent, Tier
from tests.conftest import ADMIN_TOKEN, auth
from tests.support.arbiters import serve
from tests.support.events import frames_until, next_frame
from tests.support.eventually import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from aiohttp import ClientWebSocketResponse
    from aiohttp.test_utils import TestClient

    from arbiter.server import Arbiter
    from tests.support.arbiters import Served
    from tests.support.clock import FakeClock

    Socket = ClientWebSocketResponse[Any]

PATH = "/v1/events"


@pytest.fixture
async def arbiters(database_url: str, clock: FakeClock) -> AsyncIterator[list[Served]]:
    """One arbiter on SQLite (one process owns the file); two on one PostgreSQL database."""
    count = 1 if database_url.startswith("sqlite") else 2
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(serve(database_url, clock=clock)) for _ in range(count)]


async def subscribe(ws: Socket, **after: int | None) -> None:
    await ws.send_str(json.dumps({"subscribe": [{"channel": c, "after": a} for c, a in after.items()]}))


def seqs(frames: list[dict[str, Any]], channel: str) -> list[int]:
    return [f["message"]["seq"] for f in frames if f["type"] == "message" and f["channel_id"] == channel]


# --- readers that reconnect anywhere, following several channels --------------------------------------------


@dataclass(frozen=True)
class Writer:
    channel: int  # which of the example's channels (modulo how many)
    bursts: tuple[int, ...]
    via: int


@dataclass(frozen=True)
class Reader:
    joins_after: int  # messages written (in all) before it first connects
    takes: tuple[int, ...]  # messages (of any channel) it reads on each connection before dropping it; 0: at once
    away_ms: int
    via: int


@dataclass(frozen=True)
class Plan:
    channels: int
    writers: tuple[Writer, ...]
    readers: tuple[Reader, ...]

    def totals(self) -> list[int]:
        totals = [0] * self.channels
        for writer in self.writers:
            totals[writer.channel % self.channels] += sum(writer.bursts)
        return totals


_bursts = st.lists(st.integers(1, 16), min_size=1, max_size=3).map(tuple)
_takes = st.tuples(st.lists(st.integers(0, 8), max_size=3), st.integers(1, 8)).map(lambda p: (*p[0], p[1]))
PLANS = st.builds(
    Plan,
    channels=st.integers(1, 3),
    writers=st.lists(
        st.builds(Writer, channel=st.integers(0, 2), bursts=_bursts, via=st.integers(0, 1)), min_size=1, max_size=4
    ).map(tuple),
    readers=st.lists(
        st.builds(
            Reader, joins_after=st.integers(0, 20), takes=_takes, away_ms=st.integers(0, 3), via=st.integers(0, 1)
        ),
        min_size=1,
        max_size=3,
    ).map(tuple),
)
_examples = itertools.count(1)


async def play(arbiters: list[Served], names: list[str], plan: Plan) -> list[dict[str, list[int]]]:
    """Run the plan's writers and readers at once; per reader, the seqs it saw of each channel, in order."""
    totals = dict(zip(names, plan.totals(), strict=True))
    everything = sum(totals.values())
    written = 0
    progress = asyncio.Condition()

    async def write(number: int, writer: Writer) -> None:
        nonlocal written
        service = arbiters[writer.via % len(arbiters)].arbiter.service
        channel = names[writer.channel % len(names)]
        for burst, size in enumerate(writer.bursts):
            await asyncio.gather(
                *(
                    service.record_message(
                        channel, author_id=f"w{number}", author_name=f"W{number}", text=f"{burst}.{index}"
                    )
                    for index in range(size)
                )
            )
            async with progress:
                written += size
                progress.notify_all()

    def done(seen: dict[str, list[int]]) -> bool:
        return all(seen[c][-1:] == [totals[c]] or totals[c] == 0 for c in names)

    async def read(reader: Reader) -> dict[str, list[int]]:
        async with progress:
            await progress.wait_for(lambda: written >= min(reader.joins_after, everything))
        client = arbiters[reader.via % len(arbiters)].client
        seen: dict[str, list[int]] = {c: [] for c in names}
        for connection in itertools.count():
            if done(seen) or connection > len(reader.takes) * (everything + 1):
                return seen
            take = reader.takes[connection % len(reader.takes)]
            if connection:
                await asyncio.sleep(reader.away_ms / 1000)
            async with client.ws_connect(PATH, headers=auth("hana")) as ws:
                await subscribe(ws, **{c: (seen[c][-1] if seen[c] else 0) for c in names})
                while take > 0 and not done(seen):
                    try:
                        frame = await next_frame(ws)
                    except TimeoutError:
                        return seen  # a message that never came: the check below names it
                    if frame["type"] == "message":
                        seen[frame["channel_id"]].append(frame["message"]["seq"])
                        take -= 1
        raise AssertionError("unreachable")

    async with asyncio.TaskGroup() as group:
        for number, writer in enumerate(plan.writers):
            group.create_task(write(number, writer))
        reading = [group.create_task(read(reader)) for reader in plan.readers]
    return [task.result() for task in reading]


@settings(
    max_examples=20,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=PLANS)
async def test_readers_reconnecting_anywhere_see_every_message_of_every_channel_once_and_in_order(
    arbiters: list[Served], plan: Plan
) -> None:
    example = next(_examples)
    names = [f"mux{example}-{index}" for index in range(plan.channels)]  # fresh channels: seqs from 1
    for name in names:
        await arbiters[0].arbiter.service.ensure_channel(name)
    totals = plan.totals()
    for reader, seen in zip(plan.readers, await play(arbiters, names, plan), strict=True):
        for name, total in zip(names, totals, strict=True):
            assert seen[name] == list(range(1, total + 1)), (reader, name, seen[name])


# --- falling behind, one channel alone ---------------------------------------------------------------------


async def test_a_channel_that_falls_behind_ends_alone_and_resumes_as_told_losing_nothing(
    arbiters: list[Served],
) -> None:
    for served in arbiters:
        served.arbiter.hub.queue_size = 3  # a burst of messages published at once overflows a channel's feed
    service = arbiters[0].arbiter.service
    client = arbiters[-1].client  # on PostgreSQL, the other arbiter: the messages reach it through NOTIFY
    for name in ("busy", "calm"):
        await service.ensure_channel(name)
    bursts, size = 6, 12
    total = bursts * size

    async def write() -> None:
        for burst in range(bursts):
            await asyncio.gather(
                *(
                    service.record_message("busy", author_id="u1", author_name="Yui", text=f"{burst}.{n}")
                    for n in range(size)
                )
            )
            await service.record_message("calm", author_id="u2", author_name="Rin", text=f"calm {burst}")
            await asyncio.sleep(0.01)

    seen: dict[str, list[int]] = {"busy": [], "calm": []}
    told: list[int] = []
    async with client.ws_connect(PATH, headers=auth("hana")) as ws:
        await subscribe(ws, busy=0, calm=0)
        writing = asyncio.create_task(write())
        while seen["busy"][-1:] != [total] or seen["calm"][-1:] != [bursts]:
            frame = await next_frame(ws)
            if frame["type"] == "message":
                seen[frame["channel_id"]].append(frame["message"]["seq"])
            elif frame["type"] == "ended":
                assert (frame["channel_id"], frame["reason"]) == ("busy", "fell_behind"), frame
                # It names the last message of that channel this reader was sent: where it resumes anyway.
                assert frame["after"] == (seen["busy"][-1] if seen["busy"] else 0), (frame, seen["busy"][-3:])
                told.append(frame["after"])
                await subscribe(ws, busy=frame["after"])
        await writing
    assert told, "the channel never fell behind: the path was not tested"
    assert seen == {"busy": list(range(1, total + 1)), "calm": list(range(1, bursts + 1))}


# --- what a subscription starts with, and the statuses asked on the stream ---------------------------------


async def ask(ws: Socket, *asks: dict[str, str]) -> None:
    await ws.send_str(json.dumps({"status": list(asks)}))


async def test_recent_replays_the_channels_last_messages_then_the_level_and_no_status_unasked(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    service = arbiter.service
    await service.ensure_channel("lobby")
    said = [
        (await service.record_message("lobby", author_id="u1", author_name="Yui", text=f"m{n}")).seq for n in range(5)
    ]
    async with client.ws_connect(PATH, headers=auth("hana")) as ws:
        await ws.send_str(json.dumps({"subscribe": [{"channel": "lobby", "recent": 2}]}))
        frames = await frames_until(ws, lambda f: f["type"] == "level")
        assert [f["type"] for f in frames] == ["message", "message", "level"]
        assert seqs(frames, "lobby") == said[-2:]
        # Claims, messages, claims given back: events, and no status unless one is asked for.
        claimed = await service.claim("lobby", "kai", Tier.REMARK)
        assert claimed.granted and claimed.claim is not None
        await service.record_message("lobby", author_id="u1", author_name="Yui", text="and you?")
        await service.release("lobby", "kai", claimed.claim.claim_id)
        frames = await frames_until(ws, lambda f: f["type"] == "claim" and f["claim"]["state"] == "released")
        frames.append(await next_frame(ws))  # the level it brought back
        assert [f["type"] for f in frames] == ["claim", "level", "message", "claim", "level"]
        with pytest.raises(TimeoutError):
            await next_frame(ws, within=0.3)


async def test_a_status_asked_on_the_stream_is_the_channel_as_it_is_when_asked(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    service = arbiter.service
    await service.ensure_channel("lobby")
    async with client.ws_connect(PATH, headers=auth("hana")) as ws:
        await subscribe(ws, lobby=0)
        await frames_until(ws, lambda f: f["type"] == "level")
        await ask(ws, {"channel": "lobby"})  # by default, the status of the persona whose token opened the stream
        [answer] = await frames_until(ws, lambda f: f["type"] == "status")
        assert (answer["channel_id"], answer["persona"]) == ("lobby", "hana")
        assert answer["status"] == (await service.status("lobby", "hana")).model_dump(mode="json")
        before = answer["status"]

        # Another's claim moved the pool and the verdicts: the next answer has it, as GET status would.
        claimed = await service.claim("lobby", "kai", Tier.LONG)
        assert claimed.granted and claimed.claim is not None
        await ask(ws, {"channel": "lobby", "persona": "hana"})
        frames = await frames_until(ws, lambda f: f["type"] == "status")
        assert [f["type"] for f in frames][:2] == ["claim", "level"]  # the claim's events came first
        status = frames[-1]["status"]
        assert status["level"] == before["level"] - claimed.claim.cost
        assert status["claims_held"] == {"long": 1}
        assert status == (await service.status("lobby", "hana")).model_dump(mode="json")


async def test_a_stream_acts_for_the_personas_whose_tokens_it_is_given(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    service = arbiter.service
    await service.ensure_channel("lobby")
    await service.set_persona("lobby", "kai", muted=True)
    kai = auth("kai")["Authorization"].removeprefix("Bearer ")
    async with client.ws_connect(PATH, headers=auth("hana")) as ws:
        await ws.send_str(json.dumps({"tokens": [kai], "subscribe": [{"channel": "lobby"}]}))
        await frames_until(ws, lambda f: f["type"] == "level")
        await ask(ws, {"channel": "lobby", "persona": "kai"}, {"channel": "lobby", "persona": "hana"})
        first, second = await frames_until(ws, lambda f: f.get("persona") == "hana")
        assert (first["persona"], first["status"]["you"]["muted"]) == ("kai", True)
        assert first["status"] == (await service.status("lobby", "kai")).model_dump(mode="json")
        assert (second["persona"], second["status"]["you"]["muted"]) == ("hana", False)


@pytest.mark.parametrize(
    "case",
    [
        # A token the arbiter does not know: named by its place, never shown.
        ("hana", {"tokens": ["not-a-token-of-anyone-here"]}, 4401, "tokens.0: unknown token"),
        ("hana", {"tokens": [ADMIN_TOKEN]}, 4401, "tokens.0: the admin token acts for no persona"),
        ("hana", {"status": [{"channel": "lobby", "persona": "kai"}]}, 4403, "does not act for persona kai"),
        ("admin", {"status": [{"channel": "lobby"}]}, 4403, "does not act for no persona"),
    ],
)
async def test_a_token_it_does_not_know_or_a_status_not_its_own_closes_the_stream_naming_why(
    arbiter: Arbiter, client: TestClient[Any, Any], case: tuple[str, dict[str, Any], int, str]
) -> None:
    who, command, code, named = case  # who opens the stream, what it sends, and how the arbiter closes it
    await arbiter.service.ensure_channel("lobby")
    async with client.ws_connect(PATH, headers=auth(who)) as ws:
        await ws.send_str(json.dumps(command))
        frame = await asyncio.wait_for(ws.receive(), 5)
        assert frame.type is WSMsgType.CLOSE, frame
        assert (frame.data, named in frame.extra) == (code, True), frame.extra
        assert "not-a-token" not in frame.extra and ADMIN_TOKEN not in frame.extra


async def test_the_status_of_an_unknown_channel_ends_it_as_unknown(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    async with client.ws_connect(PATH, headers=auth("hana")) as ws:
        await ask(ws, {"channel": "nowhere"})
        frame = await next_frame(ws)
        assert (frame["type"], frame["channel_id"], frame["reason"]) == ("ended", "nowhere", "unknown_channel")


async def test_skipped_kinds_are_not_sent_but_the_level_that_ends_a_replay_is(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    service = arbiter.service
    await service.ensure_channel("lobby")
    async with client.ws_connect(PATH, headers=auth("hana")) as ws:
        await ws.send_str(json.dumps({"skip": ["level", "claim"], "subscribe": [{"channel": "lobby", "after": 0}]}))
        assert (await next_frame(ws))["type"] == "level"  # the replay's end, whatever is skipped
        claimed = await service.claim("lobby", "kai", Tier.REMARK)
        assert claimed.granted and claimed.claim is not None
        said = await service.record_message("lobby", author_id="u1", author_name="Yui", text="hi")
        frame = await next_frame(ws)
        assert (frame["type"], frame["message"]["seq"]) == ("message", said.seq)  # no claim, no level before it
        await ws.send_str(json.dumps({"skip": []}))  # every kind again
        # Commands are taken in order: once the status asked after it comes, the skip is no more.
        await ask(ws, {"channel": "lobby"})
        assert [f["type"] for f in await frames_until(ws, lambda f: f["type"] == "status")] == ["status"]
        await service.release("lobby", "kai", claimed.claim.claim_id)
        assert [(await next_frame(ws))["type"] for _ in range(2)] == ["claim", "level"]


async def test_messages_skipped_are_not_sent_once_they_are_no_longer_skipped(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    service = arbiter.service
    await service.ensure_channel("lobby")
    async with client.ws_connect(PATH, headers=auth("hana")) as ws:
        await ws.send_str(json.dumps({"skip": ["message", "level"], "subscribe": [{"channel": "lobby", "after": 0}]}))
        assert (await next_frame(ws))["type"] == "level"
        await service.record_message("lobby", author_id="u1", author_name="Yui", text="unsent")
        await ask(ws, {"channel": "lobby"})
        assert (await next_frame(ws))["type"] == "status"  # the message came, and went unsent, before
        await ws.send_str(json.dumps({"skip": ["level"]}))
        await ask(ws, {"channel": "lobby"})
        assert (await next_frame(ws))["type"] == "status"
        said = await service.record_message("lobby", author_id="u1", author_name="Yui", text="sent")
        frame = await next_frame(ws)
        assert (frame["type"], frame["message"]["seq"]) == ("message", said.seq)  # not the skipped one, read again


async def test_after_and_recent_together_start_from_whichever_is_earlier(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    service = arbiter.service
    await service.ensure_channel("lobby")
    for n in range(6):
        await service.record_message("lobby", author_id="u1", author_name="Yui", text=f"m{n}")
    async with client.ws_connect(PATH, headers=auth("hana")) as ws:
        # One persona resumes after 5, another arrives wanting the last 3: messages 4 to 6.
        await ws.send_str(json.dumps({"subscribe": [{"channel": "lobby", "after": 5, "recent": 3}]}))
        assert seqs(await frames_until(ws, lambda f: f["type"] == "level"), "lobby") == [4, 5, 6]
        # Resuming after 1 reaches further back than the last 3: messages 2 to 6.
        await ws.send_str(json.dumps({"subscribe": [{"channel": "lobby", "after": 1, "recent": 3}]}))
        assert seqs(await frames_until(ws, lambda f: f["type"] == "level"), "lobby") == [2, 3, 4, 5, 6]


async def test_a_refused_claim_brings_the_personas_status_after_it(arbiter: Arbiter) -> None:
    service = arbiter.service
    await service.ensure_channel("lobby", {"capacity": 100})
    assert (await service.claim("lobby", "kai", Tier.LONG)).granted
    refused = await service.claim("lobby", "hana", Tier.LONG)
    assert not refused.granted and refused.status is not None
    assert refused.status == await service.status("lobby", "hana")
    assert refused.status.tiers[Tier.LONG].may_claim is False
    await service.ensure_channel("hall")
    granted = await service.claim("hall", "hana", Tier.REMARK)
    assert granted.granted and granted.status is None  # a grant needs none: the claim is the plan


async def test_an_unknown_channel_ends_alone_and_the_others_go_on(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    await arbiter.service.ensure_channel("lobby")
    async with client.ws_connect(PATH, headers=auth("hana")) as ws:
        await subscribe(ws, nowhere=0, lobby=0)
        frames = [await next_frame(ws) for _ in range(2)]  # the two channels start in either order
        [ended] = [f for f in frames if f["type"] == "ended"]
        assert (ended["channel_id"], ended["reason"], ended["after"]) == ("nowhere", "unknown_channel", None)
        assert "nowhere" in ended["detail"]
        assert [(f["type"], f["channel_id"]) for f in frames if f is not ended] == [("level", "lobby")]


async def test_unsubscribing_stops_a_channel_and_subscribing_again_restarts_it(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    service = arbiter.service
    for name in ("lobby", "hall"):
        await service.ensure_channel(name)
    async with client.ws_connect(PATH, headers=auth("admin")) as ws:
        await subscribe(ws, lobby=0, hall=0)
        await frames_until(ws, lambda f: f["type"] == "level")
        await frames_until(ws, lambda f: f["type"] == "level")
        await ws.send_str(json.dumps({"unsubscribe": ["lobby"]}))
        await eventually(lambda: not arbiter.hub.watching("lobby"), what="the stream to leave lobby")
        await service.record_message("lobby", author_id="u1", author_name="Yui", text="unheard")
        hall = await service.record_message("hall", author_id="u1", author_name="Yui", text="heard")
        frame = await next_frame(ws)
        assert (frame["channel_id"], frame["message"]["seq"]) == ("hall", hall.seq)
        await subscribe(ws, lobby=0)  # from the start: the message said while it was not followed is replayed
        frames = await frames_until(ws, lambda f: f["type"] == "level")
        assert seqs(frames, "lobby") == [1]


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ("not json", "bad command"),
        (json.dumps({"subscribe": [{"channel": "bad channel!", "after": 0}]}), "subscribe.0.channel"),
        (json.dumps({"subscribe": [{"channel": "lobby", "after": -1}]}), "subscribe.0.after"),
        (json.dumps({"subscribe": [{"channel": "lobby", "recent": 0}]}), "subscribe.0.recent"),
        (json.dumps({"skip": ["levels"]}), "skip.0"),
        (json.dumps({"tokens": [""]}), "tokens.0"),
        (json.dumps({"status": [{"channel": "lobby", "persona": "no such!"}]}), "status.0.persona"),
        (json.dumps({"follow": ["lobby"]}), "follow"),
    ],
)
async def test_a_malformed_command_closes_the_stream_naming_the_problem(
    arbiter: Arbiter, client: TestClient[Any, Any], command: str, named: str
) -> None:
    await arbiter.service.ensure_channel("lobby")
    async with client.ws_connect(PATH, headers=auth("hana")) as ws:
        await ws.send_str(command)
        frame = await asyncio.wait_for(ws.receive(), 5)
        assert frame.type is WSMsgType.CLOSE, frame
        assert frame.data == 4400
        assert named in frame.extra and "\n" not in frame.extra, frame.extra


async def test_the_stream_needs_a_token(client: TestClient[Any, Any]) -> None:
    response = await client.get(PATH)
    assert response.status == 401
    assert "Authorization" in (await response.json())["error"]["message"]


# --- the frames on the wire --------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [0, 1, 125, 126, 127, 65535, 65536, 70000])
async def test_a_frames_header_is_the_one_aiohttp_writes_for_a_text_frame(length: int) -> None:
    """The stream writes its frames back to back itself: each must be what aiohttp's writer makes of send_str."""
    written: list[bytes] = []

    class Transport(asyncio.Transport):
        def write(self, data: bytes | bytearray | memoryview) -> None:
            written.append(bytes(data))

        def is_closing(self) -> bool:
            return False

    text = "x" * length
    await WebSocketWriter(BaseProtocol(asyncio.get_running_loop()), Transport()).send_frame(
        text.encode(), WSMsgType.TEXT
    )
    assert text_frame_header(length) + text.encode() == b"".join(written)


async def test_a_client_that_stops_reading_holds_its_feeds_back_until_the_channel_falls_behind(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    """Backpressure: frames wait for the socket instead of piling up in the arbiter, so the feed of a channel that
    goes on talking falls behind (and the client resumes after the last message it got, missing nothing)."""
    arbiter.hub.queue_size = 3
    service = arbiter.service
    await service.ensure_channel("busy")
    await service.record_message("busy", author_id="u1", author_name="Yui", text="hello")
    [said] = (await service.history("busy", after=0, limit=1)).messages
    text = "a long message " * 400  # some 6 kB a frame: the socket's buffers fill after a few hundred
    async with client.ws_connect(PATH, headers=auth("hana")) as ws:
        await subscribe(ws, busy=1)
        await frames_until(ws, lambda f: f["type"] == "level")
        published = 1
        # Not read meanwhile: were the frames not held back, the feed would keep up with these forever.
        while arbiter.hub.watching("busy") and published < 20_000:
            published += 1
            message = said.model_copy(update={"seq": published, "text": text})
            arbiter.hub.publish([MessageEvent(channel_id="busy", message=message)])
            await asyncio.sleep(0)
        assert not arbiter.hub.watching("busy"), "the feed never fell behind: the frames were not held back"
        frames = await frames_until(ws, lambda f: f["type"] == "ended", within=30)
    got = seqs(frames, "busy")
    assert got == list(range(2, len(got) + 2))
    assert (frames[-1]["reason"], frames[-1]["after"]) == ("fell_behind", got[-1])
    assert len(got) < published


async def test_a_client_that_asks_for_compression_gets_its_frames_all_the_same(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    await arbiter.service.ensure_channel("lobby")
    async with client.ws_connect(PATH, headers=auth("hana"), compress=15) as ws:
        assert ws.compress == 15
        await subscribe(ws, lobby=0)
        await frames_until(ws, lambda f: f["type"] == "level")
        said = await arbiter.service.record_message("lobby", author_id="u1", author_name="Yui", text="hi " * 100)
        frames = await frames_until(ws, lambda f: f["type"] == "message")
        assert seqs(frames, "lobby") == [said.seq]
