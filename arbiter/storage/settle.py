"""Settling a batch: running its steps until each has an outcome, failing only what must fail. One loop for both of
the writer's drivers (SQLite's thread, PostgreSQL's task), so a failed step is handled the same way on both.

:func:`settle` is pure: it says which transaction to run next (an :class:`Attempt`: these operations, optimistic or
locked) and is told how it went (a :class:`Committed`, or the error thrown into it); the drivers do the I/O, the
thread with :func:`drive`, the task with :func:`drive_async`. :func:`run_steps` runs a batch's steps inside either
transaction, keeping each step's changes only if it returns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from arbiter.core.errors import ArbiterError
from arbiter.storage.errors import StorageError
from arbiter.storage.transaction import NeedsLock

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence

    from arbiter.core.models import ChannelState
    from arbiter.events import Event
    from arbiter.storage.port import StepTx
    from arbiter.storage.remembered import Remembered
    from arbiter.storage.transaction import BatchTx

__all__ = (
    "Attempt",
    "Committed",
    "Notifier",
    "Op",
    "Outcomes",
    "Settling",
    "StepFailed",
    "drive",
    "drive_async",
    "run_steps",
    "settle",
)

_log = logging.getLogger(__name__)

R = TypeVar("R")
# A transaction's events, and the versions it saves its channels at, as the payloads of its notifications to the
# other processes (PostgreSQL).
Notifier: TypeAlias = "Callable[[Sequence[Event], Mapping[str, int]], list[str]]"


class Op(Generic[R]):
    """One step queued for the writer, and the future its caller awaits."""

    __slots__ = ("channel_ids", "future", "step")

    def __init__(self, step: Callable[[StepTx], R], future: asyncio.Future[R], channel_ids: Sequence[str]) -> None:
        self.step = step
        self.future = future
        self.channel_ids = channel_ids


Outcomes = list[tuple[Op[Any], Any]]


class StepFailed(Exception):
    """A step failed after it wrote rows at once: the transaction must roll back, and the step fail alone."""

    def __init__(self, index: int, error: ArbiterError) -> None:
        super().__init__(str(error))
        self.index = index
        self.error = error


@dataclass(frozen=True, slots=True)
class Attempt:
    """The next transaction to run: these operations, committed by one statement (``optimistic``) or locked."""

    ops: list[Op[Any]]
    optimistic: bool


@dataclass(frozen=True, slots=True)
class Committed:
    """A transaction that committed: each operation's outcome (its result, or its error), the events to publish,
    and the channels' states and versions as committed."""

    outcomes: list[Any]
    events: list[Event]
    states: dict[str, ChannelState]
    versions: dict[str, int]


Settled: TypeAlias = "tuple[Outcomes, list[Event]]"
Settling: TypeAlias = "Generator[Attempt, Committed, Settled]"


def settle(pending: list[Op[Any]], memory: Remembered, *, optimistic: bool) -> Settling:
    """Run ``pending`` to the end: yields each transaction to try, is sent what it committed (or has its error thrown
    in), and returns every operation's outcome with the events to publish. ``optimistic``: try the one-statement
    commit first (PostgreSQL); it falls back to the row locks when a step needs them or the statement is refused (a
    channel changed in another process meanwhile, newer notes are stored, a write the database would not take).

    A step that failed after writing rows (:class:`StepFailed`) fails alone; the others run again in a fresh
    transaction. A write the database refused is tried again in halves until only the operation at fault fails
    (:func:`one_write_refused`). The state remembered changes only with what committed."""
    failed: Outcomes = []
    optimistic_first = optimistic  # (so each half of a refused batch tries the one-statement commit first again)
    while pending:
        try:
            done = yield Attempt(list(pending), optimistic)  # (a copy: a failed step is taken out of pending)
        except NeedsLock:
            optimistic = False
            continue
        except StepFailed as error:
            failed.append((pending.pop(error.index), error.error))
            continue
        except (SQLAlchemyError, OSError) as error:
            if optimistic and isinstance(error, DBAPIError) and statement_refused(error):
                # The statement left nothing behind: the locked way reads what changed.
                _log.debug("a batch of %d operations runs again under the row locks: %s", len(pending), error.orig)
                optimistic = False
                continue
            if not optimistic and one_write_refused(error, len(pending)):
                _log.debug("the database refused a batch of %d operations; writing it in halves", len(pending))
                middle = len(pending) // 2
                first, first_events = yield from settle(pending[:middle], memory, optimistic=optimistic_first)
                second, second_events = yield from settle(pending[middle:], memory, optimistic=optimistic_first)
                return [*failed, *first, *second], [*first_events, *second_events]
            # A connection lost on the way may have committed or not: start over from the database.
            memory.clear()
            return [*failed, *database_failed(pending, error)], []
        # Remembered only once committed; a commit whose outcome never arrived left the version moved on.
        memory.remember(done.states, done.versions)
        return [*failed, *zip(pending, done.outcomes, strict=True)], done.events
    return failed, []


