"""MCP sessions that do not matter to the agent: a client keeps working across a restart of the arbiter and when it
is moved to another arbiter process, a client that keeps no session is served, and no token can lock others out.

Driven by the ``mcp`` SDK's own client (2025 protocol, with a session) and by plain HTTP where a test needs to say
exactly what goes on the wire. The TypeScript clients the reference's agents use are in ``test_js_clients``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import func, select

from arbiter.mcp.kept import KeptSessions, SessionLimits, new_session_id, session_key, session_of
from arbiter.mcp.streams import RESTART_RETRY_MS, RETRY_MS
from arbiter.server import open_arbiter, serving
from arbiter.storage.database import Database
from arbiter.storage.migrate import migrate
from arbiter.storage.sql_port import DatabaseSessions
from arbiter.storage.tables import McpSubscriptionRow
from tests.conftest import make_settings
from tests.support.arbiters import Api, arbiter_process, free_port
from tests.support.clock import FakeClock
from tests.support.eventually import eventually
from tests.support.mcp_live import AGENTS, CHANNEL, INITIALIZE, live_arbiter
from tests.support.proxy import tcp_proxy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

HISTORY = f"aizuchi://channels/{CHANNEL}/history"
ACCEPT = {"Accept": "application/json, text/event-stream"}


def _as(who: str) -> dict[str, str]:
    return {**ACCEPT, "Authorization": f"Bearer {AGENTS[who]}"}


def _call(name: str, arguments: dict[str, Any] | None = None, request_id: int = 2) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments or {}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


class Heard:
    """The resource updates an SDK client is sent."""

    def __init__(self) -> None:
        self.uris: asyncio.Queue[str] = asyncio.Queue()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ServerNotification) and message.method == "notifications/resources/updated":
            await self.uris.put(str(message.params.uri))

    async def next(self) -> str:
        return await asyncio.wait_for(self.uris.get(), 30)


@contextlib.asynccontextmanager
async def sdk_client(url: str, who: str, heard: Heard) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {AGENTS[who]}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy", message_handler=heard) as client,
    ):
        yield client


async def _subscribe(client: Client) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # resources/subscribe is the 2025 protocol's way, deprecated after it
        await client.subscribe_resource(HISTORY)


async def _status_level(client: Client) -> int:
    result = await client.call_tool("status", {})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return int(result.structured_content["resource"])


async def test_a_client_keeps_its_session_and_subscription_across_a_restart(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'arbiter.db'}"
    env = {"ARBITER_PORT": str(free_port()), "ARBITER_AGENT_TOKENS": json.dumps(AGENTS)}
    heard = Heard()
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(arbiter_process(database, tmp_path, env=env))
        http = await stack.enter_async_context(aiohttp.ClientSession())
        api = Api(http, AGENTS, base=first.url)
        await api.create_channel(CHANNEL)
        client = await stack.enter_async_context(sdk_client(f"{first.url}/channels/{CHANNEL}/mcp", "aya", heard))
        await _subscribe(client)
        assert await _status_level(client) == 100
        await asyncio.to_thread(first.stop)  # SIGTERM: the arbiter shuts down and starts again on the same port

        again = await stack.enter_async_context(arbiter_process(database, tmp_path, name="again", env=env))
        assert again.url == first.url
        # The same client object, never reconnected by hand: its session is still good, and so is its subscription
        # (its notification stream reconnects by itself).
        spoken = await client.call_tool("consume", {"amount": 5, "message": "ただいま"})
        assert spoken.structured_content is not None and spoken.structured_content["success"] is True
        assert await heard.next() == HISTORY
        await api.say(CHANNEL, "ken", "おかえり")
        assert await heard.next() == HISTORY


async def test_a_stream_ended_by_a_shutdown_asks_for_a_longer_wait_than_one_that_just_ended() -> None:
    # The SDKs reconnect twice, then give up: a stream the arbiter ends because it is stopping gives the restart
    # 30 s to be back rather than the 10 s every other end gives.
    async with aiohttp.ClientSession() as http:
        async with (
            open_arbiter(make_settings(None, agent_tokens=AGENTS), clock=FakeClock(), in_memory=True) as arbiter,
            serving(arbiter.app, "127.0.0.1", 0) as base,
        ):
            await Api(http, AGENTS, base=base).create_channel(CHANNEL)
            url = f"{base}/channels/{CHANNEL}/mcp"
            session = await _session(http, url, "aya")
            stream = await http.get(url, headers={**_as("aya"), "Mcp-Session-Id": session})
            assert stream.status == 200
            assert await stream.content.readuntil(b"\n\n") == f"retry: {RETRY_MS}\n\n".encode()
        # The server has shut down: what the stream said last.
        rest = (await stream.content.read()).decode()
    assert rest.strip().split("\n\n")[-1] == f"retry: {RESTART_RETRY_MS}"
    assert RESTART_RETRY_MS >= 3 * RETRY_MS


async def test_a_client_moved_to_another_arbiter_process_keeps_working(postgres_url: str) -> None:
    settings = make_settings(postgres_url, agent_tokens=AGENTS)
    heard = Heard()
    async with (
        open_arbiter(settings) as one,
        open_arbiter(settings) as two,
        serving(one.app, "127.0.0.1", 0) as one_url,
        serving(two.app, "127.0.0.1", 0) as two_url,
        aiohttp.ClientSession() as http,
    ):
        api = Api(http, AGENTS, base=one_url)
        await api.create_channel(CHANNEL)
        host, port = one_url.removeprefix("http://").split(":")
        async with (
            tcp_proxy(host, int(port)) as balancer,
            sdk_client(f"{balancer.url}/channels/{CHANNEL}/mcp", "aya", heard) as client,
        ):
            await _subscribe(client)
            await api.say(CHANNEL, "ken", "one")
            assert await heard.next() == HISTORY
            two_host, two_port = two_url.removeprefix("http://").split(":")
            balancer.move_to(two_host, int(two_port))
            # Served by the other process now: the session and its subscription came along.
            assert await _status_level(client) == 100
            await _eventually_watched(two, CHANNEL)
            await api.say(CHANNEL, "ken", "two")  # said through the first process, heard through the second
            assert await heard.next() == HISTORY


async def _eventually_watched(arbiter: Any, channel: str) -> None:
    """Until the process's hub has a subscriber for ``channel`` (the moved stream reconnected there)."""
    await eventually(
        lambda: arbiter.hub.watching(channel), what=f"a stream watching {channel} in the second process", every=0.05
    )


