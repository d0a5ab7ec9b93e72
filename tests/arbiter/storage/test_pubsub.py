"""The relay between arbiter processes on one PostgreSQL database, on the real server: what one process notifies in
a transaction, the other hears at commit, in order, a large event whole; and it parses only the events of
channels someone watches there, and every persona event."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from arbiter import contract as wire
from arbiter.events import PersonaEvent
from arbiter.storage.database import Database
from arbiter.storage.liveness import Liveness, connection_gone
from arbiter.storage.migrate import migrate
from arbiter.storage.pubsub import LISTENER_NAME, PostgresRelay
from arbiter.storage.writer import NOTIFY_CHANNEL, pg_notify
from tests.support.proxy import tcp_proxy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from arbiter.events import Event
    from tests.support.proxy import TcpProxy

pytestmark = pytest.mark.postgres

LONG = "長い話" * 1_333  # far over one notification's 8000 bytes


def message(channel_id: str, seq: int, text: str = "hello") -> wire.MessageEvent:
    view = wire.MessageView(seq=seq, author_id="yuki", author_kind="human", author_name="Yuki", text=text, at=1.0)
    return wire.MessageEvent(channel_id=channel_id, message=view)


class Heard:
    """What the listening process published, and a way to wait for the last event a test sent."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.calls = 0
        self._waiting: tuple[Callable[[Event], bool], asyncio.Future[None]] | None = None

    def publish(self, events: Sequence[Event]) -> None:
        self.calls += 1
        self.events.extend(events)
        if self._waiting is not None and any(self._waiting[0](event) for event in events):
            self._waiting[1].set_result(None)
            self._waiting = None

    async def until(self, done: Callable[[Event], bool]) -> list[Event]:
        if not any(done(event) for event in self.events):
            future = asyncio.get_running_loop().create_future()
            self._waiting = (done, future)
            await asyncio.wait_for(future, timeout=10)
        return self.events


@pytest.fixture
async def database(postgres_url: str) -> AsyncIterator[Database]:
    database = Database.open(postgres_url)
    await migrate(database)
    yield database
    await database.dispose()


@contextlib.asynccontextmanager
async def relays(
    database: Database, heard: Heard, watching: Callable[[str], bool]
) -> AsyncIterator[tuple[PostgresRelay, PostgresRelay]]:
    sender = PostgresRelay(database.engine, lambda _events: None)
    listener = PostgresRelay(database.engine, heard.publish, watching)
    await sender.start()
    await listener.start()
    try:
        yield sender, listener
    finally:
        await listener.close()
        await sender.close()


async def _send(database: Database, relay: PostgresRelay, events: Sequence[Event]) -> None:
    """Notify ``events`` in one committed transaction, as the writer does."""
    await database.write(lambda conn: pg_notify(conn, NOTIFY_CHANNEL, relay.payloads(events, {})))


async def test_only_watched_channels_and_personas_are_parsed(database: Database) -> None:
    heard = Heard()
    watched = {"lobby"}
    async with relays(database, heard, lambda channel: channel in watched) as (sender, _listener):
        persona = PersonaEvent(id="hana", display_name="Hana")
        await _send(database, sender, [message("elsewhere", 1), message("lobby", 1), persona, message("elsewhere", 2)])
        await _send(database, sender, [message("elsewhere", 3, LONG), message("lobby", 2, LONG)])
        events = await heard.until(lambda event: isinstance(event, wire.MessageEvent) and event.message.seq == 2)

    assert events == [message("lobby", 1), persona, message("lobby", 2, LONG)]


