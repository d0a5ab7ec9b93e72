"""The MCP endpoint, driven by the ``mcp`` SDK's own client over a real socket: the tools, their errors, who may act
as whom, the pool and the idle cap shared with HTTP callers, and the notifications.

Clients speak the 2025 protocol with a session (``legacy``: what the reference design's agents, the Inspector and
desktop clients speak) unless a test says otherwise; the 2026-07-28 protocol is covered where it differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from typing import TYPE_CHECKING, Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import ADMIN_TOKEN, PERSONA_TOKENS
from tests.support.mcp_live import AGENTS, CHANNEL, INITIALIZE, live_arbiter

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from arbiter.server import Arbiter
    from tests.support.arbiters import Api

TOKENS = {**PERSONA_TOKENS, **AGENTS, "admin": ADMIN_TOKEN}
HISTORY = f"aizuchi://channels/{CHANNEL}/history"

REFERENCE_TOOLS = {"consume", "status", "history"}
MEMBER_TOOLS = {*REFERENCE_TOOLS, "claim", "speak", "release", "register"}


class Served:
    def __init__(self, arbiter: Arbiter, url: str, api: Api) -> None:
        self.arbiter = arbiter
        self.url = url
        self.api = api

    @property
    def service(self) -> Any:
        return self.arbiter.service

    @contextlib.asynccontextmanager
    async def client(
        self, who: str, *, path: str = f"/channels/{CHANNEL}/mcp", mode: str = "legacy", **options: Any
    ) -> AsyncIterator[Client]:
        """An SDK client as ``who``, its token in the Authorization header."""
        headers = {"Authorization": f"Bearer {TOKENS[who]}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(self.url + path, http_client=http), mode=mode, **options) as client,
        ):
            yield client

    async def level(self) -> int:
        return int((await self.api.status(CHANNEL))["level"])

    async def history(self) -> list[Any]:
        return await self.api.history(CHANNEL)


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    async with live_arbiter() as live:
        yield Served(live.arbiter, live.url, live.api)


def text(result: types.CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


# --- listing ----------------------------------------------------------------------------------------------


async def test_a_member_lists_the_reference_tools_with_its_arguments_and_ours(served: Served) -> None:
    async with served.client("aya") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == MEMBER_TOOLS
    consume = tools["consume"]
    assert {"amount", "message", "from"} <= set(consume.input_schema["properties"])
    assert consume.input_schema["required"] == ["message"]
    assert consume.output_schema is not None
    assert {"success", "resource", "message"} <= set(consume.output_schema["required"])
    assert "resource" in (tools["status"].output_schema or {})["required"]
    history = tools["history"].output_schema or {}
    assert "history" in history["required"]
    entry = history["$defs"]["HistoryEntry"]
    assert set(entry["properties"]) == {"from", "message"}


async def test_the_admin_lists_the_reading_tools_and_add(served: Served) -> None:
    async with served.client("admin") as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert names == {"status", "history", "add"}


# --- the reference's tools, as its agents call them --------------------------------------------------------


async def test_the_reference_agents_calls_work_unchanged(served: Served) -> None:
    """What the reference's companion does on each turn: history, status, consume with its own id as from."""
    async with served.client("aya") as client:
        assert (await client.call_tool("history", {})).structured_content == {
            "history": [],
            "next_after": 0,
            "has_more": False,
        }
        status = await client.call_tool("status", {})
        assert status.structured_content is not None and status.structured_content["resource"] == 100
        spoken = await client.call_tool("consume", {"amount": 60, "message": "分散システムの話をしよう", "from": "aya"})
        nod = await client.call_tool("consume", {"amount": 5, "message": "いいね", "from": "aya"})
        more = await client.call_tool("consume", {"amount": 60, "message": "もう一つ", "from": "aya"})
        history = await client.call_tool("history", {})
    assert spoken.structured_content == {
        "success": True,
        "resource": 40,
        "message": "Resource consumed.",
        "tier": "remark",
        "seq": 1,
    }
    assert nod.structured_content is not None and nod.structured_content["success"] is True
    assert nod.structured_content["tier"] == "aizuchi"
    # As in the reference, not having enough is an answer (success false), not an error.
    assert not more.is_error
    assert more.structured_content is not None
    assert more.structured_content["success"] is False
    assert more.structured_content["message"] == "Not enough resource."
    assert more.structured_content["resource"] == 35
    # The text content is the same JSON, for clients that read only text.
    assert '"success":true' in text(spoken)
    assert history.structured_content is not None
    assert history.structured_content["history"] == [
        {"from": "aya", "message": "分散システムの話をしよう"},
        {"from": "aya", "message": "いいね"},
    ]
    assert await served.level() == 35