# --- one arbiter, plain HTTP ------------------------------------------------------------------------------


@pytest.fixture
async def served(sqlite_url: str) -> AsyncIterator[tuple[str, str, aiohttp.ClientSession]]:
    async with live_arbiter(sqlite_url, mcp_sessions_per_token=4) as live:
        yield sqlite_url, f"{live.url}/channels/{CHANNEL}/mcp", live.http


async def _session(http: aiohttp.ClientSession, url: str, who: str) -> str:
    async with http.post(url, json=INITIALIZE, headers=_as(who)) as response:
        assert response.status == 200, await response.text()
        return response.headers["Mcp-Session-Id"]


async def test_a_client_that_keeps_no_session_is_served(served: tuple[str, str, aiohttp.ClientSession]) -> None:
    _database, url, http = served
    # No initialize, no Mcp-Session-Id: a client written for a stateless server.
    async with http.post(url, json=_call("consume", {"amount": 5, "message": "うん"}), headers=_as("aya")) as response:
        assert response.status == 200
        assert response.content_type == "application/json"
        answer = await response.json()
    assert answer["id"] == 2
    assert answer["result"]["structuredContent"]["success"] is True
    async with http.get(url, headers=_as("aya")) as stream:
        assert stream.status == 405  # no stream without a session: the protocol's answer, which clients expect
        assert stream.headers["Allow"] == "POST"


