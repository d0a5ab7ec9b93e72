"""A database that refuses a write: the operation fails with a clear 503, nothing is half-written, the other
operations written in the same batch are not failed with it, and the writer carries on once the database accepts
writes again.

The refusal is real: a trigger in the database aborts every insert into the history, so the failure comes
from the driver in the middle of a batch, as a full disk or a broken file would.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from arbiter.storage.errors import StorageError
from tests.support.arbiters import serve
from tests.support.writer_hold import writer_waiting

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from tests.support.arbiters import Served
    from tests.support.clock import FakeClock

CHANNEL = "tea-house"

_REFUSE = {
    "sqlite": [
        "CREATE TRIGGER refuse_messages BEFORE INSERT ON messages BEGIN SELECT RAISE(ABORT, 'disk on fire'); END",
    ],
    "postgresql": [
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk on fire'; END $$",
        "CREATE TRIGGER refuse_messages BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION refuse()",
    ],
}
_ALLOW = {"sqlite": ["DROP TRIGGER refuse_messages"], "postgresql": ["DROP TRIGGER refuse_messages ON messages"]}


async def run_sql(database_url: str, statements: list[str]) -> None:
    """Run statements on the arbiter's database behind its back, as an operator (or a failing disk) would."""
    if database_url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(database_url.removeprefix("sqlite:///"), timeout=5)) as conn:
            for statement in statements:
                conn.execute(statement)
            conn.commit()
        return
    engine = create_async_engine(database_url)
    try:
        async with engine.begin() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


def dialect(database_url: str) -> str:
    return "sqlite" if database_url.startswith("sqlite") else "postgresql"


async def test_refused_write_fails_cleanly_and_the_writer_carries_on(database_url: str, clock: FakeClock) -> None:
    async with serve(database_url, clock=clock) as served:
        api = served.api
        await api.create_channel(CHANNEL, capacity=100)
        await api.say(CHANNEL, "ann", "hello, anyone here?")
        before = (await api.status(CHANNEL), await api.history(CHANNEL))

        await run_sql(database_url, _REFUSE[dialect(database_url)])
        status, body = await api.request(
            "POST", f"/v1/channels/{CHANNEL}/consume", "hana", {"tier": "aizuchi", "text": "うんうん"}
        )
        assert status == 503, body
        assert "database error" in body["error"]["message"]
        # Nothing of the refused batch stayed: no message, no spend, no counter moved.
        assert (await api.status(CHANNEL), await api.history(CHANNEL)) == before

        await run_sql(database_url, _ALLOW[dialect(database_url)])
        granted = await api.consume(CHANNEL, "hana", "aizuchi", "うんうん")
        history = await api.history(CHANNEL)
        assert [message["text"] for message in history] == ["hello, anyone here?", "うんうん"]
        assert granted["granted"]
        assert history[-1] == granted["message"]
        assert (await api.status(CHANNEL))["level"] == before[0]["level"] - granted["message"]["cost"]


# --- one refused write in a batch fails only its own request --------------------------------------------

POISON = "this one the database refuses"
_REFUSE_POISON = {
    "sqlite": [
        f"CREATE TRIGGER refuse_poison BEFORE INSERT ON messages WHEN NEW.text = '{POISON}' "
        "BEGIN SELECT RAISE(ABORT, 'poisoned'); END",
    ],
    "postgresql": [
        "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF NEW.text = '{POISON}' THEN RAISE EXCEPTION 'poisoned'; END IF; RETURN NEW; END $$",
        "CREATE TRIGGER refuse_poison BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION refuse_poison()",
    ],
}
ROOMS = [f"room-{n}" for n in range(5)]


async def requests_batched_with(served: Served, database_url: str, poisoned: Awaitable[Any]) -> list[Any]:
    """Good requests in several channels (personas' turns, a person's message, one beside the poisoned request
    in its own channel) sent with ``poisoned`` while the writer waits, so that all are one batch: their answers,
    then the poisoned request's outcome (its exception, if it raised one)."""
    api = served.api
    async with writer_waiting(database_url):
        # The first write takes the writer to the lock; the rest queue up behind it, for the next batch.
        first = asyncio.ensure_future(api.say(ROOMS[0], "ann", "is anyone here?"))
        await asyncio.sleep(0.3)
        good = [
            api.request("POST", f"/v1/channels/{ROOMS[1]}/consume", "hana", {"tier": "remark", "text": "Hi there!"}),
            api.request("POST", f"/v1/channels/{ROOMS[2]}/consume", "kai", {"tier": "remark", "text": "Evening."}),
            api.request("POST", f"/v1/channels/{ROOMS[3]}/claims", "mio", {"tier": "long"}),
            api.request(
                "POST",
                f"/v1/channels/{ROOMS[4]}/messages",
                "admin",
                {"author_id": "bo", "author_name": "Bo", "text": "before the poison"},
            ),
        ]
        pending = [asyncio.ensure_future(call) for call in [*good, poisoned]]
        await asyncio.sleep(0.3)
    await first
    outcomes = await asyncio.gather(*pending, return_exceptions=True)
    return list(outcomes)


async def check_only_the_poisoned_failed(served: Served, answers: list[Any]) -> None:
    for status, body in answers:
        assert status == 200, body
        assert body.get("granted", True), body
    histories = {room: [m["text"] for m in await served.api.history(room)] for room in ROOMS}
    assert histories == {
        ROOMS[0]: ["is anyone here?"],
        ROOMS[1]: ["Hi there!"],
        ROOMS[2]: ["Evening."],
        ROOMS[3]: [],
        ROOMS[4]: ["before the poison"],
    }
    assert (await served.api.status(ROOMS[3], "mio"))["claim"]["tier"] == "long"


async def test_a_write_the_database_refuses_fails_only_its_own_request(database_url: str, clock: FakeClock) -> None:
    async with serve(database_url, clock=clock) as served:
        for room in ROOMS:
            await served.api.create_channel(room)
        await run_sql(database_url, _REFUSE_POISON[dialect(database_url)])
        body = {"author_id": "eve", "author_name": "Eve", "text": POISON}
        poisoned = served.api.request("POST", f"/v1/channels/{ROOMS[4]}/messages", "admin", body)

        *answers, (status, error) = await requests_batched_with(served, database_url, poisoned)

        assert status == 503, error
        assert "database error" in error["error"]["message"]
        await check_only_the_poisoned_failed(served, answers)


@pytest.mark.postgres
async def test_a_nul_that_reached_postgresql_fails_only_its_own_request(postgres_url: str, clock: FakeClock) -> None:
    """The wire models refuse a NUL (tests/arbiter/api/test_hostile_input.py); text that reaches the service by
    another way (the Discord bot records what it reads) still cannot fail the other requests batched with it."""
    async with serve(postgres_url, clock=clock) as served:
        for room in ROOMS:
            await served.api.create_channel(room)
        poisoned = served.arbiter.service.record_message(ROOMS[4], author_id="eve", author_name="Eve", text="a\0b")

        *answers, error = await requests_batched_with(served, postgres_url, poisoned)

        assert isinstance(error, StorageError), error
        await check_only_the_poisoned_failed(served, answers)
