"""The storage port's contract (``arbiter.storage.port``), on each side behind it: the in-memory twin, SQLite and
PostgreSQL. The service's tests run on the twin; this suite is why that is fair: whatever the twin does here, the
databases do too, through the same calls.

Each test drives the port as the service does: steps (synchronous functions of the transaction, built on the pure
core) run by the writer, then the reads outside it, and the MCP sessions' store.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from arbiter import contract as wire
from arbiter.core import rules
from arbiter.core.errors import ConflictError
from arbiter.core.images import ImageRef
from arbiter.core.models import AuthorKind, ChannelSettings, ChannelState, Memory, PersonaInfo, SpendState, Tier
from arbiter.core.rules import Author
from arbiter.storage.database import Database
from arbiter.storage.errors import StorageError
from arbiter.storage.memory import MemoryStorage
from arbiter.storage.memory_sessions import MemorySessions
from arbiter.storage.migrate import migrate
from arbiter.storage.sql_port import DatabaseReads, DatabaseSessions
from arbiter.storage.writer import BatchWriter
from tests.support.clock import FakeClock
from tests.support.postgres import create_database, drop_database

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from arbiter.events import Event
    from arbiter.storage.port import SessionStore, StepTx, StorageReads, StorageWriter

LOBBY, GARDEN = "lobby", "garden"
ANN = Author("ann", "Ann", AuthorKind.HUMAN)
RIN = Author("rin", "Rin", AuthorKind.PERSONA)


@dataclass
class Port:
    """One side of the port, started, with the events it published and the clock it reads."""

    writer: StorageWriter
    reads: StorageReads
    sessions: SessionStore
    published: list[Event]
    clock: FakeClock

    async def run(self, step: Callable[[StepTx], Any], *channels: str) -> Any:
        return await self.writer.run(step, channels)

    async def together(self, *steps: Callable[[StepTx], Any]) -> list[Any]:
        """Steps queued at once (a batch, or batches back to back): their outcomes, an exception for one that raised."""
        runs = [self.writer.run(step) for step in steps]
        return list(await asyncio.gather(*runs, return_exceptions=True))

    def marks(self) -> list[int]:
        """The marks of the events published (see :func:`say`), in order."""
        return [event.last_seq for event in self.published if isinstance(event, wire.ClearedEvent)]


@contextlib.asynccontextmanager
async def sql_port(url: str, clock: FakeClock) -> AsyncIterator[Port]:
    database = Database.open(url)
    try:
        await migrate(database)
        published: list[Event] = []
        writer = BatchWriter(database, clock, published.extend, owns_database=database.is_sqlite)
        await writer.start()
        try:
            yield Port(writer, DatabaseReads(database), DatabaseSessions(database), published, clock)
        finally:
            await writer.close()
    finally:
        await database.dispose()


@pytest.fixture(params=["twin", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def port(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Port]:
    clock = FakeClock()
    if request.param == "twin":
        published: list[Event] = []
        twin = MemoryStorage(clock, published.extend)
        await twin.start()
        try:
            yield Port(twin, twin, MemorySessions(), published, clock)
        finally:
            await twin.close()
        return
    url = f"sqlite:///{tmp_path / 'arbiter.db'}" if request.param == "sqlite" else await create_database()
    try:
        async with sql_port(url, clock) as opened:
            yield opened
    finally:
        if request.param == "postgres":
            await drop_database(url)


# --- steps, as the service writes them ---------------------------------------------------------------------


def create(channel_id: str, **settings: Any) -> Callable[[StepTx], ChannelState]:
    def step(tx: StepTx) -> ChannelState:
        return tx.create_channel(ChannelState(channel_id, ChannelSettings(**settings), history_since=tx.now()))

    return step


def state_of(tx: StepTx, channel_id: str, spend_ids: tuple[str, ...] = ()) -> ChannelState:
    state = tx.channel(channel_id, spend_ids=spend_ids)
    assert state is not None, channel_id
    return state


def say(channel_id: str, text: str, *, mark: int = 0, platform_id: str | None = None) -> Callable[[StepTx], int]:
    """A person's message, with an event marked ``mark``; its seq."""

    def step(tx: StepTx) -> int:
        transition = rules.observe(state_of(tx, channel_id), ANN, text, tx.now(), platform_message_id=platform_id)
        tx.apply(transition)
        tx.emit(wire.ClearedEvent(channel_id=channel_id, last_seq=mark))
        return transition.state.last_seq

    return step


