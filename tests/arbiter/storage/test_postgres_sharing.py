"""Several arbiters on one PostgreSQL database: each remembers the channels it wrote between transactions and must
never act on a state another arbiter has changed since (a write, or a refusal, is checked against the database when
it commits; a read shows another's change once its notification came); and a connection the server closed is
replaced, not used.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

from tests.support.arbiters import crowd, serve
from tests.support.eventually import eventually
from tests.support.postgres import SERVER

if TYPE_CHECKING:
    from tests.support.arbiters import Served
    from tests.support.clock import FakeClock

pytestmark = pytest.mark.postgres

CHANNEL = "shared"
PERSONAS = crowd(4)
COSTS = {"aizuchi": 5, "remark": 60, "long": 80}
SETTINGS: dict[str, Any] = {
    "capacity": 1_000,
    "idle_cap": 1_000,
    "tiers": {tier: {"cost": cost, "recovery_s": 60} for tier, cost in COSTS.items()},
}


def without_now(status: dict[str, Any]) -> dict[str, Any]:
    return {**status, "now": 0}


async def same_status(a: Served, b: Served) -> bool:
    return without_now(await a.api.status(CHANNEL)) == without_now(await b.api.status(CHANNEL))


async def test_a_read_shows_another_arbiters_change_once_it_is_heard_of(postgres_url: str, clock: FakeClock) -> None:
    async with (
        serve(postgres_url, clock=clock, extra_personas=PERSONAS) as a,
        serve(postgres_url, clock=clock, extra_personas=PERSONAS) as b,
    ):
        await a.api.create_channel(CHANNEL, **SETTINGS)
        await a.api.consume(CHANNEL, "p000", "remark", "from a")  # a remembers the channel at this level
        for round_ in range(5):
            # b changes it in every way a status shows: the pool, the streak, the tokens of the day.
            await b.api.consume(CHANNEL, "p001", "aizuchi", f"b {round_}")
            await b.api.usage(CHANNEL, "p001", 100, 20)
            await eventually(lambda: same_status(a, b), what=f"a hears of b's change {round_}")
        assert (await a.api.status(CHANNEL))["tokens_today"] == 600


async def test_an_arbiter_acts_on_what_another_changed_since_it_last_wrote(postgres_url: str, clock: FakeClock) -> None:
    async with (
        serve(postgres_url, clock=clock, extra_personas=PERSONAS) as a,
        serve(postgres_url, clock=clock, extra_personas=PERSONAS) as b,
    ):
        await a.api.create_channel(CHANNEL, **SETTINGS)
        first = await a.api.consume(CHANNEL, "p000", "remark", "from a")  # a now remembers the channel
        assert first["level"] == 940
        # b spends, then settles claims: new spends, and spends changed (a release refunds its claim at once; a
        # cheaper speech gives back the difference).
        await b.api.consume(CHANNEL, "p001", "long", "from b")
        released = await b.api.claim(CHANNEL, "p002", "long")
        await b.api.release(CHANNEL, "p002", released["claim"]["claim_id"])
        cheaper = await b.api.claim(CHANNEL, "p003", "long")
        spoken = await b.api.speak(CHANNEL, "p003", cheaper["claim"]["claim_id"], "b, briefly", tier="remark")
        assert spoken["level"] == 1_000 - 60 - 80 - 60

        # a writes on the channel as it is now, not as it remembered it: at once, whether or not it heard yet.
        last = await a.api.consume(CHANNEL, "p000", "remark", "a again")
        assert last["level"] == 1_000 - 60 - 80 - 60 - 60
        assert last["message"]["seq"] == 4

        # b reads its remembered state, and hears of a's commit a moment after it (a notification): a status read
        # catches up, it is not told at once.
        async def b_heard() -> dict[str, Any] | None:
            status: dict[str, Any] = await b.api.status(CHANNEL)
            return status if status["level"] == last["level"] else None

        status = await eventually(b_heard, what="b's status of the channel has a's last write")
        assert sum(refund["amount"] for refund in status["refunds"]) == 1_000 - last["level"]
        # And reads it as it is, once it heard of b's commits (a notification each, a moment after it).
        await eventually(lambda: same_status(a, b), what="a's status of the channel is b's once a heard of it")
        # The spends come back as their refunds fall due, whichever arbiter remembered them.
        clock.advance(61)
        assert (await a.api.status(CHANNEL))["level"] == (await b.api.status(CHANNEL))["level"] == 1_000


async def test_connections_the_server_closed_are_replaced_not_used(postgres_url: str, clock: FakeClock) -> None:
    async with serve(postgres_url, clock=clock, extra_personas=PERSONAS) as served:
        await served.api.create_channel(CHANNEL, **SETTINGS)
        await served.api.consume(CHANNEL, "p000", "remark", "before")
        # As a restart of the server would: every connection of the arbiter's is closed from the server's side.
        database = postgres_url.rsplit("/", 1)[1]
        admin = await asyncpg.connect(SERVER)
        try:
            closed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1", database
            )
        finally:
            await admin.close()
        assert closed >= 1
        await asyncio.sleep(0.2)  # the event loop reads the end of each connection
        after = await served.api.consume(CHANNEL, "p001", "remark", "after")
        assert after["granted"] and after["message"]["seq"] == 2
        assert [m["text"] for m in await served.api.history(CHANNEL)] == ["before", "after"]