async def test_from_may_be_left_out_and_is_the_tokens_member(served: Served) -> None:
    async with served.client("natsu") as client:
        result = await client.call_tool("consume", {"amount": 5, "message": "すごい!"})
    assert result.structured_content is not None and result.structured_content["success"] is True
    [message] = await served.history()
    assert (message["author_id"], message["author_kind"]) == ("natsu", "persona")


async def test_numbers_are_numbers_as_in_the_http_api(served: Served) -> None:
    # Refused as text, as the HTTP API refuses them; the schema says integer (not "integer or null"), so that clients
    # which convert what they are given (the MCP Inspector's command line) send a number.
    async with served.client("natsu") as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        as_text = await client.call_tool("consume", {"amount": "5", "message": "へえ"})
        as_float = await client.call_tool("consume", {"amount": 5.0, "message": "へえ"})
        half = await client.call_tool("consume", {"amount": 5.5, "message": "へえ"})
    assert listed["consume"].input_schema["properties"]["amount"]["type"] == "integer"
    assert as_text.is_error and text(as_text).startswith("amount:")
    assert half.is_error and text(half).startswith("amount:")
    assert as_float.structured_content is not None and as_float.structured_content["success"] is True
    body = {"persona": "natsu", "text": "へえ", "amount": "5"}
    status, _ = await served.api.request("POST", f"/v1/channels/{CHANNEL}/consume", "natsu", body)
    assert status == 422
    assert len(await served.history()) == 1


async def test_people_appear_in_the_history_by_name_and_members_by_id(served: Served) -> None:
    await served.api.say(CHANNEL, "u1234", "こんにちは!あなたたちは誰ですか?")
    await served.api.consume(CHANNEL, "hana", "remark", "I'm Hana, nice to meet you.")
    async with served.client("aya") as client:
        result = await client.call_tool("history", {"limit": 5})
    assert result.structured_content is not None
    assert result.structured_content["history"] == [
        {"from": "U1234", "message": "こんにちは!あなたたちは誰ですか?"},
        {"from": "hana", "message": "I'm Hana, nice to meet you."},
    ]


# --- our tools --------------------------------------------------------------------------------------------


async def test_claim_speak_and_release_go_through_the_rules(served: Served) -> None:
    async with served.client("aya") as client:
        held = await client.call_tool("claim", {"tier": "remark"})
        assert held.structured_content is not None and held.structured_content["granted"] is True
        claim_id = held.structured_content["claim"]["claim_id"]
        assert await served.level() == 40
        spoken = await client.call_tool("speak", {"claim_id": claim_id, "message": "ok", "tier": "aizuchi"})
        assert spoken.structured_content is not None
        assert (spoken.structured_content["granted"], spoken.structured_content["refunded"]) == (True, 55)
        again = await client.call_tool("claim", {"tier": "aizuchi"})
        assert again.structured_content is not None
        # One nod per message: the rules that hold over HTTP hold here.
        assert (again.structured_content["granted"], again.structured_content["reason"]) == (False, "nodded")
        held = await client.call_tool("claim", {"tier": "long"})
        assert held.structured_content is not None and held.structured_content["granted"] is True
        released = await client.call_tool("release", {"claim_id": held.structured_content["claim"]["claim_id"]})
        assert released.structured_content is not None and released.structured_content["claim"]["state"] == "released"
        status = await client.call_tool("status", {})
    assert status.structured_content is not None
    assert status.structured_content["tiers"]["remark"]["max_length"] > 0
    assert status.structured_content["you"]["enabled"] is True
    assert await served.level() == 95