def failing(channel_id: str, error: Exception) -> Callable[[StepTx], None]:
    """A step that changes everything it can, then raises."""

    def step(tx: StepTx) -> None:
        say(channel_id, "never said", mark=-1, platform_id="999")(tx)
        state = state_of(tx, channel_id)
        tx.apply(rules.claim(state, "rin", Tier.REMARK, tx.now(), claim_id="doomed"))
        tx.save_memory(Memory(channel_id, "rin", 1, {"topic": "doomed"}, tx.now()))
        tx.add_usage(channel_id, "rin", day=1, tokens=(100, 10, 0, 0))
        tx.save_persona(PersonaInfo("rin", "Doomed Rin"))
        raise error

    return step


async def made(port: Port, *channels: str) -> None:
    for channel_id in channels:
        await port.run(create(channel_id), channel_id)


async def texts(port: Port, channel_id: str) -> list[str]:
    return [message.text for message in await port.reads.history(channel_id, 0, 100)]


# --- commits -------------------------------------------------------------------------------------------------


async def test_what_a_step_commits_is_what_the_reads_see(port: Port) -> None:
    await made(port, LOBBY)
    assert await port.run(say(LOBBY, "hello", platform_id="101"), LOBBY) == 1
    state = await port.reads.channel(LOBBY, port.clock())
    assert state is not None and state.last_seq == 1
    assert await texts(port, LOBBY) == ["hello"]
    remembered = await port.writer.remembered(LOBBY)
    assert remembered is None or remembered == state  # (PostgreSQL may not know it current without asking)
    assert await port.reads.channel(GARDEN, port.clock()) is None


async def test_creating_a_channel_twice_keeps_the_first(port: Port) -> None:
    first = await port.run(create(LOBBY, capacity=80), LOBBY)
    again = await port.run(create(LOBBY, capacity=50), LOBBY)
    assert first.settings.capacity == again.settings.capacity == 80
    await made(port, GARDEN)
    assert await port.reads.channel_ids() == [(GARDEN, True, 0), (LOBBY, True, 0)]


async def test_a_step_that_raises_fails_alone_and_leaves_no_trace(port: Port) -> None:
    await made(port, LOBBY)
    outcomes = await port.together(
        say(LOBBY, "before", mark=1), failing(LOBBY, ConflictError("no")), say(LOBBY, "after", mark=2)
    )
    assert outcomes[0] == 1 and outcomes[2] == 2  # the failed step's seq is not taken
    assert isinstance(outcomes[1], ConflictError)
    assert await texts(port, LOBBY) == ["before", "after"]
    state = await port.reads.channel(LOBBY, port.clock())
    assert state is not None and (state.last_seq, state.claims) == (2, ())
    assert await port.reads.memories(LOBBY) == []
    assert await port.reads.usage(LOBBY, 1) == {}
    assert await port.reads.persona_infos() == []
    assert await port.reads.recent_platform_ids(LOBBY, 10) == []
    assert port.marks() == [1, 2]


async def test_an_unexpected_error_is_a_storage_error_and_the_writer_goes_on(port: Port) -> None:
    await made(port, LOBBY)
    with pytest.raises(StorageError, match="internal error: ZeroDivisionError"):
        await port.run(failing(LOBBY, ZeroDivisionError()), LOBBY)
    assert await port.run(say(LOBBY, "still here"), LOBBY) == 1
    assert await texts(port, LOBBY) == ["still here"]