async def test_a_client_that_accepts_only_an_event_stream_gets_one(
    served: tuple[str, str, aiohttp.ClientSession],
) -> None:
    _database, url, http = served
    headers = {**_as("aya"), "Accept": "text/event-stream"}
    async with http.post(url, json=_call("status"), headers=headers) as response:
        assert response.content_type == "text/event-stream"
        text = await response.text()
    event, data = text.strip().split("\n")
    assert event == "event: message"
    assert json.loads(data.removeprefix("data: "))["result"]["structuredContent"]["resource"] == 100


async def test_session_ids_prove_themselves_and_belong_to_one_token() -> None:
    aya, natsu = session_key(AGENTS["aya"]), session_key(AGENTS["natsu"])
    session = new_session_id(aya)
    assert session_of(session, aya) == session
    assert session_of(session, natsu) is None
    nonce, _, mac = session.partition(".")
    assert session_of(f"{nonce}x.{mac}", aya) is None
    assert session_of("not-a-session", aya) is None
    assert all(0x21 <= ord(c) <= 0x7E for c in session)  # the protocol's visible-ASCII rule


async def test_ten_thousand_abandoned_sessions_of_one_token_lock_no_one_out(
    served: tuple[str, str, aiohttp.ClientSession],
) -> None:
    database_url, url, http = served
    rss_before = _rss_mb()
    opened = 0

    async def abandon(count: int) -> None:
        nonlocal opened
        for _ in range(count):
            await _session(http, url, "aya")
            opened += 1

    await asyncio.gather(*(abandon(625) for _ in range(16)))
    # And some that subscribed before walking away: the token's least recently used give way past its cap (4 here).
    for _ in range(12):
        session = await _session(http, url, "aya")
        await _subscribe_raw(http, url, "aya", session)
    assert opened == 10_000
    assert await _kept_sessions(database_url, "aya") == 4
    assert _rss_mb() - rss_before < 40  # a kept session would be tens of KB each: 10,000 of them, hundreds of MB

    # Meanwhile another token connects, subscribes and hears as if nothing had happened.
    session = await _session(http, url, "natsu")
    answer = await _subscribe_raw(http, url, "natsu", session)
    assert answer["result"] == {}
    async with http.get(url, headers={**_as("natsu"), "Mcp-Session-Id": session}) as stream:
        assert stream.status == 200
        await Api(http, AGENTS, base=url.split("/channels/")[0]).say(CHANNEL, "ken", "hello")
        assert json.loads(await _next_data(stream))["params"]["uri"] == HISTORY
    assert await _kept_sessions(database_url, "natsu") == 1


async def test_a_token_holds_at_most_its_cap_of_streams_and_others_still_open_theirs(
    served: tuple[str, str, aiohttp.ClientSession],
) -> None:
    _database, url, http = served
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(4):
            session = await _session(http, url, "aya")
            stream = await stack.enter_async_context(http.get(url, headers={**_as("aya"), "Mcp-Session-Id": session}))
            assert stream.status == 200
        one_more = await _session(http, url, "aya")
        async with http.get(url, headers={**_as("aya"), "Mcp-Session-Id": one_more}) as refused:
            assert refused.status == 429
            assert "4 notification streams" in (await refused.json())["error"]["message"]
        other = await _session(http, url, "natsu")
        async with http.get(url, headers={**_as("natsu"), "Mcp-Session-Id": other}) as allowed:
            assert allowed.status == 200


async def test_a_session_id_of_another_token_or_none_at_all_is_not_found(
    served: tuple[str, str, aiohttp.ClientSession],
) -> None:
    _database, url, http = served
    ayas = await _session(http, url, "aya")
    for session in (ayas, "made-up"):
        headers = {**_as("natsu"), "Mcp-Session-Id": session}
        async with http.post(url, json=_call("status"), headers=headers) as response:
            assert response.status == 404
            assert "Session not found" in (await response.json())["error"]["message"]


async def test_an_unknown_channel_is_refused_when_the_client_connects(
    served: tuple[str, str, aiohttp.ClientSession],
) -> None:
    _database, url, http = served
    nowhere = url.replace(f"/channels/{CHANNEL}/", "/channels/nowhere/")
    async with http.post(nowhere, json=INITIALIZE, headers=_as("aya")) as response:
        assert response.status == 404
        assert "nowhere" in (await response.json())["error"]["message"]


