"""The event stream never skips a message: a client that reconnects with ``?after=<the last seq it saw>`` gets
every message after it exactly once and in order, whenever it reconnects, while messages keep being written; and
a client dropped for falling behind resumes where the arbiter tells it to and loses nothing.

On SQLite, and on PostgreSQL with two arbiters on one database (there a message written through one arbiter
reaches the other's streams through NOTIFY): readers and writers use either.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest
from aiohttp import WSMsgType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arbiter.api.stream import FELL_BEHIND
from arbiter.contract import Tier
from arbiter.storage.pubsub import LISTENER_NAME
from tests.conftest import auth
from tests.support.arbiters import serve
from tests.support.events import checked_event, next_event, read_until, told_after

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from aiohttp import ClientWebSocketResponse
    from aiohttp.test_utils import TestClient

    from arbiter.server import Arbiter
    from tests.support.arbiters import Served
    from tests.support.clock import FakeClock

    Socket = ClientWebSocketResponse[Any]


def events_path(channel: str, after: int | None = None) -> str:
    return f"/v1/channels/{channel}/events" + ("" if after is None else f"?after={after}")


@pytest.fixture
async def arbiters(database_url: str, clock: FakeClock) -> AsyncIterator[list[Served]]:
    """One arbiter on SQLite (one process owns the file); two on one PostgreSQL database."""
    count = 1 if database_url.startswith("sqlite") else 2
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(serve(database_url, clock=clock)) for _ in range(count)]


# --- readers that reconnect anywhere ----------------------------------------------------------------------


@dataclass(frozen=True)
class Writer:
    bursts: tuple[int, ...]  # how many messages it writes at once, burst after burst
    via: int  # through which arbiter (taken modulo how many there are)


@dataclass(frozen=True)
class Reader:
    joins_after: int  # messages written before it first connects
    takes: tuple[int, ...]  # messages it reads on each connection before dropping it, in turn; 0: drops it at once
    # Milliseconds it stays away before it reconnects: long enough, now and then, that nobody watches the channel,
    # when the arbiter (alone on SQLite) stops building its events.
    away_ms: int
    via: int


@dataclass(frozen=True)
class Plan:
    writers: tuple[Writer, ...]
    readers: tuple[Reader, ...]

    @property
    def total(self) -> int:
        return sum(sum(writer.bursts) for writer in self.writers)


# Bursts are written at once, so they are committed in batches: the longer a batch, the longer the moment between
# deciding a message and committing it, which a reader connecting in between must not fall into.
_bursts = st.lists(st.integers(1, 24), min_size=1, max_size=3).map(tuple)
_takes = st.tuples(st.lists(st.integers(0, 8), max_size=3), st.integers(1, 8)).map(lambda p: (*p[0], p[1]))
PLANS = st.builds(
    Plan,
    writers=st.lists(st.builds(Writer, bursts=_bursts, via=st.integers(0, 1)), min_size=1, max_size=3).map(tuple),
    readers=st.lists(
        st.builds(
            Reader, joins_after=st.integers(0, 20), takes=_takes, away_ms=st.integers(0, 3), via=st.integers(0, 1)
        ),
        min_size=1,
        max_size=3,
    ).map(tuple),
)
_channels = itertools.count(1)


async def play(arbiters: list[Served], channel: str, plan: Plan) -> list[list[int]]:
    """Run the plan's writers and readers at once; the seqs of the messages each reader saw, in order."""
    total = plan.total
    written = 0
    progress = asyncio.Condition()

    async def write(number: int, writer: Writer) -> None:
        nonlocal written
        service = arbiters[writer.via % len(arbiters)].arbiter.service
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

    async def read(reader: Reader) -> list[int]:
        async with progress:
            await progress.wait_for(lambda: written >= min(reader.joins_after, total))
        client = arbiters[reader.via % len(arbiters)].client
        seen: list[int] = []
        for connection in itertools.count():
            if seen[-1:] == [total] or connection > len(reader.takes) * (total + 1):
                return seen
            take = reader.takes[connection % len(reader.takes)]
            after = seen[-1] if seen else 0
            if connection:
                await asyncio.sleep(reader.away_ms / 1000)
            async with client.ws_connect(events_path(channel, after), headers=auth("hana")) as ws:
                while take > 0 and seen[-1:] != [total]:
                    try:
                        event = await next_event(ws)
                    except TimeoutError:
                        return seen  # a message that never came: the check below names it
                    if event["type"] == "message":
                        seen.append(event["message"]["seq"])
                        take -= 1
        raise AssertionError("unreachable")

    # In a task group, a writer that fails ends the readers waiting for its messages, rather than leave them waiting.
    async with asyncio.TaskGroup() as group:
        for number, writer in enumerate(plan.writers):
            group.create_task(write(number, writer))
        reading = [group.create_task(read(reader)) for reader in plan.readers]
    return [task.result() for task in reading]


@settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=PLANS)
async def test_readers_reconnecting_anywhere_see_every_message_once_and_in_order(
    arbiters: list[Served], plan: Plan
) -> None:
    channel = f"join{next(_channels)}"  # each example on a channel of its own: seqs from 1
    await arbiters[0].arbiter.service.ensure_channel(channel)
    everything = list(range(1, plan.total + 1))
    for reader, seen in zip(plan.readers, await play(arbiters, channel, plan), strict=True):
        assert seen == everything, (reader, sorted(set(everything) - set(seen)), seen)


# --- a change decided before a stream subscribed, committed after it read the history ---------------------


@pytest.mark.on_sqlite  # holds the writer's thread between a step and its commit
async def test_a_message_decided_while_nobody_watched_and_committed_as_a_stream_opened_reaches_it(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    # Alone on SQLite the arbiter builds a change's events only while someone watches the channel, and it decides
    # when it makes the change, on the writer's thread. A message decided before a stream subscribed but committed
    # after the stream had read the history was in neither: the stream skipped it. Here the writer is held
    # between the two moments, as a busy writer holds it by chance.
    service = arbiter.service
    await service.ensure_channel("lobby")
    writer = service._writer
    holding, release = threading.Event(), threading.Event()
    first_in, let_first_go = threading.Event(), threading.Event()

    def occupy(_tx: object) -> None:  # a batch of its own, so the message and the hold queue up behind it
        first_in.set()
        let_first_go.wait(5)

    def hold(_tx: object) -> None:  # batched after the message: its step has run, its commit waits for this
        holding.set()
        release.wait(5)

    occupied = asyncio.ensure_future(writer.run(occupy))
    await asyncio.to_thread(first_in.wait, 5)
    said = asyncio.ensure_future(service.record_message("lobby", author_id="u1", author_name="Yui", text="hello?"))
    held = asyncio.ensure_future(writer.run(hold))
    await asyncio.sleep(0)  # both queue up now, behind the first batch
    let_first_go.set()
    assert await asyncio.to_thread(holding.wait, 5)

    connecting = asyncio.ensure_future(client.ws_connect(events_path("lobby", 0), headers=auth("hana")))
    # A stream that does not wait for the writer reads the history within this moment, without the message.
    await asyncio.sleep(0.2)
    release.set()
    await asyncio.gather(occupied, held)
    seq = (await said).seq
    async with await connecting as ws:
        events = await read_until(ws, lambda event: event["type"] == "message")
    assert [event["message"]["seq"] for event in events if event["type"] == "message"] == [seq]


@pytest.mark.postgres
async def test_messages_whose_events_another_arbiter_lost_still_reach_the_stream(
    postgres_url: str, clock: FakeClock
) -> None:
    # Another arbiter's events come through NOTIFY, on a connection of their own. Those sent while it is down are
    # lost for good: the next message that does come shows the hole, and the stream reads the rest from history.
    async with serve(postgres_url, clock=clock) as a, serve(postgres_url, clock=clock) as b:
        await a.arbiter.service.ensure_channel("lobby")

        async def say(text: str) -> int:
            return (await a.arbiter.service.record_message("lobby", author_id="u1", author_name="Yui", text=text)).seq

        async with b.client.ws_connect(events_path("lobby", 0), headers=auth("hana")) as ws:
            await read_until(ws, lambda event: event["type"] == "level")
            said = [await say("before")]
            events = await read_until(ws, lambda event: event["type"] == "message")
            await drop_listen_connections(postgres_url)
            said += [await say(f"while B does not listen {n}") for n in range(3)]
            # B listens again after a moment; until it does, what A says does not reach B's streams either.
            for attempt in range(50):
                said.append(await say(f"after {attempt}"))
                with contextlib.suppress(TimeoutError):
                    events += await read_until(
                        ws, lambda event: event["type"] == "message" and event["message"]["seq"] == said[-1], within=0.2
                    )
                    break
    assert [event["message"]["seq"] for event in events if event["type"] == "message"] == said


async def drop_listen_connections(database_url: str) -> None:
    """End the arbiters' LISTEN connections to the database, as a network blip or a server restart would."""
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"), timeout=5)
    try:
        # The WHERE picks the rows before the select list runs: only this database's LISTEN connections end.
        ended = await conn.fetch(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()",
            LISTENER_NAME,
        )
    finally:
        await conn.close()
    assert len(ended) == 2 and all(row[0] for row in ended), ended  # one per arbiter


# --- falling behind --------------------------------------------------------------------------------------


async def until_closed(ws: Socket, *, stop_at: int | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """The events on ``ws`` until the arbiter closes it (or a message with seq ``stop_at`` came), and the reason
    it gave when it closed it with the fell-behind code (else None)."""
    events: list[dict[str, Any]] = []
    while True:
        frame = await asyncio.wait_for(ws.receive(), 5)
        if frame.type is WSMsgType.TEXT:
            events.append(checked_event(frame.json()))
            if stop_at is not None and events[-1]["type"] == "message" and events[-1]["message"]["seq"] == stop_at:
                return events, None
        elif frame.type is WSMsgType.CLOSE:
            return events, frame.extra if frame.data == FELL_BEHIND else None
        else:
            raise AssertionError(f"the stream ended with {frame.type} {frame.data!r}")


async def test_a_reader_that_falls_behind_resumes_as_told_and_loses_nothing(arbiters: list[Served]) -> None:
    # Three events fit a subscriber's queue: a burst of messages published at once overflows it.
    for served in arbiters:
        served.arbiter.hub.queue_size = 3
    service = arbiters[0].arbiter.service
    client = arbiters[-1].client  # on PostgreSQL, the other arbiter: the messages reach it through NOTIFY
    await service.ensure_channel("lobby")
    bursts, size = 8, 12
    total = bursts * size

    async def write() -> None:
        for burst in range(bursts):
            await asyncio.gather(
                *(
                    service.record_message("lobby", author_id="u1", author_name="Yui", text=f"{burst}.{n}")
                    for n in range(size)
                )
            )
            await asyncio.sleep(0.01)  # the reader catches up between bursts, and falls behind in the next

    seen: list[int] = []
    notices: list[int] = []
    writing = asyncio.create_task(write())
    while seen[-1:] != [total]:
        async with client.ws_connect(events_path("lobby", seen[-1] if seen else 0), headers=auth("hana")) as ws:
            events, reason = await until_closed(ws, stop_at=total)
        seen += [event["message"]["seq"] for event in events if event["type"] == "message"]
        if seen[-1:] != [total]:
            notices.append(told_after(reason))
            # The notice names the last message this reader was sent (nothing after it was), which is where the
            # reader resumes anyway.
            assert notices[-1] == (seen[-1] if seen else 0), (notices[-1], seen[-3:], reason)
    await writing

    assert notices, "the reader never fell behind: the path was not tested"
    assert seen == list(range(1, total + 1))


async def test_a_live_only_reader_dropped_before_any_message_is_told_where_it_started(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    # Without ?after= a stream starts at the channel's last seq. A persona's turn publishes three events at once
    # (its message, its claim, the level): two fit the queue here, so the reader is dropped before the message.
    # The seq to resume after is where it started, and the message comes back from there.
    service = arbiter.service
    await service.ensure_channel("lobby")
    said = await service.record_message("lobby", author_id="u1", author_name="Yui", text="shall we?")
    arbiter.hub.queue_size = 2
    async with client.ws_connect(events_path("lobby"), headers=auth("hana")) as ws:
        assert (await next_event(ws))["type"] == "level"
        spoken = await service.consume("lobby", "kai", "Sure, let us.", tier=Tier.REMARK)
        events, reason = await until_closed(ws)
    assert spoken.message is not None
    assert events == []
    assert told_after(reason) == said.seq

    async with client.ws_connect(events_path("lobby", told_after(reason)), headers=auth("hana")) as ws:
        replayed = await read_until(ws, lambda event: event["type"] == "level")
    assert [event["message"] for event in replayed if event["type"] == "message"] == [
        spoken.message.model_dump(mode="json")
    ]
