"""How long the PostgreSQL batch writer lets a batch gather before it commits it.

A commit costs the arbiter and the server about the same for one operation as for ten (measured: ~370 µs of the
arbiter's CPU and ~190 µs of the server's per commit, ~60 µs and ~40 µs more per operation), so the fewer commits a
request shares, the more it costs. The writer commits one batch at a time and takes whatever came in meanwhile, so
under steady load its clients split into groups that take turns: those answered by one commit come back while the
next commits, and wait for the one after. The fewer clients a process serves (two processes sharing the load each
serve half), the smaller the groups, and the more commits per request.

So when a batch is smaller than the last one (a sign that the rest of the clients are on their way back), the writer
holds it a moment for them: until it is as large as the last one, or for a part of the time the last commit took,
whichever comes first (and never longer than ``MAX_HOLD_S``). When commits are slow, they are what costs, and waiting
a fraction of one merges the groups for a fraction of the latency; when they are quick the hold is too; a lone
request after a lone request is never held. Nothing is acknowledged before its commit either way: only when the
commit starts changes.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ("HOLD_SHARE", "MAX_HOLD_S", "Gathering")

# The part of the last commit's round trip a smaller batch may wait for more operations, and the most it may wait.
HOLD_SHARE = 0.5
MAX_HOLD_S = 0.005


class Gathering:
    """The batch writer's pending operations (``pending``, which it takes its batches from) and when to take them."""

    def __init__(self, max_batch: int, *, hold_share: float = HOLD_SHARE, max_hold_s: float = MAX_HOLD_S) -> None:
        self.pending: list[Any] = []
        self._max_batch = max_batch
        self._hold_share = hold_share
        self._max_hold_s = max_hold_s
        self._last_size = 0  # operations in the last batch committed
        self._last_commit_s = 0.0  # how long its commit took
        self._full: asyncio.Future[None] | None = None  # set once a held batch reaches ``_wanted``
        self._wanted = 0

    def add(self, op: Any) -> None:
        self.pending.append(op)
        full = self._full
        if full is not None and len(self.pending) >= self._wanted and not full.done():
            full.set_result(None)

    async def gather(self, *, closing: bool = False) -> None:
        """Return once the batch should start: when the operations that arrived with the first have joined it (their
        bytes already read), and, when it is smaller than the last, once the rest came or the hold is over."""
        # A commit costs about the same for one operation as for ten: let the requests already read join in.
        waiting = len(self.pending)
        await asyncio.sleep(0)
        while waiting < len(self.pending) < self._max_batch:
            waiting = len(self.pending)
            await asyncio.sleep(0)
        wanted = min(self._last_size, self._max_batch)
        hold = min(self._max_hold_s, self._hold_share * self._last_commit_s)
        if closing or len(self.pending) >= wanted or hold <= 0:
            return
        loop = asyncio.get_running_loop()
        full: asyncio.Future[None] = loop.create_future()
        self._full, self._wanted = full, wanted
        timer = loop.call_later(hold, _done, full)
        try:
            await full
        finally:
            timer.cancel()
            self._full = None

    def take(self) -> list[Any]:
        """The next batch (at most ``max_batch`` of the pending operations)."""
        batch = self.pending[: self._max_batch]
        del self.pending[: self._max_batch]
        return batch

    def committed(self, size: int, seconds: float) -> None:
        """A batch of ``size`` operations was settled, its commit taking ``seconds`` (all its attempts)."""
        self._last_size = size
        self._last_commit_s = seconds


def _done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