async def test_steps_queued_together_each_see_what_the_one_before_left_in_order(port: Port) -> None:
    await made(port, LOBBY)
    seqs = await port.together(*(say(LOBBY, f"line {n}", mark=n) for n in range(1, 21)))
    assert seqs == list(range(1, 21))
    assert await texts(port, LOBBY) == [f"line {n}" for n in range(1, 21)]
    assert port.marks() == list(range(1, 21))  # published in the order they were made


async def test_the_events_are_published_before_the_caller_hears_back(port: Port) -> None:
    await made(port, LOBBY)
    await port.run(say(LOBBY, "hello", mark=7), LOBBY)
    assert port.marks() == [7]


async def test_a_version_counts_the_batches_that_changed_the_channel(port: Port) -> None:
    await made(port, LOBBY)
    assert await port.reads.version(LOBBY) == 0
    await port.run(say(LOBBY, "one"), LOBBY)
    assert await port.reads.version(LOBBY) == 1
    await port.run(lambda tx: state_of(tx, LOBBY).last_seq, LOBBY)  # a step that only reads
    with pytest.raises(ConflictError):
        await port.run(failing(LOBBY, ConflictError("no")), LOBBY)
    assert await port.reads.version(LOBBY) == 1
    await port.run(say(LOBBY, "two"), LOBBY)
    assert await port.reads.version(LOBBY) == 2
    assert await port.reads.version(GARDEN) is None


async def test_a_closed_writer_finishes_what_was_queued_and_refuses_more(port: Port) -> None:
    await made(port, LOBBY)
    queued = asyncio.ensure_future(port.run(say(LOBBY, "last words"), LOBBY))
    await asyncio.sleep(0)
    await port.writer.close()
    assert await queued == 1
    with pytest.raises(StorageError) as refused:
        await port.run(say(LOBBY, "too late"), LOBBY)
    assert refused.value.code == "shutting_down"


# --- the history ------------------------------------------------------------------------------------------------


async def test_the_history_pages_in_seq_order_without_what_was_retracted_or_deleted(port: Port) -> None:
    await made(port, LOBBY)
    for n in range(1, 6):
        await port.run(say(LOBBY, f"m{n}", platform_id=str(100 + n)), LOBBY)

    def delete_second(tx: StepTx) -> None:
        message = tx.message_by_platform_id(LOBBY, "102")
        assert message is not None and message.seq == 2
        tx.apply(rules.delete(state_of(tx, LOBBY), message))

    await port.run(delete_second, LOBBY)
    page = await port.reads.history(LOBBY, 0, 2)
    assert [(m.seq, m.text) for m in page] == [(1, "m1"), (3, "m3")]
    assert [m.text for m in await port.reads.history(LOBBY, 3, 10)] == ["m4", "m5"]
    assert [m.text for m in await port.reads.recent_history(LOBBY, 3)] == ["m3", "m4", "m5"]
    # A deleted message was said: its platform id is still among the newest.
    assert await port.reads.recent_platform_ids(LOBBY, 3) == ["105", "104", "103"]
    assert await port.reads.recent_platform_ids(LOBBY, 10) == ["105", "104", "103", "102", "101"]


async def test_a_step_reads_messages_by_seq_and_platform_id_and_what_a_persona_said(port: Port) -> None:
    await made(port, LOBBY)
    await port.run(say(LOBBY, "hi rin", platform_id="201"), LOBBY)

    def rin_speaks(tx: StepTx) -> int:
        transition = rules.consume(state_of(tx, LOBBY), RIN, "hello", tx.now(), spend_id="s1", tier=Tier.REMARK)
        tx.apply(transition)
        return transition.state.last_seq

    assert await port.run(rin_speaks, LOBBY) == 2

    def look(tx: StepTx) -> tuple[Any, ...]:
        by_seq = tx.message(LOBBY, 2)
        by_platform = tx.message_by_platform_id(LOBBY, "201")
        return (
            None if by_seq is None else (by_seq.author_id, by_seq.spend_id),
            None if by_platform is None else by_platform.seq,
            tx.message(LOBBY, 3),
            [m.text for m in tx.said_by(LOBBY, "rin", 5)],
            [m.text for m in tx.recent_history(LOBBY, 5)],
        )

    assert await port.run(look, LOBBY) == (("rin", "s1"), 1, None, ["hello"], ["hi rin", "hello"])


