"""A database that refuses a write: the operation fails with a clear 503, nothing is half-written, and the
writer carries on once the database accepts writes again.

The refusal is real: a trigger in the database aborts every insert into the history, so the failure comes
from the driver in the middle of a batch, as a full disk or a broken file would.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.support.arbiters import serve

if TYPE_CHECKING:
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
