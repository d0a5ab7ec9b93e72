"""The PostgreSQL writer's batches: a batch smaller than the last is held for the rest of the clients, until it is as
large or the hold (a part of the last commit's time, bounded) is over; a lone request after a lone one is not held.

The holds here are long (an hour) where a test needs one not to end by time, and zero where it must not matter:
which way ``gather`` returned is then told by what is pending, never by a clock."""

from __future__ import annotations

import asyncio

from arbiter.storage.gathering import Gathering

HOUR = 3600.0


async def test_a_smaller_batch_is_held_until_it_is_as_large_as_the_last() -> None:
    gathering = Gathering(256, hold_share=1.0, max_hold_s=HOUR)
    gathering.committed(3, HOUR)  # three operations last time, and a slow commit
    gathering.add("a")
    held = asyncio.create_task(gathering.gather())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not held.done()  # one of three: held for the others
    gathering.add("b")
    for _ in range(5):
        await asyncio.sleep(0)
    assert not held.done()
    gathering.add("c")
    await asyncio.wait_for(held, timeout=60)  # the third came: no waiting for the hold to end
    assert gathering.take() == ["a", "b", "c"]


async def test_those_already_read_join_without_a_hold() -> None:
    gathering = Gathering(256, hold_share=1.0, max_hold_s=HOUR)
    gathering.committed(3, HOUR)

    async def arrive() -> None:
        await asyncio.sleep(0)  # read in the loop's next turn, as requests whose bytes are in are
        gathering.add("b")
        gathering.add("c")

    gathering.add("a")
    arriving = asyncio.create_task(arrive())
    await asyncio.wait_for(gathering.gather(), timeout=60)
    await arriving
    assert gathering.take() == ["a", "b", "c"]


async def test_a_lone_request_after_a_lone_one_is_not_held() -> None:
    gathering = Gathering(256, hold_share=1.0, max_hold_s=HOUR)
    gathering.committed(1, HOUR)
    gathering.add("a")
    await asyncio.wait_for(gathering.gather(), timeout=60)
    assert gathering.take() == ["a"]


async def test_the_first_batch_and_a_closing_writer_are_not_held() -> None:
    gathering = Gathering(256, hold_share=1.0, max_hold_s=HOUR)
    gathering.add("a")
    await asyncio.wait_for(gathering.gather(), timeout=60)  # nothing committed yet: nothing to wait for
    gathering.committed(5, HOUR)
    await asyncio.wait_for(gathering.gather(closing=True), timeout=60)
    assert gathering.take() == ["a"]


async def test_a_hold_that_ends_lets_the_batch_go_as_it_is() -> None:
    gathering = Gathering(256, hold_share=1.0, max_hold_s=0.001)
    gathering.committed(10, HOUR)  # a slow commit, but the hold is bounded
    gathering.add("a")
    await asyncio.wait_for(gathering.gather(), timeout=60)  # the others never come: it goes alone
    assert gathering.take() == ["a"]
    gathering.add("b")
    gathering.add("c")  # no hold is left waiting: what comes later is simply pending for the next batch
    assert gathering.pending == ["b", "c"]


async def test_the_default_hold_is_bounded_whatever_the_last_commit_took() -> None:
    gathering = Gathering(256)
    gathering.committed(10, HOUR)  # a part of an hour, were it not bounded (MAX_HOLD_S)
    gathering.add("a")
    await asyncio.wait_for(gathering.gather(), timeout=60)
    assert gathering.take() == ["a"]


async def test_a_batch_is_at_most_max_batch() -> None:
    gathering = Gathering(2, hold_share=1.0, max_hold_s=HOUR)
    gathering.committed(5, HOUR)  # more than a batch may take: wanting them would hold for ever
    for op in "abc":
        gathering.add(op)
    await asyncio.wait_for(gathering.gather(), timeout=60)
    assert gathering.take() == ["a", "b"]
    assert gathering.pending == ["c"]