async def test_the_images_shown_with_a_message_are_read_back_as_they_were_said(port: Port) -> None:
    await made(port, LOBBY)
    photo = ImageRef("https://cdn.example/a.png?ex=6a1b2c3d", "image/png", 48_213, 800, 600, 1_780_000_000.0)
    linked = ImageRef("https://example.org/dog.webp", "image/webp")

    def show(tx: StepTx) -> tuple[ImageRef, ...]:
        state = state_of(tx, LOBBY)
        tx.apply(rules.observe(state, ANN, "look", tx.now(), platform_message_id="301", images=(photo, linked)))
        found = tx.message_by_platform_id(LOBBY, "301")
        assert found is not None
        return found.images

    assert await port.run(show, LOBBY) == (photo, linked)
    [message] = await port.reads.history(LOBBY, 0, 10)
    assert message.images == (photo, linked)
    await port.run(say(LOBBY, "no picture"), LOBBY)
    assert [m.images for m in await port.reads.recent_history(LOBBY, 5)] == [(photo, linked), ()]


async def test_a_cleared_history_is_gone_its_platform_ids_free_and_seqs_go_on(port: Port) -> None:
    await made(port, LOBBY)
    for n in range(1, 4):
        await port.run(say(LOBBY, f"m{n}", platform_id=str(300 + n)), LOBBY)

    def clear(tx: StepTx) -> int:
        deleted = tx.delete_history(LOBBY)
        tx.replace_state(rules.clear_history(state_of(tx, LOBBY), tx.now()).state)
        return deleted

    assert await port.run(clear, LOBBY) == 3
    assert await port.reads.history(LOBBY, 0, 10) == []
    assert await port.reads.recent_platform_ids(LOBBY, 10) == []
    assert await port.run(lambda tx: tx.message_by_platform_id(LOBBY, "301"), LOBBY) is None
    assert await port.run(say(LOBBY, "again", platform_id="301"), LOBBY) == 4
    assert [(m.seq, m.text) for m in await port.reads.history(LOBBY, 0, 10)] == [(4, "again")]


async def test_a_history_cleared_in_a_step_that_fails_is_all_there(port: Port) -> None:
    await made(port, LOBBY)
    await port.run(say(LOBBY, "keep me", platform_id="401"), LOBBY)

    def clear_then_fail(tx: StepTx) -> None:
        tx.delete_history(LOBBY)
        raise ConflictError("changed my mind")

    with pytest.raises(ConflictError):
        await port.run(clear_then_fail, LOBBY)
    assert await texts(port, LOBBY) == ["keep me"]
    assert await port.run(lambda tx: tx.message_by_platform_id(LOBBY, "401") is not None, LOBBY)


# --- spends and refunds ---------------------------------------------------------------------------------------


