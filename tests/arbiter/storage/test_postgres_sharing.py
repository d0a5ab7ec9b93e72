"""Several arbiters on one PostgreSQL database: each remembers the channels it wrote between transactions and must
never act on a state another arbiter has changed since (a write, or a refusal, is checked against the database when
it commits; a read shows every change acknowledged before it, another's too, having heard its notification); and a
connection the server closed is replaced, not used.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import asyncpg
import pytest

from tests.support.arbiters import Api, arbiter_process, crowd, serve
from tests.support.eventually import eventually
from tests.support.postgres import SERVER

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

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

        # b reads its remembered state once it has heard of a's commit (a notification, a moment after it): a
        # status read waits for that (see the test below).
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


async def test_a_status_read_on_one_process_sees_a_write_another_process_just_acknowledged(
    postgres_url: str, tmp_path: Path
) -> None:
    """Two real arbiter processes. b remembers the channel as it last wrote it; a writes it and answers. A status
    read on b must show a's write even when a's notification has not reached b yet: here it cannot, b's listening
    connection being held up at the server (its backend stopped), as a slow link to the database would. The read
    waits until b has heard every notification committed before it, and then shows the write."""
    async with (
        arbiter_process(postgres_url, tmp_path, name="a", personas=PERSONAS) as a,
        arbiter_process(postgres_url, tmp_path, name="b", personas=PERSONAS) as b,
        aiohttp.ClientSession() as session,
    ):
        via_a, via_b = Api(session, PERSONAS, a.url), Api(session, PERSONAS, b.url)
        await via_a.create_channel(CHANNEL, capacity=100_000, idle_cap=1_000)
        await via_b.say(CHANNEL, "yuki", "a question?")  # b writes: it remembers the channel as it is
        assert (await via_b.status(CHANNEL))["tokens_today"] == 0
        listener = await _listening_backend(postgres_url, b.process.pid)
        with _stopped(listener.pid):
            written = await via_a.usage(CHANNEL, "p000", 100, 20)  # a writes, and has answered
            read = asyncio.create_task(via_b.status(CHANNEL))
            # The read either answered at once (from b's memory) or waits on b's listening connection, whose
            # backend cannot answer while stopped: what b sent it waits unread.
            await eventually(lambda: read.done() or listener.unread() > 0, what="b to answer or to wait")
        status = await read
        assert status["tokens_today"] == written["tokens_today"] == 120


@dataclass(frozen=True)
class Backend:
    """A PostgreSQL backend process serving one client connection, on this machine."""

    pid: int
    client_port: int

    def unread(self) -> int:
        """Bytes its client sent that it has not read (the receive queue of its end of the connection)."""
        for row in _tcp_sockets():
            if row.local_port == 5432 and row.remote_port == self.client_port:
                return row.rx_queue
        return 0


@dataclass(frozen=True)
class _Socket:
    local_port: int
    remote_port: int
    rx_queue: int
    inode: str


def _tcp_sockets() -> list[_Socket]:
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                local, remote, queues = fields[1], fields[2], fields[4]
                rows.append(
                    _Socket(int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16),
                            int(queues.split(":")[1], 16), fields[9])
                )  # fmt: skip
    return rows


async def _listening_backend(postgres_url: str, client_pid: int) -> Backend:
    """The backend of ``client_pid``'s connection that listens for the arbiters' notifications (Linux /proc, and a
    server on this machine: skipped elsewhere)."""
    try:
        inodes = {os.readlink(f"/proc/{client_pid}/fd/{fd}")[8:-1] for fd in os.listdir(f"/proc/{client_pid}/fd")}
    except OSError as error:
        pytest.skip(f"cannot see the arbiter's sockets in /proc: {error}")
    ports = {row.local_port for row in _tcp_sockets() if row.inode in inodes and row.remote_port == 5432}
    conn = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        rows = await conn.fetch(
            # Its last command: the LISTEN, or the round trip a read waits for (what no other connection sends).
            "SELECT pid, client_port FROM pg_stat_activity WHERE datname = current_database()"
            " AND (query LIKE 'LISTEN %' OR query = 'SELECT 1')"
        )
    finally:
        await conn.close()
    found = [Backend(row["pid"], row["client_port"]) for row in rows if row["client_port"] in ports]
    if len(found) != 1:
        pytest.skip("the arbiter's listening connection is not to a server on this machine")
    return found[0]


@contextlib.contextmanager
def _stopped(pid: int) -> Iterator[None]:
    try:
        os.kill(pid, signal.SIGSTOP)
    except PermissionError as error:
        pytest.skip(f"cannot stop the PostgreSQL backend: {error}")
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


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