async def test_an_event_of_a_channel_no_one_watches_here_is_not_even_parsed(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process's notification holds an event of a channel no one watches here that would not parse (as one
    of a newer version, or a part this process could not read): it is passed over unread, so the watched channel's
    event beside it still arrives, and nothing is reported malformed."""
    heard = Heard()
    listener = PostgresRelay(database.engine, heard.publish, lambda channel: channel == "lobby")  # alone: no other
    await listener.start()  # process here parses what it hears
    try:
        unreadable = '{"type": "message", "channel_id": "elsewhere", "message": "not a message at all"}'
        events = [["elsewhere", unreadable], ["lobby", message("lobby", 1).model_dump_json()]]
        payload = json.dumps({"origin": "another-process", "events": events})
        with caplog.at_level(logging.WARNING, logger="arbiter.storage.pubsub"):
            await database.write(lambda conn: pg_notify(conn, NOTIFY_CHANNEL, [payload]))
            heard_events = await heard.until(lambda event: isinstance(event, wire.MessageEvent))
    finally:
        await listener.close()

    assert heard_events == [message("lobby", 1)]
    assert not caplog.records


async def test_a_transactions_events_travel_together_in_order(database: Database) -> None:
    heard = Heard()
    async with relays(database, heard, lambda _channel: True) as (sender, _listener):
        sent: list[Event] = [message("lobby", seq, f"line {seq}") for seq in range(1, 61)]
        sent[30] = message("lobby", 31, LONG)  # in parts, between the others
        await _send(database, sender, sent)
        events = await heard.until(lambda event: isinstance(event, wire.MessageEvent) and event.message.seq == 60)

    assert events == sent
    # The small ones (about 250 bytes each) in one or two notifications each side of the large one, which comes in
    # parts and is published once joined: not a notification (and a call) each.
    assert heard.calls <= 5


async def test_a_subscription_between_the_parts_of_a_skipped_event_gets_the_next_one_whole(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    heard = Heard()
    asked: list[str] = []

    def watching(channel: str) -> bool:
        # Nobody watches when the first part arrives; someone does from then on.
        asked.append(channel)
        return len(asked) > 1

    async with relays(database, heard, watching) as (sender, _listener):
        await _send(database, sender, [message("lobby", 1, LONG), message("lobby", 2, LONG)])
        events = await heard.until(lambda event: isinstance(event, wire.MessageEvent))

    assert events == [message("lobby", 2, LONG)]
    # The rest of the skipped one's parts were skipped too, not taken for a broken event.
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == []


@contextlib.asynccontextmanager
async def _behind_a_proxy(postgres_url: str, **options: Any) -> AsyncIterator[tuple[TcpProxy, Database]]:
    """A database opened through a proxy the test can silence or hold, and the proxy."""
    address = urlsplit(postgres_url)
    assert address.hostname is not None and address.port is not None
    async with tcp_proxy(address.hostname, address.port) as proxy:
        database = Database.open(postgres_url.replace(f":{address.port}/", f":{proxy.port}/"), **options)
        try:
            yield proxy, database
        finally:
            await database.dispose()


async def test_a_listener_whose_link_goes_silent_stops_hearing_and_listens_again(postgres_url: str) -> None:
    # Told nothing (the proxy drops its bytes): only the probe can tell. Until it listens again, the writer is
    # told it hears nothing (its reads check versions), and a read waiting for a round trip is not kept waiting.
    # Quick, but not so quick that a busy machine's slow answer passes for a silent link.
    liveness = Liveness(probe_every_s=0.2, timeout_s=1.0, retry_first_s=0.1)
    async with _behind_a_proxy(postgres_url) as (proxy, database):
        hearing: list[bool] = []
        heard_again = asyncio.Event()

        async def caught() -> None:
            heard_again.set()

        relay = PostgresRelay(
            database.engine,
            lambda _events: None,
            hearing=hearing.append,
            liveness=liveness,
        )
        relay.heard_again = caught
        await relay.start()
        try:
            assert await relay.caught_up()
            assert not heard_again.is_set()  # only after a loss
            conn = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg://", "postgresql://"), timeout=5)
            try:
                port = await conn.fetchval(
                    "SELECT client_port FROM pg_stat_activity"
                    " WHERE datname = current_database() AND application_name = $1",
                    LISTENER_NAME,
                )
            finally:
                await conn.close()
            assert proxy.silence(port)
            assert not await relay.caught_up()  # unanswered: given up within the timeout, not left waiting
            await asyncio.wait_for(heard_again.wait(), 5)
            assert await relay.caught_up()
        finally:
            await relay.close()
    assert hearing == [True, False, True, False]  # (the last: closed)


def test_the_server_side_bounds_and_what_counts_as_a_lost_connection() -> None:
    assert Liveness().server_side() == [
        "SET tcp_keepalives_idle = 2",
        "SET tcp_keepalives_interval = 1",
        "SET tcp_keepalives_count = 3",
        "SET tcp_user_timeout = 5000",
    ]
    for gone in (TimeoutError(), ConnectionResetError(), asyncpg.ConnectionDoesNotExistError("closed")):
        assert connection_gone(gone)
    assert not connection_gone(asyncpg.QueryCanceledError("canceling statement"))
    with pytest.raises(ValueError):
        Liveness(timeout_s=0)


async def _listener_port(postgres_url: str) -> int:
    """The listening connection's client port, as the server sees it (through the proxy: the proxy's port)."""
    conn = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg://", "postgresql://"), timeout=5)
    try:
        port: int = await conn.fetchval(
            "SELECT client_port FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1",
            LISTENER_NAME,
        )
    finally:
        await conn.close()
    return port


async def test_a_listener_listens_again_without_waiting_for_the_pools_connections(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Every connection of the writer's pool is taken, and others wait for one (as when each waits out its
    # statement's bound on a cut link): the listener listens again at once all the same, on a connection of its
    # own, not queued behind them (the pool's wait is 30 s, and says nothing meanwhile).
    liveness = Liveness(probe_every_s=0.2, timeout_s=1.0, retry_first_s=0.1, retry_most_s=0.4)
    async with _behind_a_proxy(postgres_url, pool_size=1) as (proxy, database):
        heard_again = asyncio.Event()

        async def caught() -> None:
            heard_again.set()

        relay = PostgresRelay(database.engine, lambda _events: None, liveness=liveness)
        relay.heard_again = caught
        await relay.start()
        taken = asyncio.Event()

        async def writer() -> None:
            async with database.engine.connect():
                taken.set()
                await asyncio.Event().wait()  # held until the test ends

        writers = [asyncio.create_task(writer()) for _ in range(2)]  # the pool holds two (one and one overflow)
        try:
            await asyncio.wait_for(taken.wait(), 5)
            await asyncio.sleep(0.2)  # the other waits for a connection
            assert proxy.silence(await _listener_port(postgres_url))
            with caplog.at_level(logging.INFO, logger="arbiter.storage.pubsub"):
                assert not await relay.caught_up()
                await asyncio.wait_for(heard_again.wait(), 5)
            assert await relay.caught_up()
        finally:
            for task in writers:
                task.cancel()
            await asyncio.gather(*writers, return_exceptions=True)
            await relay.close()


async def test_a_listener_cut_off_across_its_attempts_to_listen_again_listens_once_the_link_is_back(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The link to the database drops every packet (as a firewall does) for several attempts to listen again; then it
    # is back. Each attempt fails within its bounds and says so, and the first after the link is back listens: none
    # waits for the dead link.
    liveness = Liveness(probe_every_s=0.2, timeout_s=1.0, retry_first_s=0.1, retry_most_s=0.4)
    async with _behind_a_proxy(postgres_url) as (proxy, database):
        hearing: list[bool] = []
        heard_again = asyncio.Event()

        async def caught() -> None:
            heard_again.set()

        relay = PostgresRelay(database.engine, lambda _events: None, hearing=hearing.append, liveness=liveness)
        relay.heard_again = caught
        await relay.start()
        try:
            with caplog.at_level(logging.INFO, logger="arbiter.storage.pubsub"):
                proxy.hold()
                assert not await relay.caught_up()  # the probe goes unanswered: given up
                # Long enough for a few attempts to listen again over the cut link (each fails within 1 s).
                await asyncio.sleep(4)
                proxy.restore()
                await asyncio.wait_for(heard_again.wait(), 5)
            assert await relay.caught_up()
        finally:
            await relay.close()
    failed = [record.getMessage() for record in caplog.records if "cannot listen" in record.getMessage()]
    assert len(failed) >= 2, failed
    assert all("TimeoutError" in line for line in failed), failed
    assert hearing == [True, False, True, False]