async def test_a_claim_is_held_until_it_lapses_and_may_still_be_named(port: Port) -> None:
    await made(port, LOBBY)

    def claim(tx: StepTx) -> float:
        transition = rules.claim(state_of(tx, LOBBY), "rin", Tier.REMARK, tx.now(), claim_id="c1")
        tx.apply(transition)
        assert isinstance(transition.outcome, rules.ClaimGranted)
        return transition.outcome.spend.refund_at

    lapses = await port.run(claim, LOBBY)
    held = await port.reads.channel(LOBBY, port.clock())
    assert held is not None and [c.id for c in held.claims] == ["c1"] and rules.level(held, port.clock()) == 40
    port.clock.advance(lapses - port.clock() + 1)
    lapsed = await port.reads.channel(LOBBY, port.clock())
    assert lapsed is not None and lapsed.claims == () and rules.level(lapsed, port.clock()) == 100
    assert await port.writer.remembered(LOBBY) in (None, lapsed)

    def named(tx: StepTx) -> tuple[list[str], list[str]]:
        return [c.id for c in state_of(tx, LOBBY).claims], [c.id for c in state_of(tx, LOBBY, ("c1",)).claims]

    assert await port.run(named, LOBBY) == ([], ["c1"])


async def test_a_release_refunds_at_once_and_a_speech_holds_its_cost_until_it_recovers(port: Port) -> None:
    await made(port, LOBBY)

    def claim(persona: str, claim_id: str) -> Callable[[StepTx], None]:
        def step(tx: StepTx) -> None:
            tx.apply(rules.claim(state_of(tx, LOBBY), persona, Tier.AIZUCHI, tx.now(), claim_id=claim_id))

        return step

    def release(tx: StepTx) -> None:
        tx.apply(rules.release(state_of(tx, LOBBY, ("c1",)), "rin", "c1", tx.now()))

    def speak(tx: StepTx) -> None:
        theo = Author("theo", "Theo", AuthorKind.PERSONA)
        tx.apply(rules.speak(state_of(tx, LOBBY, ("c2",)), theo, "c2", "mm", tx.now()))

    await port.run(claim("rin", "c1"), LOBBY)
    await port.run(release, LOBBY)
    await port.run(claim("theo", "c2"), LOBBY)
    await port.run(speak, LOBBY)
    state = await port.reads.channel(LOBBY, port.clock())
    assert state is not None and state.claims == ()
    assert [(s.id, s.state) for s in state.spends] == [("c2", SpendState.SPOKEN)]
    assert rules.level(state, port.clock()) == 95
    port.clock.advance(6)  # an aizuchi recovers in 5 s
    later = await port.reads.channel(LOBBY, port.clock())
    assert later is not None and later.spends == () and rules.level(later, port.clock()) == 100


# --- notes, usage, personas ---------------------------------------------------------------------------------------


async def test_newer_notes_are_kept_and_older_ones_refused(port: Port) -> None:
    await made(port, LOBBY)
    for n in range(1, 4):
        await port.run(say(LOBBY, f"m{n}"), LOBBY)

    def note(persona: str, seq: int, topic: str) -> Callable[[StepTx], bool]:
        return lambda tx: tx.save_memory(Memory(LOBBY, persona, seq, {"topic": topic}, tx.now()))

    assert await port.run(note("rin", 2, "tea"), LOBBY)
    assert not await port.run(note("rin", 1, "older"), LOBBY)
    assert await port.run(note("rin", 2, "tea again"), LOBBY)  # the same seq replaces
    assert await port.run(note("mio", 3, "cats"), LOBBY)
    stored = await port.reads.memories(LOBBY)
    assert [(m.persona_id, m.seq, dict(m.state)) for m in stored] == [
        ("mio", 3, {"topic": "cats"}),
        ("rin", 2, {"topic": "tea again"}),
    ]
    assert [m.persona_id for m in await port.reads.memories(LOBBY, "rin")] == ["rin"]
    assert [m.persona_id for m in await port.run(lambda tx: tx.memories(LOBBY, "mio"), LOBBY)] == ["mio"]
    assert await port.run(lambda tx: tx.delete_memories(LOBBY, "rin"), LOBBY) == ["rin"]
    assert await port.run(lambda tx: tx.delete_memories(LOBBY), LOBBY) == ["mio"]
    assert await port.reads.memories(LOBBY) == []


