"""A step that fails in a batch fails alone and leaves no trace, on SQLite and on PostgreSQL alike: the batch's other
steps commit, the caller hears the step's own error, and nothing the failed step did before it raised - a change
applied, a row written, an event emitted - is in the database, in the state the writer remembers, or among the
events it publishes.

The steps here are the writer's own callers' kind (synchronous functions of the transaction) written to fail on
purpose after they have changed something, which no service step means to do: the writer must not depend on it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import pytest

from arbiter import contract as wire
from arbiter.core import rules
from arbiter.core.errors import ArbiterError, ConflictError
from arbiter.core.models import AuthorKind, ChannelSettings, ChannelState, Memory
from arbiter.core.rules import Author
from arbiter.storage import repository as repo
from arbiter.storage.database import Database
from arbiter.storage.errors import StorageError
from arbiter.storage.migrate import migrate
from arbiter.storage.writer import BatchWriter
from tests.support.writer_hold import writer_waiting

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

    from arbiter.events import Event
    from arbiter.storage.writer import WriteTx
    from tests.support.clock import FakeClock

GOOD, BAD = "good-room", "bad-room"
ANN = Author("ann", "Ann", AuthorKind.HUMAN)
# Each line's event, told apart by a mark of its own.
MARKS = {"first": 1, "kept": 2, "before": 3, "failed": 4, "after": 5, "later": 6, "next": 7}


class Writer:
    """A batch writer on a fresh database, with what it published."""

    def __init__(self, database: Database, writer: BatchWriter, published: list[Event]) -> None:
        self.database = database
        self.writer = writer
        self.published = published
        self.ran_in: dict[str, list[object]] = {}  # the transactions each step ran in (a batch may run again)

    def step(self, name: str, body: Callable[[WriteTx], Any]) -> Callable[[WriteTx], Any]:
        def run(tx: WriteTx) -> Any:
            self.ran_in.setdefault(name, []).append(tx)
            return body(tx)

        return run

    def batched_together(self, *names: str) -> bool:
        """Whether these steps ran in one transaction at least once."""
        common = {id(tx) for tx in self.ran_in[names[0]]}
        for name in names[1:]:
            common &= {id(tx) for tx in self.ran_in[name]}
        return bool(common)

    async def history(self, channel_id: str) -> list[str]:
        return [message.text for message in await self.database.read(repo.history, channel_id, 0, 100)]


@contextlib.asynccontextmanager
async def writer_on(database_url: str, clock: FakeClock) -> AsyncIterator[Writer]:
    database = Database.open(database_url)
    try:
        await migrate(database)
        published: list[Event] = []
        writer = BatchWriter(database, clock, published.extend, owns_database=database.is_sqlite)
        await writer.start()
        try:
            yield Writer(database, writer, published)
        finally:
            await writer.close()
    finally:
        await database.dispose()


def say(tx: WriteTx, channel_id: str, text: str) -> int:
    """Record a person's message, as the service does, with its events; its seq."""
    state = tx.channel(channel_id)
    assert state is not None
    transition = rules.observe(state, ANN, text, tx.now())
    tx.apply(transition)
    tx.emit(wire.ClearedEvent(channel_id=channel_id, last_seq=-MARKS[text]))  # an event to look for
    return transition.state.last_seq


def create(tx: WriteTx, channel_id: str) -> None:
    tx.create_channel(ChannelState(channel_id, ChannelSettings(), history_since=tx.now()))


async def batch(
    served: Writer, database_url: str, steps: Sequence[tuple[Callable[[WriteTx], Any], Sequence[str]]]
) -> list[Any]:
    """Run ``steps`` as one batch (the first of them, which takes the writer to the lock, on its own before it):
    their outcomes, an exception for a step that raised."""
    writer = served.writer
    async with writer_waiting(database_url):
        first = asyncio.ensure_future(writer.run(served.step("first", lambda tx: say(tx, GOOD, "first")), (GOOD,)))
        await asyncio.sleep(0.3)
        pending = [asyncio.ensure_future(writer.run(step, channels)) for step, channels in steps]
        await asyncio.sleep(0.3)
    await first
    return list(await asyncio.gather(*pending, return_exceptions=True))


async def check_no_trace(served: Writer, outcomes: list[Any], expected_error: type[ArbiterError]) -> None:
    before, failed, after = outcomes
    assert isinstance(failed, expected_error), failed
    assert (before, after) == (2, 3)  # the failed step's seq is not taken
    # One batch: the failed step ran beside the step before it, which ran beside the one after it (a batch in which a
    # step failed after writing rows runs again without it).
    assert served.batched_together("before", "bad")
    assert served.batched_together("before", "after")
    assert await served.history(GOOD) == ["first"]
    assert await served.history(BAD) == ["kept", "before", "after"]
    for channel_id, last_seq in ((GOOD, 1), (BAD, 3)):
        remembered = await served.writer.remembered(channel_id)
        if remembered is not None:  # (PostgreSQL: remembered while no other process changed it)
            assert remembered.last_seq == last_seq
        stored = await served.database.read(repo.load_channel, channel_id, 0.0)
        assert stored is not None and stored.last_seq == last_seq
    assert "failed" not in marked(served)
    assert {"before", "after"} <= set(marked(served))


