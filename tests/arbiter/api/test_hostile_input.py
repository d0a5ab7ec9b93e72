"""Input no client should send, and the arbiter still answers with a 4xx naming what is wrong, on SQLite and on
PostgreSQL: a NUL character in any string that reaches storage, an integer beyond 64 bits, an Authorization header
that is not UTF-8, a method a route has not got (with its Allow header), a reply based on a message not yet
written. Nothing of it is a 5xx, and nothing of it changes anything.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from arbiter.room import add_room
from arbiter.server import open_arbiter, serving
from tests.conftest import PERSONA_TOKENS, make_settings
from tests.support.arbiters import serve

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.support.arbiters import Api, Served
    from tests.support.clock import FakeClock

CH = "/v1/channels/lobby"
NUL = "a\u0000b"
BEYOND_64_BITS = 2**64
LARGEST_SEQ = 2**63 - 1


@pytest.fixture
async def served(database_url: str, clock: FakeClock) -> AsyncIterator[Served]:
    """The lobby with a human message (platform id p1) and hana's held claim, on each database."""
    async with serve(database_url, clock=clock) as served:
        await served.api.create_channel("lobby")
        await served.api.say("lobby", "yui", "hello, anyone?", platform_message_id="p1")
        yield served


async def snapshot(api: Api) -> Any:
    return await api.status("lobby"), await api.history("lobby"), await api.settings("lobby")


# (method, path, who, body, the field the error must name); {claim} is hana's held claim.
Case = tuple[str, str, str, Any, str]

# Every string of every request that is stored (or could be), with a NUL in it.
NUL_CASES: list[Case] = [
    ("POST", f"{CH}/consume", "hana", {"tier": "remark", "text": NUL}, "text"),
    ("POST", f"{CH}/claims/{{claim}}/speak", "hana", {"text": NUL}, "text"),
    ("POST", f"{CH}/messages", "admin", {"author_id": "u1", "author_name": "Yui", "text": NUL}, "text"),
    ("POST", f"{CH}/messages", "admin", {"author_id": "u1", "author_name": NUL, "text": "hi"}, "author_name"),
    ("POST", f"{CH}/messages", "admin", {"author_id": "u\u00001", "author_name": "Yui", "text": "hi"}, "author_id"),
    (
        "POST",
        f"{CH}/messages",
        "admin",
        {"author_id": "u1", "author_name": "Yui", "text": "hi", "platform_message_id": NUL},
        "platform_message_id",
    ),
    (
        "POST",
        f"{CH}/messages",
        "admin",
        {"author_id": "u1", "author_name": "Yui", "text": "hi", "mentions": [NUL]},
        "mentions.0",
    ),
    ("PUT", f"{CH}/messages/1/platform-id", "hana", {"platform_message_id": NUL}, "platform_message_id"),
    ("PATCH", f"{CH}/platform-messages/p1", "admin", {"text": NUL}, "text"),
    ("PUT", "/v1/personas/hana", "hana", {"display_name": NUL}, "display_name"),
    ("PUT", "/v1/personas/hana", "hana", {"display_name": "Hana", "aliases": ["ok", NUL]}, "aliases.1"),
    ("PUT", "/v1/personas/hana", "hana", {"display_name": "Hana", "platform_user_id": NUL}, "platform_user_id"),
    ("PUT", "/v1/personas/hana", "hana", {"display_name": "Hana", "color": "#00000\u0000"}, "color"),
    ("PATCH", f"{CH}/settings", "admin", {"topic": NUL}, "topic"),
    ("PUT", f"{CH}", "admin", {"topic": NUL}, "topic"),
    ("POST", f"{CH}/usage", "hana", {"prompt_tokens": 1, "completion_tokens": 1, "model": NUL}, "model"),
    ("POST", f"{CH}/claims", "hana", {"tier": "remark", "persona": NUL}, "persona"),
    # Ids in the path and values in the query, percent-encoded as a client would send them.
    ("GET", "/v1/channels/lob%00by/status", "admin", None, "channel_id"),
    ("PUT", f"{CH}/personas/ka%00i", "admin", {"muted": True}, "persona_id"),
    ("DELETE", f"{CH}/claims/c%001", "hana", None, "claim_id"),
    ("DELETE", f"{CH}/platform-messages/p%001", "admin", None, "platform_message_id"),
    ("GET", f"{CH}/history?after=%00", "admin", None, "after"),
]