async def test_history_pages_after_a_seq(served: Served) -> None:
    for index in range(5):
        await served.api.say(CHANNEL, "ken", f"message {index}")
    async with served.client("aya") as client:
        first = await client.call_tool("history", {"after": 0, "limit": 2})
        latest = await client.call_tool("history", {"limit": 2})
    assert first.structured_content == {
        "history": [{"from": "Ken", "message": "message 0"}, {"from": "Ken", "message": "message 1"}],
        "next_after": 2,
        "has_more": True,
    }
    assert latest.structured_content is not None
    assert [entry["message"] for entry in latest.structured_content["history"]] == ["message 3", "message 4"]


async def test_an_agent_registers_its_name_and_is_listed_as_an_agent(served: Served) -> None:
    async with served.client("aya") as client:
        result = await client.call_tool("register", {"display_name": "Aya", "aliases": ["あや"], "color": "#3366cc"})
    assert result.structured_content == {"id": "aya", "display_name": "Aya"}
    listed = {member["id"]: member for member in (await served.api.call("GET", "/v1/personas"))["personas"]}
    assert (listed["aya"]["kind"], listed["aya"]["display_name"]) == ("agent", "Aya")
    assert listed["natsu"]["kind"] == "agent"
    assert listed["hana"]["kind"] == "persona"
    # Its name now gives it the floor: a person naming it addresses it, as with a persona.
    await served.api.say(CHANNEL, "ken", "あや, what do you think?")
    assert (await served.api.status(CHANNEL))["priority"] == ["aya"]


async def test_the_admin_adds_a_persons_message_for_free(served: Served) -> None:
    async with served.client("admin") as client:
        result = await client.call_tool("add", {"from": "user", "message": "こんにちは!"})
    assert result.structured_content == {"success": True, "seq": 1}
    [message] = await served.history()
    assert (message["author_name"], message["author_kind"], message["text"]) == ("user", "human", "こんにちは!")
    assert await served.level() == 100


# --- bad arguments: a tool error naming the field, and nothing changes ---------------------------------------


@pytest.mark.parametrize(
    ("who", "tool", "arguments", "names"),
    [
        ("aya", "consume", {"amount": 0, "message": "hi"}, "amount:"),
        ("aya", "consume", {"amount": "sixty", "message": "hi"}, "amount:"),
        ("aya", "consume", {"amount": 5, "message": "   "}, "message:"),
        ("aya", "consume", {"amount": 5}, "message:"),
        ("aya", "consume", {"message": "hi"}, "amount:"),
        ("aya", "consume", {"amount": 5, "message": "hi", "amout": 5}, "amout:"),
        ("aya", "consume", {"amount": 5, "message": "hi", "channel": "elsewhere"}, "channel:"),
        ("aya", "status", {"channel": "bad channel!"}, "channel:"),
        ("aya", "history", {"limit": 0}, "limit:"),
        ("aya", "history", {"after": -1}, "after:"),
        ("aya", "claim", {"tier": "huge"}, "tier:"),
        ("aya", "speak", {"claim_id": "no such/claim", "message": "hi"}, "claim_id:"),
        ("aya", "speak", {"claim_id": "nosuchclaim", "message": "hi"}, "claim_id:"),
        ("aya", "release", {}, "claim_id:"),
        ("aya", "register", {"display_name": "Aya", "color": "red"}, "color:"),
        ("admin", "add", {"message": "hi"}, "from:"),
    ],
)
async def test_bad_arguments_get_a_tool_error_naming_the_field(
    served: Served, who: str, tool: str, arguments: dict[str, Any], names: str
) -> None:
    await served.api.say(CHANNEL, "ken", "hello")
    before = (await served.level(), await served.history(), await served.api.call("GET", "/v1/personas"))
    async with served.client(who) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error, result
    assert text(result).startswith(names), text(result)
    assert "\n" not in text(result)
    assert (await served.level(), await served.history(), await served.api.call("GET", "/v1/personas")) == before