async def test_usage_adds_up_per_persona_and_day(port: Port) -> None:
    await made(port, LOBBY, GARDEN)

    def used(persona: str, day: int, tokens: tuple[int, int, int, int]) -> Callable[[StepTx], None]:
        return lambda tx: tx.add_usage(LOBBY, persona, day=day, tokens=tokens)

    # (prompt, completion, read from the prompt cache, written to it): the cache's share kept apart.
    await port.together(
        used("rin", 10, (100, 20, 60, 0)), used("rin", 10, (50, 5, 0, 40)), used("mio", 10, (7, 3, 0, 0))
    )
    await port.run(used("rin", 11, (1, 1, 0, 0)))
    assert await port.reads.usage(LOBBY, 10) == {"rin": (150, 25, 2, 60, 40), "mio": (7, 3, 1, 0, 0)}
    assert await port.reads.usage(LOBBY, 11) == {"rin": (1, 1, 1, 0, 0)}
    assert await port.reads.usage(GARDEN, 10) == {}


async def test_a_persona_stored_again_replaces_what_was_stored(port: Port) -> None:
    await port.run(lambda tx: tx.save_persona(PersonaInfo("rin", "Rin", ("りん",), "#aa0000")))
    await port.run(lambda tx: tx.save_persona(PersonaInfo("mio", "Mio")))
    await port.run(lambda tx: tx.save_persona(PersonaInfo("rin", "Rin", (), None, "42", "no key")))
    assert await port.reads.persona_infos() == [
        PersonaInfo("mio", "Mio"),
        PersonaInfo("rin", "Rin", (), None, "42", "no key"),
    ]


async def test_settings_and_state_replaced_in_a_step_are_what_is_read(port: Port) -> None:
    await made(port, LOBBY)

    def pause(tx: StepTx) -> None:
        state = state_of(tx, LOBBY)
        tx.replace_state(
            ChannelState(LOBBY, ChannelSettings(enabled=False, capacity=70), history_since=state.history_since)
        )

    await port.run(pause, LOBBY)
    state = await port.reads.channel(LOBBY, port.clock())
    assert state is not None and (state.settings.enabled, state.settings.capacity) == (False, 70)
    assert await port.reads.channel_ids() == [(LOBBY, False, 0)]


# --- the MCP sessions' subscriptions -----------------------------------------------------------------------------


async def test_subscriptions_give_way_least_recently_used_first_per_member(port: Port) -> None:
    store = port.sessions
    assert await store.subscribe("s1", LOBBY, "aya", 1.0, keep=2) == []
    assert await store.subscribe("s1", GARDEN, "aya", 2.0, keep=2) == []
    assert await store.subscribe("s2", LOBBY, "aya", 3.0, keep=2) == []
    await store.touch("s1", 4.0)  # s1 used again: s2 is now the least recently used
    assert await store.subscribe("n1", LOBBY, "natsu", 5.0, keep=2) == []  # another member's cap is its own
    assert await store.subscribe("s3", LOBBY, "aya", 6.0, keep=2) == ["s2"]
    assert sorted(await store.channels_of("s1")) == [GARDEN, LOBBY]
    assert await store.channels_of("s2") == []
    await store.unsubscribe("s1", GARDEN)
    assert await store.channels_of("s1") == [LOBBY]
    await store.forget("s3")
    assert await store.channels_of("s3") == []


async def test_idle_subscriptions_expire(port: Port) -> None:
    store = port.sessions
    await store.subscribe("s1", LOBBY, "aya", 1.0, keep=5)
    await store.subscribe("s1", GARDEN, "aya", 1.0, keep=5)
    await store.subscribe("s2", LOBBY, "", 2.0, keep=5)
    await store.subscribe("s3", LOBBY, "aya", 3.0, keep=5)
    await store.touch("s2", 10.0)
    assert await store.expire(5.0) == 3  # s1's two and s3's one
    assert [await store.channels_of(sid) for sid in ("s1", "s2", "s3")] == [[], [LOBBY], []]
    assert await store.expire(5.0) == 0