async def refused(served: Served, cases: list[Case]) -> None:
    """Each case answers 422 naming its field, and changes nothing. (One arbiter for all: a database per case
    would cost more than the cases.)"""
    claim = (await served.api.claim("lobby", "hana", "remark"))["claim"]["claim_id"]
    before = await snapshot(served.api)
    for method, path, who, body, field in cases:
        status, answer = await served.api.request(method, path.format(claim=claim), who, body)
        assert (status, answer["error"]["field"]) == (422, field), (method, path, body, answer)
    assert await snapshot(served.api) == before


async def test_a_nul_character_anywhere_is_refused_naming_the_field(served: Served) -> None:
    await refused(served, NUL_CASES)


async def test_a_nul_character_in_the_room_is_refused_too(database_url: str, clock: FakeClock) -> None:
    # The local room's page posts names and texts: they are stored as a message's author and text.
    async with open_arbiter(make_settings(database_url), clock=clock) as arbiter:
        add_room(arbiter.app)
        async with TestClient(TestServer(arbiter.app)) as client:
            for body, field in (({"name": "Ann", "text": NUL}, "text"), ({"name": NUL, "text": "hi"}, "name")):
                response = await client.post("/room/api/lobby/say", json=body)
                assert response.status == 422, await response.text()
                assert (await response.json())["error"]["field"] == field
            snapshot = await (await client.get("/room/api/lobby/snapshot")).json()
            assert snapshot["history"] == []


# Integers beyond what the database stores (64 bits), wherever a request carries one.
BIG_CASES: list[Case] = [
    ("GET", f"{CH}/history?after={BEYOND_64_BITS}", "admin", None, "after"),
    ("GET", f"{CH}/history?after={2**63}", "admin", None, "after"),
    ("GET", f"{CH}/history?limit={BEYOND_64_BITS}", "admin", None, "limit"),
    ("POST", f"{CH}/claims", "hana", {"tier": "remark", "based_on_seq": BEYOND_64_BITS}, "based_on_seq"),
    ("POST", f"{CH}/consume", "hana", {"text": "hi", "amount": BEYOND_64_BITS}, "amount"),
    (
        "POST",
        f"{CH}/consume",
        "hana",
        {"text": "hi", "tier": "remark", "based_on_seq": -BEYOND_64_BITS},
        "based_on_seq",
    ),
    ("POST", f"{CH}/claims/{{claim}}/speak", "hana", {"text": "hi", "based_on_seq": BEYOND_64_BITS}, "based_on_seq"),
    ("POST", f"{CH}/messages/{BEYOND_64_BITS}/retract", "hana", None, "seq"),
    ("PUT", f"{CH}/messages/{BEYOND_64_BITS}/platform-id", "hana", {"platform_message_id": "p2"}, "seq"),
    ("POST", f"{CH}/usage", "hana", {"prompt_tokens": BEYOND_64_BITS, "completion_tokens": 1}, "prompt_tokens"),
    ("PATCH", f"{CH}/settings", "admin", {"capacity": BEYOND_64_BITS}, "capacity"),
    ("PATCH", f"{CH}/settings", "admin", {"daily_token_budget": BEYOND_64_BITS}, "daily_token_budget"),
    ("PATCH", f"{CH}/settings", "admin", {"tiers": {"long": {"cost": BEYOND_64_BITS}}}, "tiers.long.cost"),
    ("PATCH", f"{CH}/settings", "admin", {"idle_cap": 10**400}, "idle_cap"),
]


async def test_an_integer_beyond_64_bits_is_refused_naming_the_field(served: Served) -> None:
    await refused(served, BIG_CASES)


async def test_the_largest_seq_is_read_without_overflowing(served: Served) -> None:
    page = await served.api.call("GET", f"{CH}/history?after={LARGEST_SEQ}")
    assert (page["messages"], page["next_after"], page["has_more"]) == ([], LARGEST_SEQ, False)


