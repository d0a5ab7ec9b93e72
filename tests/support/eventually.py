"""Waiting in a test until something holds: the one poll-until helper of the suite.

A test waits for the condition it needs, never for a fixed time: a fixed sleep is either too short on a loaded
machine (the test fails for nothing) or too long on a quiet one (the suite is slow). The deadline here only ends a
wait that has already failed, so it is generous (``PATIENCE_S``): a passing test returns as soon as the condition
holds, however long the deadline. When it fails, the message names what was awaited and the last value seen.

    await eventually(lambda: len(room.messages) >= 2, what="two messages in the room")
    said = await eventually(lambda: [m for m in history() if m.author == "rin"], what="rin's answer")
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ("PATIENCE_S", "eventually", "eventually_blocking")

T = TypeVar("T")

# Long enough for a step that takes milliseconds on a quiet machine to finish on one loaded many times over (a
# full suite beside a CPU hog on two cores); short enough that a wait that will never end fails within the run.
PATIENCE_S = 30.0

_SHOWN = 400  # characters of the last value seen in a failure's message


def _failure(what: object, within: float, last: object) -> AssertionError:
    shown = repr(last)
    if len(shown) > _SHOWN:
        shown = f"{shown[:_SHOWN]}..."
    return AssertionError(f"not within {within}s: {what}; last seen: {shown}")


def _named(condition: object, what: str | None) -> object:
    return what or getattr(condition, "__name__", condition)


async def eventually(
    condition: Callable[[], T | Awaitable[T]],
    *,
    within: float = PATIENCE_S,
    what: str | None = None,
    every: float = 0.005,
    wake: Callable[[], Awaitable[object]] | None = None,
) -> T:
    """Call ``condition`` (sync or async) until it returns something truthy, and return that; fail after
    ``within`` seconds. Checked every ``every`` seconds, and at once whenever ``wake()`` (a signal of change, say a
    server's "something happened" event) completes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result  # type: ignore[return-value]  # the awaited value of an async condition
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise _failure(_named(condition, what), within, result)
        if wake is None:
            await asyncio.sleep(min(every, remaining))
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake(), min(every, remaining))


def eventually_blocking(
    condition: Callable[[], T], *, within: float = PATIENCE_S, what: str | None = None, every: float = 0.02
) -> T:
    """``eventually`` for tests that are plain functions (no event loop): blocks the thread between checks."""
    deadline = time.monotonic() + within
    while True:
        result = condition()
        if result:
            return result
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _failure(_named(condition, what), within, result)
        time.sleep(min(every, remaining))