async def test_without_a_channel_in_the_url_each_tool_names_its_own(served: Served) -> None:
    async with served.client("aya", path="/mcp") as client:
        missing = await client.call_tool("status", {})
        unknown = await client.call_tool("status", {"channel": "nowhere"})
        status = await client.call_tool("status", {"channel": CHANNEL})
    assert missing.is_error and text(missing).startswith("channel: no channel")
    assert unknown.is_error and text(unknown) == "channel: unknown channel nowhere"
    assert status.structured_content is not None and status.structured_content["channel_id"] == CHANNEL


# --- acting as someone else ----------------------------------------------------------------------------------


async def test_an_agent_cannot_speak_as_another_member(served: Served) -> None:
    async with served.client("aya") as client:
        result = await client.call_tool("consume", {"amount": 5, "message": "I am hana", "from": "hana"})
        admin_only = await client.call_tool("add", {"from": "user", "message": "free speech"})
    assert result.is_error
    assert text(result) == "from: this token belongs to aya; it cannot speak as hana"
    assert admin_only.is_error and text(admin_only) == "add needs the admin token"
    assert await served.history() == []
    assert await served.level() == 100


async def test_the_admin_token_cannot_speak_as_a_member(served: Served) -> None:
    async with served.client("admin") as client:
        result = await client.call_tool("consume", {"amount": 5, "message": "hi", "from": "aya"})
    assert result.is_error and text(result) == "consume needs a persona's or an agent's token"
    assert await served.history() == []


async def test_a_token_in_the_path_acts_as_its_member(served: Served) -> None:
    async with Client(f"{served.url}/key/{AGENTS['natsu']}/channels/{CHANNEL}/mcp", mode="legacy") as client:
        spoken = await client.call_tool("consume", {"amount": 5, "message": "なるほど", "from": "natsu"})
        other = await client.call_tool("consume", {"amount": 5, "message": "なるほど", "from": "aya"})
    assert spoken.structured_content is not None and spoken.structured_content["success"] is True
    assert other.is_error and text(other).startswith("from: this token belongs to natsu")
    assert [m["author_id"] for m in await served.history()] == ["natsu"]


@pytest.mark.parametrize("path", ["/key/not-a-token-of-anyone/channels/lobby/mcp", "/channels/lobby/mcp"])
async def test_an_unknown_or_missing_token_is_refused_before_the_protocol(served: Served, path: str) -> None:
    async with aiohttp.ClientSession() as session:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        async with session.post(served.url + path, json=body) as response:
            answer = await response.json()
    assert response.status == 401
    assert answer["error"]["code"] == "unauthorized"


async def test_a_session_is_served_only_to_the_token_that_opened_it(served: Served) -> None:
    url = f"{served.url}/channels/{CHANNEL}/mcp"
    accept = {"Accept": "application/json, text/event-stream"}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=INITIALIZE, headers={**accept, "Authorization": f"Bearer {AGENTS['aya']}"}) as r:
            assert r.status == 200
            session = {"Mcp-Session-Id": r.headers["Mcp-Session-Id"], "Mcp-Protocol-Version": "2025-11-25"}
        as_natsu = {**accept, **session, "Authorization": f"Bearer {AGENTS['natsu']}"}
        async with http.post(url, json=listing, headers=as_natsu) as stolen:
            assert stolen.status == 404
        as_aya = {**accept, **session, "Authorization": f"Bearer {AGENTS['aya']}"}
        async with http.post(url, json=listing, headers=as_aya) as own:
            assert own.status == 200
            assert '"consume"' in await own.text()


# --- the pool and the idle cap, shared with HTTP callers --------------------------------------------------