async def test_a_token_typed_with_its_scheme_into_a_client_that_adds_it_is_accepted(
    served: tuple[str, str, aiohttp.ClientSession],
) -> None:
    _database, url, http = served
    headers = {**ACCEPT, "Authorization": f"Bearer Bearer {AGENTS['aya']}"}
    async with http.post(url, json=_call("status"), headers=headers) as response:
        assert response.status == 200
    async with http.post(url, json=_call("status"), headers={**ACCEPT, "Authorization": "Bearer Bearer"}) as wrong:
        assert wrong.status == 401


async def test_the_no_channel_error_names_the_channel_url(served: tuple[str, str, aiohttp.ClientSession]) -> None:
    _database, url, http = served
    bare = url.split("/channels/")[0] + "/mcp"
    async with http.post(bare, json=_call("status"), headers=_as("aya")) as response:
        result = (await response.json())["result"]
    assert result["isError"] is True
    assert "/channels/<channel>/mcp" in result["content"][0]["text"]


async def test_protocol_errors_are_json_rpc_errors_and_change_nothing(
    served: tuple[str, str, aiohttp.ClientSession],
) -> None:
    _database, url, http = served
    cases = [
        (b"{not json", 400, -32700),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', 400, -32600),
        (b'{"id": 1, "method": "ping"}', 400, -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "no/such"}', 200, -32601),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}}', 200, -32602),
    ]
    for body, status, code in cases:
        async with http.post(url, data=body, headers={**_as("aya"), "Content-Type": "application/json"}) as response:
            assert (response.status, (await response.json())["error"]["code"]) == (status, code), body
    async with http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=_as("aya")) as r:
        assert r.status == 202


# --- what a session keeps ----------------------------------------------------------------------------------


async def test_kept_sessions_give_way_least_recently_used_first_and_expire_when_idle(sqlite_url: str) -> None:
    database = Database.open(sqlite_url)
    await migrate(database)
    clock = FakeClock()
    kept = KeptSessions(DatabaseSessions(database), clock, SessionLimits(per_token=2, idle_s=300))
    try:
        assert await kept.subscribe("s1", "aya", "lobby") == []
        clock.advance(1)
        assert await kept.subscribe("s2", "aya", "lobby") == []
        clock.advance(1)
        await kept.touch("s1")  # s1 is used again: s2 is now the least recently used
        clock.advance(1)
        assert await kept.subscribe("s3", "aya", "lobby") == ["s2"]
        assert await kept.subscribe("n1", "natsu", "lobby") == []  # another token's cap is its own
        assert (await kept.channels("s1"), await kept.channels("s2")) == ({"lobby"}, set())
        clock.advance(299)
        await kept.touch("s3")
        clock.advance(2)
        assert await kept.expire() == 2  # s1 and n1: idle for more than 300 s; s3 was touched
        assert (await kept.channels("s1"), await kept.channels("s3")) == (set(), {"lobby"})
    finally:
        await database.dispose()


# --- helpers -------------------------------------------------------------------------------------------------


async def _subscribe_raw(http: aiohttp.ClientSession, url: str, who: str, session: str) -> Any:
    message = {"jsonrpc": "2.0", "id": 7, "method": "resources/subscribe", "params": {"uri": HISTORY}}
    async with http.post(url, json=message, headers={**_as(who), "Mcp-Session-Id": session}) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def _next_data(stream: aiohttp.ClientResponse) -> str:
    """The next event with data on an event stream (the first, priming one has none)."""
    while True:
        line = (await asyncio.wait_for(stream.content.readline(), 30)).decode().strip()
        if line.startswith("data:") and line != "data:":
            return line.removeprefix("data:").strip()


async def _kept_sessions(database_url: str, member: str) -> int:
    table = McpSubscriptionRow.__table__
    query = select(func.count(func.distinct(table.c.session_id))).where(table.c.member == member)
    database = Database.open(database_url)
    try:
        return int(await database.read(lambda conn: conn.scalar(query)))
    finally:
        await database.dispose()


def _rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096 / 2**20