async def fails_after_it_changed(
    database_url: str,
    clock: FakeClock,
    bad: Callable[[WriteTx], Any],
    expected_error: type[ArbiterError],
    also: Callable[[Writer], Awaitable[None]] | None = None,
) -> None:
    """``bad`` runs in a batch between two steps on its channel, and fails; ``also`` checks more."""
    async with writer_on(database_url, clock) as served:
        for channel_id in (GOOD, BAD):
            await served.writer.run(lambda tx, cid=channel_id: create(tx, cid), (channel_id,))
        await served.writer.run(lambda tx: say(tx, BAD, "kept"), (BAD,))
        outcomes = await batch(
            served,
            database_url,
            [
                (served.step("before", lambda tx: say(tx, BAD, "before")), (BAD,)),
                (served.step("bad", bad), (BAD,)),
                (served.step("after", lambda tx: say(tx, BAD, "after")), (BAD,)),
            ],
        )
        await check_no_trace(served, outcomes, expected_error)
        if also is not None:
            await also(served)
        # The writer carries on from what was committed.
        assert await served.writer.run(lambda tx: say(tx, BAD, "later"), (BAD,)) == 4
        assert await served.history(BAD) == ["kept", "before", "after", "later"]


def marked(served: Writer) -> list[str]:
    """The lines whose events were published."""
    lines = {-mark: text for text, mark in MARKS.items()}
    return [lines[event.last_seq] for event in served.published if isinstance(event, wire.ClearedEvent)]


def conflict(_tx: WriteTx) -> None:
    raise ConflictError("changed its mind", code="test")


async def test_a_step_that_raises_after_applying_leaves_no_trace(database_url: str, clock: FakeClock) -> None:
    def bad(tx: WriteTx) -> None:
        say(tx, BAD, "failed")
        conflict(tx)

    await fails_after_it_changed(database_url, clock, bad, ConflictError)


async def test_a_step_that_breaks_after_applying_fails_alone(database_url: str, clock: FakeClock) -> None:
    """An unexpected error (a bug) after a change: the caller hears of an internal error, the rest commits."""

    def bad(tx: WriteTx) -> None:
        say(tx, BAD, "failed")
        raise RuntimeError("a bug")

    await fails_after_it_changed(database_url, clock, bad, StorageError)


async def test_a_step_that_raises_after_writing_rows_leaves_no_trace(database_url: str, clock: FakeClock) -> None:
    """Rows written at once (the history deleted, notes stored, tokens counted) are taken back too."""

    def bad(tx: WriteTx) -> None:
        say(tx, BAD, "failed")
        tx.add_usage(BAD, "hana", day=1, tokens=(10, 20, 0, 0))
        tx.save_memory(Memory(BAD, "hana", 1, {"topic": "tea"}, tx.now()))
        tx.delete_history(BAD)
        conflict(tx)

    async def nothing_stored(served: Writer) -> None:
        assert await served.database.read(repo.load_memories, BAD) == []
        assert await served.database.read(repo.usage, BAD, 1) == {}

    await fails_after_it_changed(database_url, clock, bad, ConflictError, nothing_stored)


@pytest.mark.parametrize("error", [ConflictError("no", code="test"), RuntimeError("a bug")])
async def test_a_failed_step_in_a_batch_of_one_leaves_no_trace(
    database_url: str, clock: FakeClock, error: Exception
) -> None:
    async with writer_on(database_url, clock) as served:
        await served.writer.run(lambda tx: create(tx, BAD), (BAD,))

        def bad(tx: WriteTx) -> None:
            say(tx, BAD, "failed")
            raise error

        with pytest.raises(ArbiterError):
            await served.writer.run(bad, (BAD,))
        assert await served.history(BAD) == []
        assert await served.writer.run(lambda tx: say(tx, BAD, "next"), (BAD,)) == 1
        assert "failed" not in marked(served)


async def test_notes_and_tokens_of_a_failed_step_are_not_counted_with_the_next_ones(
    database_url: str, clock: FakeClock
) -> None:
    """Notes and tokens a step gathered for the batch's commit (PostgreSQL's one statement) go with it when it fails:
    the next step's notes for the same persona are stored, and only its tokens counted."""

    def notes(seq: int, topic: str) -> Callable[[WriteTx], bool]:
        def step(tx: WriteTx) -> bool:
            say(tx, BAD, topic)
            tx.add_usage(BAD, "hana", day=1, tokens=(seq, seq, 0, 0))
            return tx.save_memory(Memory(BAD, "hana", seq, {"topic": topic}, tx.now()))

        return step

    def bad(tx: WriteTx) -> None:
        notes(1, "failed")(tx)
        conflict(tx)

    async with writer_on(database_url, clock) as served:
        await served.writer.run(lambda tx: create(tx, BAD), (BAD,))
        await served.writer.run(lambda tx: create(tx, GOOD), (GOOD,))
        before, failed, after = await batch(
            served,
            database_url,
            [
                (served.step("before", lambda tx: say(tx, BAD, "before")), (BAD,)),
                (served.step("bad", bad), (BAD,)),
                (served.step("after", notes(1, "after")), (BAD,)),
            ],
        )
        assert (before, after) == (1, True)
        assert isinstance(failed, ConflictError)
        assert served.batched_together("before", "bad") and served.batched_together("before", "after")
        stored = await served.database.read(repo.load_memories, BAD)
        assert [(memory.seq, memory.state) for memory in stored] == [(1, {"topic": "after"})]
        assert await served.database.read(repo.usage, BAD, 1) == {"hana": (1, 1, 1, 0, 0)}
        assert await served.history(BAD) == ["before", "after"]
        assert "failed" not in marked(served)