async def test_the_pool_holds_across_mcp_and_http_callers_at_once(served: Served) -> None:
    await served.api.call("PATCH", f"/v1/channels/{CHANNEL}/settings", body={"capacity": 1000, "idle_cap": 1000})

    async with served.client("aya") as aya, served.client("natsu") as natsu:

        async def over_mcp(client: Client, index: int) -> bool:
            result = await client.call_tool("consume", {"amount": 60, "message": f"point {index}"})
            assert result.structured_content is not None
            return bool(result.structured_content["success"])

        async def over_http(who: str, index: int) -> bool:
            body = {"tier": "remark", "text": f"point {index}"}
            answer = await served.api.call("POST", f"/v1/channels/{CHANNEL}/consume", who, body)
            return bool(answer["granted"])

        calls = [over_mcp(aya, i) for i in range(10)] + [over_mcp(natsu, i) for i in range(10)]
        calls += [over_http("hana", i) for i in range(10)] + [over_http("kai", i) for i in range(10)]
        granted = await asyncio.gather(*calls)
    # 1000 // 60: sixteen remarks and no more, whoever asked and however; nothing comes back (the clock stands).
    assert sum(granted) == 16
    assert await served.level() == 1000 - 16 * 60
    assert len(await served.history()) == 16


async def test_the_idle_cap_counts_mcp_and_http_speakers_alike(served: Served) -> None:
    await served.api.call("PATCH", f"/v1/channels/{CHANNEL}/settings", body={"capacity": 1000, "idle_cap": 3})
    async with served.client("aya") as aya:
        first = await aya.call_tool("consume", {"amount": 60, "message": "one"})
        await served.api.consume(CHANNEL, "hana", "remark", "two")
        third = await aya.call_tool("consume", {"tier": "remark", "message": "three"})
        capped = await aya.call_tool("consume", {"amount": 60, "message": "four"})
        over_http = await served.api.call(
            "POST", f"/v1/channels/{CHANNEL}/consume", "kai", {"tier": "remark", "text": "four"}
        )
        await served.api.say(CHANNEL, "ken", "still here")
        after_a_person = await aya.call_tool("consume", {"amount": 60, "message": "five"})
    assert first.structured_content is not None and third.structured_content is not None
    assert first.structured_content["success"] and third.structured_content["success"]
    assert capped.structured_content is not None
    assert (capped.structured_content["success"], capped.structured_content["reason"]) == (False, "idle_cap")
    assert (over_http["granted"], over_http["reason"]) == (False, "idle_cap")
    assert after_a_person.structured_content is not None and after_a_person.structured_content["success"] is True


# --- notifications -----------------------------------------------------------------------------------------


async def test_a_subscribed_session_hears_each_new_message(served: Served) -> None:
    heard: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification) and message.method == "notifications/resources/updated":
            await heard.put(message.params.uri)

    async with served.client("aya", message_handler=on_message) as client:
        resources = await client.list_resources()
        assert [str(resource.uri) for resource in resources.resources] == [HISTORY]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # resources/subscribe is the 2025 protocol's way, deprecated after it
            await client.subscribe_resource(HISTORY)
        await served.api.consume(CHANNEL, "hana", "remark", "Over HTTP.")
        assert await asyncio.wait_for(heard.get(), 10) == HISTORY
        await served.api.say(CHANNEL, "ken", "And a person.")
        assert await asyncio.wait_for(heard.get(), 10) == HISTORY
        read = await client.read_resource(HISTORY)
        [contents] = read.contents
        assert isinstance(contents, types.TextResourceContents)
        assert '{"from":"Ken","message":"And a person."}' in contents.text
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.unsubscribe_resource(HISTORY)
        await served.api.say(CHANNEL, "ken", "Unheard.")
        await client.call_tool("status", {})  # a round trip after the message: a notification would be here by now
        await asyncio.sleep(0.2)  # a span in which nothing may come
        assert heard.empty()
    # The channel is no longer watched, so alone on SQLite its events are not even built.
    assert not served.arbiter.hub.watching(CHANNEL)


async def test_a_2026_client_hears_new_messages_on_its_listen_stream(served: Served) -> None:
    async with served.client("aya", mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        async with client.listen(resource_subscriptions=[HISTORY]) as subscription:
            await served.api.consume(CHANNEL, "kai", "aizuchi", "うん")
            event = await asyncio.wait_for(anext(aiter(subscription)), 10)
        assert getattr(event, "uri", None) == HISTORY
        result = await client.call_tool("consume", {"amount": 60, "message": "分かった"})
    assert result.structured_content is not None and result.structured_content["success"] is True