def drive(settling: Settling, run: Callable[[Attempt], Committed]) -> Settled:
    """Settle a batch on this thread, each transaction by ``run``."""
    try:
        attempt = next(settling)
        while True:
            try:
                done = run(attempt)
            except Exception as error:
                attempt = settling.throw(error)
            else:
                attempt = settling.send(done)
    except StopIteration as stop:
        settled: Settled = stop.value
        return settled


async def drive_async(settling: Settling, run: Callable[[Attempt], Awaitable[Committed]]) -> Settled:
    """Settle a batch on the event loop, each transaction by ``run``."""
    try:
        attempt = next(settling)
        while True:
            try:
                done = await run(attempt)
            except Exception as error:
                attempt = settling.throw(error)
            else:
                attempt = settling.send(done)
    except StopIteration as stop:
        settled: Settled = stop.value
        return settled


def run_steps(tx: BatchTx, ops: list[Op[Any]], notifier: Notifier | None) -> list[Any]:
    """The batch's channels loaded, its steps run and its writes finished (or gathered: optimistic). A step that
    raises leaves no trace: its changes are taken back from the batch (``StepJournal``), or, when it wrote rows at
    once, the transaction rolls back (:class:`StepFailed`). Either way its caller hears its error."""
    tx.prefetch(channel_id for op in ops for channel_id in op.channel_ids)
    journal = tx.journal
    outcomes: list[Any] = []
    for index, op in enumerate(ops):
        try:
            outcome = op.step(tx)
        except (SQLAlchemyError, OSError, NeedsLock):
            raise
        except Exception as error:
            failure = error if isinstance(error, ArbiterError) else _internal(error)
            if journal.wrote_rows:
                raise StepFailed(index, failure) from error
            journal.undo()
            outcomes.append(failure)
        else:
            journal.keep()
            outcomes.append(outcome)
    changed = tx.saved_versions()
    tx.finish(notifier(tx.events, changed) if notifier is not None and (tx.events or changed) else [])
    return outcomes


def _internal(error: Exception) -> StorageError:
    _log.error("operation failed inside the writer", exc_info=error)
    return StorageError(f"internal error: {type(error).__name__}")


def one_write_refused(error: BaseException, operations: int) -> bool:
    """Whether a batch that failed with ``error`` should be tried again in halves, to fail only its culprit.

    The database refusing what was written (a value it cannot store, a constraint, a trigger) is about one
    operation's data, and must not fail the other operations batched with it - other personas' turns, in other
    channels. Halving finds the culprit in about 2 log2(n) transactions; the operations before it are committed
    first, so each still sees the state the one before it left. A database that cannot be reached or is out of
    order (a lost connection, a locked or full file) fails every operation alike: trying again in halves would
    only fail more slowly."""
    if operations < 2 or isinstance(
        error, OSError | OperationalError | InterfaceError | DisconnectionError | PoolTimeout
    ):
        return False
    return not (isinstance(error, DBAPIError) and error.connection_invalidated)


def statement_refused(error: DBAPIError) -> bool:
    """Whether the server refused the statement (and so rolled it back whole): it says why with an SQLSTATE, and
    the connection is fine. Not so for a lost connection, when the commit may or may not have happened."""
    state = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
    return bool(state) and not str(state).startswith("08") and not error.connection_invalidated


def database_failed(pending: list[Op[Any]], error: BaseException) -> Outcomes:
    _log.error("database error; %d operations failed: %s", len(pending), error)
    storage_error = StorageError(f"database error: {type(error).__name__}")
    return [(op, storage_error) for op in pending]
