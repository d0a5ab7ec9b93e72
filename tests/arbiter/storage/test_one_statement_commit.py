"""The batch writer on PostgreSQL commits a batch on the channels it remembers with one statement, checked against
the database: here two writers share one database and neither hears of the other's commits (no relay), so each one's
memory goes stale exactly when the other writes. Nothing either answers may come from that stale memory: a grant, a
refusal, a stored note, the tokens of the day - each is what the database had when the statement ran.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import pytest

from arbiter import contract as wire
from arbiter.core.models import Tier
from arbiter.events import EventHub
from arbiter.server import IdFactory
from arbiter.service import ArbiterService
from arbiter.storage.database import Database
from arbiter.storage.migrate import migrate
from arbiter.storage.pg_commit import BatchWrites, commit_statement
from arbiter.storage.sql_port import DatabaseReads
from arbiter.storage.writer import BatchWriter

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.support.clock import FakeClock

pytestmark = pytest.mark.postgres

PERSONAS = ("rin", "theo", "mio")
CHANNEL = "shared"
NOTES = wire.DialogueState(topic="tea")


@contextlib.asynccontextmanager
async def deaf_arbiters(postgres_url: str, clock: FakeClock) -> AsyncIterator[tuple[ArbiterService, ArbiterService]]:
    """Two arbiters' services on one database, each deaf to the other's commits."""
    async with deaf_arbiters_and_hubs(postgres_url, clock) as ((a, _), (b, _)):
        yield a, b


@contextlib.asynccontextmanager
async def deaf_arbiters_and_hubs(
    postgres_url: str, clock: FakeClock
) -> AsyncIterator[tuple[tuple[ArbiterService, EventHub], tuple[ArbiterService, EventHub]]]:
    async with contextlib.AsyncExitStack() as stack:
        served: list[tuple[ArbiterService, EventHub]] = []
        for _ in range(2):
            database = Database.open(postgres_url)
            stack.push_async_callback(database.dispose)
            await migrate(database)
            hub = EventHub()
            writer = BatchWriter(database, clock, hub.publish, owns_database=False)
            await writer.start()
            stack.push_async_callback(writer.close)
            service = ArbiterService(
                DatabaseReads(database), writer, clock=clock, new_id=IdFactory(), personas=PERSONAS
            )
            served.append((service, hub))
        yield served[0], served[1]


async def test_a_refusal_is_never_made_from_a_stale_memory(postgres_url: str, clock: FakeClock) -> None:
    async with deaf_arbiters(postgres_url, clock) as (a, b):
        await a.ensure_channel(CHANNEL, {"capacity": 100})
        held = await a.claim(CHANNEL, "rin", Tier.REMARK)  # a remembers the pool at 40
        assert held.granted and held.claim is not None
        await b.release(CHANNEL, "rin", held.claim.claim_id)  # the pool is full again; a does not know
        again = await a.claim(CHANNEL, "theo", Tier.REMARK)
        assert again.granted, again  # from its memory, a would have said "insufficient"
        assert again.level == 40
        refused = await b.claim(CHANNEL, "mio", Tier.LONG)  # and b, which a's claim left behind, refuses rightly
        assert (refused.granted, refused.reason) == (False, wire.RefusalReason.INSUFFICIENT)


async def test_a_grant_speech_notes_and_tokens_land_on_the_channel_as_it_is(
    postgres_url: str, clock: FakeClock
) -> None:
    async with deaf_arbiters(postgres_url, clock) as (a, b):
        await a.ensure_channel(CHANNEL, {"capacity": 1_000})
        said = await a.consume(CHANNEL, "rin", "first", tier=Tier.AIZUCHI)  # a remembers seq 1
        assert said.message is not None and said.message.seq == 1
        assert (await b.consume(CHANNEL, "theo", "second", tier=Tier.REMARK, based_on_seq=1)).granted
        await b.report_usage(CHANNEL, "theo", 100, 50)

        claim = await a.claim(CHANNEL, "mio", Tier.REMARK, notes=True)
        assert claim.granted and claim.claim is not None
        spoken = await a.speak(
            CHANNEL, "mio", claim.claim.claim_id, "third", memory=wire.MemoryUpdate(seq=2, state=NOTES)
        )
        assert spoken.message is not None and spoken.message.seq == 3  # not 2: b's message is counted
        usage = await a.report_usage(CHANNEL, "mio", 10, 5)
        assert usage.tokens_today == 165  # b's tokens too
        status = await b.status(CHANNEL, "rin")
        assert (status.last_seq, status.tokens_today, status.level) == (3, 165, 1_000 - 5 - 60 - 60)
        history = await b.history(CHANNEL)
        assert [(m.seq, m.text) for m in history.messages] == [(1, "first"), (2, "second"), (3, "third")]
        [notes] = (await b.memories(CHANNEL, "mio")).memories
        assert (notes.seq, notes.state) == (2, NOTES)


async def test_older_notes_never_replace_newer_ones_stored_by_another(postgres_url: str, clock: FakeClock) -> None:
    async with deaf_arbiters_and_hubs(postgres_url, clock) as ((a, heard), (b, _)):
        await a.ensure_channel(CHANNEL, {"capacity": 1_000})
        for persona, text in zip(PERSONAS, ("one", "two", "three"), strict=True):
            assert (await a.consume(CHANNEL, persona, text, tier=Tier.REMARK)).granted
        newer = wire.MemoryUpdate(seq=3, state=wire.DialogueState(topic="newer"))
        older = wire.MemoryUpdate(seq=1, state=wire.DialogueState(topic="older"))
        claim = await b.claim(CHANNEL, "rin", Tier.REMARK)
        assert claim.claim is not None
        await b.release(CHANNEL, "rin", claim.claim.claim_id, memory=newer)
        claim = await a.claim(CHANNEL, "rin", Tier.REMARK)
        assert claim.claim is not None
        with heard.subscribe(CHANNEL) as events:
            await a.release(CHANNEL, "rin", claim.claim.claim_id, memory=older)  # late: it keeps the newer
        [notes] = (await a.memories(CHANNEL, "rin")).memories
        assert (notes.seq, notes.state.topic) == (3, "newer")
        # Nor does anyone hear of the older notes as if they were kept: the release is told, the notes are not.
        told = []
        while events.pending:
            told.append(await events.next())
        assert [event.type for event in told] == ["claim", "level"]


async def test_the_commit_is_planned_to_touch_rows_by_key_however_small_the_tables_were(postgres_url: str) -> None:
    """The writer's connection plans its commit once (a generic plan), at its first batch, most often on tables
    near empty, where scanning a table whole looks cheapest; that plan is kept as the history grows. So the plan it
    makes on empty tables must reach the rows it updates by their keys, not by scanning spends or messages."""
    database = Database.open(postgres_url)
    try:
        await migrate(database)
        held = database.held()
        statement, parameters = commit_statement(BatchWrites(), now=0.0, notify_channel="x", notifications=[])
        try:
            rows = await held.fetch(f"EXPLAIN {statement}", *parameters)
        finally:
            await held.close()
    finally:
        await database.dispose()
    plan = "\n".join(row[0] for row in rows)
    for table in ("channels", "spends", "messages"):
        assert f"Seq Scan on {table}" not in plan, plan
    assert "Index Scan using pk_spends on spends" in plan
