"""The settle loop both of the writer's drivers share (``arbiter.storage.settle``), driven here by hand: which
transaction it asks for next, given how the last one went. It is pure (the drivers do the I/O), so each way a
transaction can fail is played exactly; the same failures on real databases are in test_write_failures.py,
test_failed_steps.py and test_one_statement_commit.py."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from arbiter.core.errors import ConflictError
from arbiter.core.models import ChannelSettings, ChannelState
from arbiter.storage.errors import StorageError
from arbiter.storage.remembered import Remembered
from arbiter.storage.settle import Attempt, Committed, Op, StepFailed, drive, settle
from arbiter.storage.transaction import NeedsLock

if TYPE_CHECKING:
    from collections.abc import Callable

    from arbiter.storage.settle import Outcomes


class _Refused(Exception):
    sqlstate = "40001"  # what the one-statement commit raises when a channel changed elsewhere


def refused_statement() -> DBAPIError:
    return DBAPIError("commit", (), _Refused("changed elsewhere"))


def state(channel_id: str) -> ChannelState:
    return ChannelState(channel_id, ChannelSettings())


async def ops(count: int) -> list[Op[Any]]:
    loop = asyncio.get_running_loop()
    return [Op(lambda _tx: None, loop.create_future(), (f"room-{n}",)) for n in range(count)]


def committed(attempt: Attempt) -> Committed:
    """Every operation of the attempt succeeded: its outcome is its index in the batch's channels."""
    channels = [op.channel_ids[0] for op in attempt.ops]
    return Committed(
        outcomes=[int(channel.removeprefix("room-")) for channel in channels],
        events=[],
        states={channel: state(channel) for channel in channels},
        versions=dict.fromkeys(channels, 1),
    )


def played(
    pending: list[Op[Any]], memory: Remembered, answer: Callable[[Attempt], Committed], *, optimistic: bool
) -> tuple[list[Attempt], Outcomes]:
    """Settle ``pending``, each attempt answered by ``answer`` (which raises to fail it): the attempts, the outcomes."""
    attempts: list[Attempt] = []

    def run(attempt: Attempt) -> Committed:
        attempts.append(attempt)
        return answer(attempt)

    outcomes, _ = drive(settle(list(pending), memory, optimistic=optimistic), run)
    return attempts, outcomes


def by_index(outcomes: Outcomes, pending: list[Op[Any]]) -> list[Any]:
    found = {id(op): outcome for op, outcome in outcomes}
    return [found[id(op)] for op in pending]


async def test_a_refused_one_statement_commit_runs_again_under_the_row_locks() -> None:
    pending = await ops(3)
    memory = Remembered(owned=False)

    def answer(attempt: Attempt) -> Committed:
        if attempt.optimistic:
            raise refused_statement()
        return committed(attempt)

    attempts, outcomes = played(pending, memory, answer, optimistic=True)
    assert [(a.optimistic, len(a.ops)) for a in attempts] == [(True, 3), (False, 3)]
    assert by_index(outcomes, pending) == [0, 1, 2]
    assert memory.versions == {"room-0": 1, "room-1": 1, "room-2": 1}  # what committed, and only that


async def test_a_step_that_needs_the_locks_sends_the_batch_there() -> None:
    pending = await ops(2)

    def answer(attempt: Attempt) -> Committed:
        if attempt.optimistic:
            raise NeedsLock
        return committed(attempt)

    attempts, outcomes = played(pending, Remembered(owned=False), answer, optimistic=True)
    assert [a.optimistic for a in attempts] == [True, False]
    assert by_index(outcomes, pending) == [0, 1]


@pytest.mark.parametrize("optimistic", [True, False])
async def test_a_step_that_failed_after_writing_rows_fails_alone_on_either_way(optimistic: bool) -> None:
    """The same on both drivers: the step fails with its own error, the others run again without it, and nothing
    is forgotten (the memory changes only with what committed)."""
    pending = await ops(3)
    memory = Remembered(owned=True)
    memory.remember({"elsewhere": state("elsewhere")}, {})
    error = ConflictError("no", code="test")

    def answer(attempt: Attempt) -> Committed:
        if pending[1] in attempt.ops:
            raise StepFailed(attempt.ops.index(pending[1]), error)
        return committed(attempt)

    attempts, outcomes = played(pending, memory, answer, optimistic=optimistic)
    assert [len(a.ops) for a in attempts] == [3, 2]
    assert by_index(outcomes, pending) == [0, error, 2]
    assert set(memory.states) == {"elsewhere", "room-0", "room-2"}


async def test_a_write_the_database_refuses_is_tried_in_halves_until_its_culprit_fails_alone() -> None:
    pending = await ops(4)
    culprit = pending[2]

    def answer(attempt: Attempt) -> Committed:
        if culprit in attempt.ops:
            raise IntegrityError("insert", (), Exception("refused"))
        return committed(attempt)

    attempts, outcomes = played(pending, Remembered(owned=True), answer, optimistic=False)
    assert [[op.channel_ids[0] for op in a.ops] for a in attempts] == [
        ["room-0", "room-1", "room-2", "room-3"],
        ["room-0", "room-1"],
        ["room-2", "room-3"],
        ["room-2"],
        ["room-3"],
    ]
    results = by_index(outcomes, pending)
    assert results[:2] == [0, 1] and results[3] == 3
    assert isinstance(results[2], StorageError)


async def test_a_database_out_of_order_fails_the_batch_and_forgets_what_was_remembered() -> None:
    pending = await ops(3)
    memory = Remembered(owned=True)
    memory.remember({"room-0": state("room-0")}, {})

    def answer(attempt: Attempt) -> Committed:
        raise OperationalError("begin", (), Exception("disk I/O error"))

    attempts, outcomes = played(pending, memory, answer, optimistic=False)
    assert len(attempts) == 1  # halving would only fail more slowly
    assert all(isinstance(outcome, StorageError) for _, outcome in outcomes)
    assert memory.states == {}
