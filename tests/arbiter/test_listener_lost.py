"""An arbiter whose PostgreSQL listening connection dies (``arbiter.storage.pubsub``) notices it, says so, listens
again, and its streams get every message another arbiter committed meanwhile, once and in order, even when nothing
is said after: the server ending the connection (an error the process is told of), and a link that goes silent
(told nothing at all; the listener sits behind a proxy that drops its bytes).

Two arbiters on one database: A writes, B serves the streams whose listener dies (an event stream, and a wake-up
socket of the reference design's agents, one frame per message).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import asyncpg
import pytest

from arbiter.storage import pubsub
from arbiter.storage.liveness import Liveness
from arbiter.storage.pubsub import LISTENER_NAME
from tests.conftest import auth
from tests.support.arbiters import serve
from tests.support.events import read_until
from tests.support.eventually import eventually
from tests.support.proxy import tcp_proxy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.support.arbiters import Served
    from tests.support.clock import FakeClock

pytestmark = pytest.mark.postgres

LOST = "lost the PostgreSQL listening connection"
AGAIN = "listening again for other arbiter processes' events"
CATCHING_UP = "catching up on seqs"


def plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def listeners(database_url: str) -> list[asyncpg.Record]:
    """The listening connections on the database: each one's backend pid and client port."""
    conn = await asyncpg.connect(plain(database_url), timeout=5)
    try:
        return await conn.fetch(
            "SELECT pid, client_port FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = $1",
            LISTENER_NAME,
        )
    finally:
        await conn.close()


@dataclass
class Caught:
    said: list[str]  # the texts said, in order
    seqs: list[int]  # their seqs
    streamed: list[int]  # the seqs B's event stream sent
    woken: list[str]  # the texts of the frames B's wake-up socket sent


async def say_while_deaf_then_nothing(
    a: Served, b: Served, cut: contextlib.AbstractAsyncContextManager[None], caplog: pytest.LogCaptureFixture
) -> Caught:
    """B's stream of the lobby from the start, and a wake-up socket; a message heard; then, within ``cut`` (which
    kills B's listener), three more said through A, and none after."""
    service = a.arbiter.service
    await service.ensure_channel("lobby")
    caught = Caught([], [], [], [])

    async def say(text: str) -> None:
        caught.said.append(text)
        caught.seqs.append((await service.record_message("lobby", author_id="u1", author_name="Yui", text=text)).seq)

    async with (
        b.client.ws_connect("/v1/channels/lobby/events?after=0", headers=auth("hana")) as ws,
        b.client.ws_connect("/channels/lobby/ws", headers=auth("hana")) as wake,
    ):
        await read_until(ws, lambda event: event["type"] == "level")
        await say("before")
        events = await read_until(ws, lambda event: event["type"] == "message")
        async with cut:
            for n in range(3):
                await say(f"while B is deaf {n}")
        # Nothing more is said: only the catch-up can bring them. The level follows them (the channel as it is now).
        events += await read_until(
            ws, lambda event: event["type"] == "message" and event["message"]["seq"] == caught.seqs[-1]
        )
        events += await read_until(ws, lambda event: event["type"] == "level", within=5)
        while len(caught.woken) < len(caught.said):
            caught.woken.append(json.loads(await wake.receive_str(timeout=5))["message"]["message"])
        with contextlib.suppress(TimeoutError):
            caught.woken.append(await wake.receive_str(timeout=0.3))  # one too many: a repeat
    assert any(CATCHING_UP in record.getMessage() for record in caplog.records), "the catch-up path was not taken"
    caught.streamed = [event["message"]["seq"] for event in events if event["type"] == "message"]
    return caught


def timeline(caplog: pytest.LogCaptureFixture, since: float) -> str:
    """When B said it lost its listener, and when it listened again, counted from ``since`` (for the report)."""
    moments = {
        name: next((r.created - since for r in caplog.records if text in r.getMessage()), None)
        for name, text in (("lost", LOST), ("again", AGAIN))
    }
    return f"listener's death -> loss logged {moments['lost']:.2f}s, listening again {moments['again']:.2f}s"


async def test_a_listener_the_server_ends_is_replaced_and_its_streams_catch_up(
    postgres_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="arbiter")
    # Told at once, it would listen again after 0.5 s: a second, here, so that A's three messages are all said
    # before (the catch-up then has to bring them all).
    monkeypatch.setattr(pubsub, "LIVENESS", Liveness(retry_first_s=1.0))
    async with serve(postgres_url, clock=clock) as a, serve(postgres_url, clock=clock) as b:
        before = {row["pid"] for row in await listeners(postgres_url)}
        assert len(before) == 2
        since = 0.0

        @contextlib.asynccontextmanager
        async def terminated() -> AsyncIterator[None]:
            nonlocal since
            conn = await asyncpg.connect(plain(postgres_url), timeout=5)
            try:
                since = time.time()
                # Both arbiters' (B's is not told apart here): A's own messages reach its streams anyway.
                ended = await conn.fetch("SELECT pg_terminate_backend(pid, 5000) FROM unnest($1::int[]) pid", before)
                assert all(row[0] for row in ended)
            finally:
                await conn.close()
            yield

        caught = await say_while_deaf_then_nothing(a, b, terminated(), caplog)
        assert caught.streamed == caught.seqs
        assert caught.woken == caught.said

        async def both_listen_again() -> bool:
            after = {row["pid"] for row in await listeners(postgres_url)}
            return len(after) == 2 and not before & after  # on new connections

        await eventually(both_listen_again, what="both arbiters to listen again", every=0.1)
    print(timeline(caplog, since))


async def test_a_listener_whose_link_goes_silent_is_given_up_and_replaced_and_its_streams_catch_up(
    postgres_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="arbiter")
    # Quick to notice here (a probe every 0.2 s, given up after 1 s unanswered), so the test takes a second or two.
    monkeypatch.setattr(pubsub, "LIVENESS", Liveness(probe_every_s=0.2, timeout_s=1.0, retry_first_s=0.1))
    address = urlsplit(postgres_url)
    assert address.hostname is not None and address.port is not None
    async with tcp_proxy(address.hostname, address.port) as proxy:
        proxied = postgres_url.replace(f"@{address.hostname}:{address.port}/", f"@127.0.0.1:{proxy.port}/")
        assert proxied != postgres_url
        async with serve(postgres_url, clock=clock) as a, serve(proxied, clock=clock) as b:
            since = 0.0

            @contextlib.asynccontextmanager
            async def silenced() -> AsyncIterator[None]:
                nonlocal since
                since = time.time()
                # B's listener is the one that came through the proxy (A's did not).
                assert [row for row in await listeners(postgres_url) if proxy.silence(row["client_port"])]
                yield

            caught = await say_while_deaf_then_nothing(a, b, silenced(), caplog)
            assert caught.streamed == caught.seqs
            assert caught.woken == caught.said
            assert any(LOST in r.getMessage() and "no answer to a round trip" in r.getMessage() for r in caplog.records)
    print(timeline(caplog, since))