async def test_a_whole_number_written_with_a_point_is_that_integer(served: Served) -> None:
    # JSON Schema, and so the OpenAPI document, counts 5.0 as the integer 5: a client that writes it so is right.
    body = {"text": "Sounds fun.", "amount": 60.0, "based_on_seq": 1.0}
    granted = await served.api.call("POST", f"{CH}/consume", "hana", body)
    assert granted["granted"] and granted["message"]["cost"] == 60, granted
    status, answer = await served.api.request("POST", f"{CH}/consume", "kai", {"text": "hm", "amount": 5.5})
    assert (status, answer["error"]["field"]) == (422, "amount")


async def raw_request(served: Served | int, head: bytes) -> tuple[int, bytes]:
    """Send ``head`` as it is, bytes no HTTP client library would send (to ``served``, or that port); the status
    and the body of the answer."""
    port = served if isinstance(served, int) else served.client.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize("token", [b"\xff\xfe", b"hana-token-\xe9\x80", b"\xc3\x28" * 20])
async def test_an_authorization_header_that_is_not_utf8_is_unauthorized(served: Served, token: bytes) -> None:
    head = b"GET " + CH.encode() + b"/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token
    status, body = await raw_request(served, head + b"\r\nConnection: close\r\n\r\n")
    assert status == 401, body
    assert b'"code":"unauthorized"' in body


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("DELETE", f"{CH}/status", "GET"),
        ("GET", f"{CH}/consume", "POST"),
        ("POST", CH, "PUT"),
        ("TRACE", "/v1/channels", "GET"),
        ("POST", "/v1/health", "GET, HEAD"),
        ("PATCH", f"{CH}/claims/c1", "DELETE"),
    ],
)
async def test_a_method_not_allowed_says_which_are(served: Served, method: str, path: str, allowed: str) -> None:
    response = await served.client.request(method, path, headers=served.api.headers("admin"))
    assert response.status == 405
    assert response.headers["Allow"] == allowed
    assert (await response.json())["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("tier", ["aizuchi", "remark", "long"])
async def test_a_reply_based_on_a_message_not_yet_written_is_refused_for_every_tier(served: Served, tier: str) -> None:
    """However the channel stands: here it is paused, which would refuse the turn anyway; the request is still a
    bad one, and says so."""
    api = served.api
    claim = await api.claim("lobby", "kai", tier)
    await api.call("PATCH", f"{CH}/settings", body={"paused": True})
    before = await snapshot(api)
    requests = [
        ("POST", f"{CH}/consume", "hana", {"tier": tier, "text": "hi", "based_on_seq": 2}),
        ("POST", f"{CH}/claims", "hana", {"tier": tier, "based_on_seq": 2}),
        ("POST", f"{CH}/claims/{claim['claim']['claim_id']}/speak", "kai", {"text": "hi", "based_on_seq": 2}),
    ]
    for method, path, who, body in requests:
        status, answer = await api.request(method, path, who, body)
        assert status == 422, (path, answer)
        assert answer["error"]["field"] == "based_on_seq", answer
        assert "ahead of the history" in answer["error"]["message"]
    assert await snapshot(api) == before


async def test_a_header_too_long_to_read_is_logged_without_its_value(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    # aiohttp logs it itself, quoting the start of the header: the token, for an Authorization header. Whatever
    # handlers the process has (here pytest's), the record reaches them without it.
    token = PERSONA_TOKENS["hana"].encode()
    head = b"GET " + CH.encode() + b"/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + b"x" * 9000
    status, _ = await raw_request(served, head + b"\r\n\r\n")
    assert status == 400
    assert "bad HTTP request from 127.0.0.1: a request line or header longer than 8190 bytes" in caplog.text
    assert PERSONA_TOKENS["hana"] not in caplog.text
    assert all(record.exc_info is None for record in caplog.records if record.name == "aiohttp.server")


async def test_a_header_too_long_to_read_is_answered_without_its_value() -> None:
    # aiohttp's own answer quotes the start of the line it could not read, back to whoever sent it (or a proxy's
    # log); served as the arbiter serves, the answer says what was wrong and nothing of what was sent.
    token = PERSONA_TOKENS["hana"].encode()
    head = b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + b"x" * 9000 + b"\r\n\r\n"
    opened = open_arbiter(make_settings(None), in_memory=True)
    async with opened as arbiter, serving(arbiter.app, "127.0.0.1", 0) as url:
        status, body = await raw_request(int(url.rpartition(":")[2]), head)
    assert status == 400
    assert body == b"400 Bad Request: a request line or header longer than 8190 bytes"
