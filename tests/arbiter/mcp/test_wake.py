"""The wake-up WebSocket (``arbiter.mcp.wake``) on a real socket: the reference design's frames byte for byte, who may
listen, the per-token cap, the token kept out of the logs, shutdown with sockets open, and the reference's own
client (the npm ``ws`` package) when Node and that package are there.

``reference_frames.jsonl`` is what the reference's ``notify()`` sends (``JSON.stringify({type: "newMessage",
message})``, written by Node) for an agent's consume, a person's ``/add`` as ``user``, and a Japanese line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from aiohttp import WSCloseCode, WSMsgType, web

from arbiter.api.auth import ADMIN, Principal
from arbiter.mcp.route import redact
from arbiter.mcp.tools import Caller, run_tool
from arbiter.mcp.wake import WAKE, wake_frame
from arbiter.server import Arbiter, open_arbiter
from tests.conftest import ADMIN_TOKEN, PERSONA_TOKENS, make_settings
from tests.support.clock import FakeClock
from tests.support.eventually import eventually
from tests.support.node import NODE_MODULES, node_with

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from arbiter.settings import ArbiterSettings

AGENTS = {"aya": "aya-token-0123456789abcdef", "natsu": "natsu-token-0123456789abcdef"}
TOKENS = {**PERSONA_TOKENS, **AGENTS, "admin": ADMIN_TOKEN}
CHANNEL = "lobby"

HERE = Path(__file__).parent
REFERENCE_FRAMES = HERE / "reference_frames.jsonl"
AGENT_SCRIPT = HERE / "wake_agent.cjs"

# A WebSocket upgrade asked for by hand, to read the answer's status and body when it is refused.
UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


class Served:
    def __init__(self, arbiter: Arbiter, runner: web.AppRunner, url: str, session: aiohttp.ClientSession) -> None:
        self.arbiter = arbiter
        self.runner = runner
        self.url = url
        self.session = session

    @property
    def service(self) -> Any:
        return self.arbiter.service

    def key_path(self, who: str, channel: str = CHANNEL) -> str:
        return f"/key/{TOKENS[who]}/channels/{channel}/ws"

    def connect(self, who: str, *, header: bool = False) -> Any:
        """A wake-up socket as ``who``: the token in the URL (what the reference's agents use), or in the header."""
        if header:
            bearer = {"Authorization": f"Bearer {TOKENS[who]}"}
            return self.session.ws_connect(f"{self.url}/channels/{CHANNEL}/ws", headers=bearer)
        return self.session.ws_connect(self.url + self.key_path(who))

    async def refused(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
        """The status and the error's one line when an upgrade to ``path`` is refused."""
        async with self.session.get(self.url + path, headers={**UPGRADE, **(headers or {})}) as response:
            body = await response.json()
            return response.status, body["error"]["message"]


@contextlib.asynccontextmanager
async def serve(settings: ArbiterSettings) -> AsyncIterator[Served]:
    async with open_arbiter(settings, clock=FakeClock(), in_memory=True) as arbiter, aiohttp.ClientSession() as session:
        await arbiter.service.ensure_channel(CHANNEL)
        # With aiohttp's access log on (arbiter.server.serving turns it off), as a deployment behind it may have it:
        # the token-in-the-path check must see the lines that would show a path.
        runner = web.AppRunner(arbiter.app, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            [address] = [a for a in runner.addresses if isinstance(a, tuple)]
            yield Served(arbiter, runner, f"http://127.0.0.1:{address[1]}", session)
        finally:
            await runner.cleanup()


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    async with serve(make_settings(None, agent_tokens=AGENTS)) as served:
        yield served


async def next_text(ws: aiohttp.ClientWebSocketResponse, within: float = 5.0) -> str:
    message = await asyncio.wait_for(ws.receive(), within)
    assert message.type is WSMsgType.TEXT, f"expected a text frame, got {message.type}: {message.data!r}"
    assert isinstance(message.data, str)
    return message.data


async def reference_conversation(served: Served) -> None:
    """The three messages of reference_frames.jsonl, made as the reference's agents and its human make them: the
    consume tool with the agent's own id as from, the add tool (the reference's /add) as "user"."""
    said = [
        await run_tool(served.service, Caller("aya", CHANNEL), "consume",
                       {"amount": 60, "message": "Hello, everyone.", "from": "aya"}),
        await run_tool(served.service, Caller(None, CHANNEL), "add",
                       {"from": "user", "message": 'What are you two talking about? Say "hi".'}),
        await run_tool(served.service, Caller("natsu", CHANNEL), "consume",
                       {"amount": 5, "message": "分散システムの話だよ!", "from": "natsu"}),
    ]  # fmt: skip
    assert [result.model_dump()["success"] for result in said] == [True, True, True]


# --- the frames -------------------------------------------------------------------------------------------


async def test_each_new_message_wakes_with_the_reference_designs_frame_byte_for_byte(served: Served) -> None:
    expected = REFERENCE_FRAMES.read_bytes().splitlines()
    # As JSON.stringify writes them: no spaces, non-ASCII as UTF-8 rather than \u escapes, quotes escaped.
    assert len(expected) == 3 and "分散".encode() in expected[2] and b'Say \\"hi\\".' in expected[1]
    async with served.connect("aya") as ws:
        await reference_conversation(served)
        received = [await next_text(ws) for _ in expected]
    assert [frame.encode() for frame in received] == expected


async def test_the_header_form_and_every_kind_of_token_hear_the_same(served: Served) -> None:
    async with served.connect("admin", header=True) as admin, served.connect("hana", header=True) as hana:
        await reference_conversation(served)
        heard = [[await next_text(ws) for _ in range(3)] for ws in (admin, hana)]
    expected = REFERENCE_FRAMES.read_text(encoding="utf-8").splitlines()
    assert heard == [expected, expected]


async def test_only_new_messages_wake_and_people_are_named_as_the_history_names_them(served: Served) -> None:
    async with served.connect("natsu") as ws:
        await served.service.record_message(
            CHANNEL, author_id="123456789", author_name="Ken Tanaka", text="first", platform_message_id="m1"
        )
        await served.service.edit_message(CHANNEL, "m1", "first, edited")
        await served.service.delete_message(CHANNEL, "m1")
        await served.service.consume(CHANNEL, "hana", "second", amount=60)
        # Events come in order on one subscription: had the edit or the deletion sent a frame, it would come second.
        frames = [await next_text(ws) for _ in range(2)]
    assert frames == [
        '{"type":"newMessage","message":{"from":"Ken Tanaka","message":"first"}}',
        '{"type":"newMessage","message":{"from":"hana","message":"second"}}',
    ]
    # The same rule as the history tool's: a person by name, a member by the id it passes as from.
    page = await served.service.history(CHANNEL)
    [message] = page.messages
    assert wake_frame(message) == frames[1]


# --- who may listen ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "headers", "status", "reason"),
    [
        (f"/channels/{CHANNEL}/ws", {}, 401, "missing Authorization header; send 'Authorization: Bearer <token>'"),
        (f"/channels/{CHANNEL}/ws", {"Authorization": "Bearer wrong-token-0123456789"}, 401, "unknown token"),
        (f"/key/wrong-token-0123456789/channels/{CHANNEL}/ws", {}, 401, "unknown token"),
        (f"/key/{AGENTS['aya']}/channels/nowhere/ws", {}, 404, "unknown channel nowhere"),
        (f"/key/{AGENTS['aya']}/channels/no%20where/ws", {}, 422, "channel_id 'no where' is not valid"),
    ],
)
async def test_a_wrong_token_or_channel_is_refused_before_the_upgrade(
    served: Served, path: str, headers: dict[str, str], status: int, reason: str
) -> None:
    got, message = await served.refused(path, headers)
    assert (got, message.startswith(reason), "\n" in message) == (status, True, False), message
    # Nothing is left behind by a refusal: no socket counted, no channel subscribed.
    assert served.arbiter.app[WAKE].open_for(Principal("aya")) == 0
    assert not served.arbiter.hub.watching("nowhere")


async def test_the_reference_agents_client_sees_a_refusal_as_a_failed_handshake(served: Served) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await served.session.ws_connect(f"{served.url}/key/wrong-token-0123456789/channels/{CHANNEL}/ws")
    assert refused.value.status == 401


async def test_a_plain_get_is_not_an_upgrade(served: Served) -> None:
    async with served.session.get(served.url + served.key_path("aya")) as response:
        assert response.status == 400
    assert not served.arbiter.hub.watching(CHANNEL)


async def test_one_token_holds_at_most_its_cap_of_sockets_and_others_are_unaffected(served: Served) -> None:
    wake = served.arbiter.app[WAKE]
    cap = served.arbiter.settings.mcp_sessions_per_token
    assert wake.per_token == cap == 16  # the setting's default
    aya = Principal("aya")
    async with contextlib.AsyncExitStack() as stack:
        # Both URL forms count against the same token.
        sockets = [await stack.enter_async_context(served.connect("aya", header=i % 2 == 1)) for i in range(cap)]
        assert wake.open_for(aya) == cap
        status, message = await served.refused(served.key_path("aya"))
        assert (status, message) == (
            429,
            "this token has 16 wake-up sockets open, the most one token may (ARBITER_MCP_SESSIONS_PER_TOKEN); "
            "close one first",
        )
        assert await served.refused(f"/channels/{CHANNEL}/ws", {"Authorization": f"Bearer {AGENTS['aya']}"}) == (
            429,
            message,
        )
        # Another token, and the admin's, are not held back by aya's sockets.
        natsu = await stack.enter_async_context(served.connect("natsu"))
        admin = await stack.enter_async_context(served.connect("admin"))
        assert (wake.open_for(Principal("natsu")), wake.open_for(ADMIN)) == (1, 1)
        # A socket closed frees its place.
        await sockets.pop().close()
        await eventually(lambda: wake.open_for(aya) == cap - 1, what="the closed socket's place freed")
        again = await stack.enter_async_context(served.connect("aya"))
        await served.service.consume(CHANNEL, "hana", "still here", amount=60)
        expected = '{"type":"newMessage","message":{"from":"hana","message":"still here"}}'
        assert [await next_text(ws) for ws in (again, natsu, admin, sockets[0])] == [expected] * 4
    await eventually(lambda: wake.open_for(aya) == 0, what="every socket's place freed")
    await eventually(lambda: not served.arbiter.hub.watching(CHANNEL), what="every subscription given up")


async def test_the_cap_is_the_setting() -> None:
    settings = make_settings(None, agent_tokens=AGENTS, mcp_sessions_per_token=2)
    async with serve(settings) as served, served.connect("aya"), served.connect("aya", header=True):
        status, message = await served.refused(served.key_path("aya"))
        assert (status, message.startswith("this token has 2 wake-up sockets open")) == (429, True)
        async with served.connect("natsu"), served.connect("natsu"):
            pass


# --- the token in the URL, and shutdown -------------------------------------------------------------------


def test_redact_hides_the_token_of_a_wake_up_path() -> None:
    token = AGENTS["aya"]
    assert redact(f"GET /key/{token}/channels/lobby/ws HTTP/1.1") == "GET /key/***/channels/lobby/ws HTTP/1.1"
    # Percent-encoded, or with an unencoded "/" (which no route matches, but the access log still shows).
    assert redact("GET /key/a%2Bb%3D/channels/lobby/ws HTTP/1.1") == "GET /key/***/channels/lobby/ws HTTP/1.1"
    assert redact("GET /key/a/b=/channels/lobby/ws HTTP/1.1") == "GET /key/***/channels/lobby/ws HTTP/1.1"
    assert redact("GET /key/a-token/ws HTTP/1.1") == "GET /key/*** HTTP/1.1"


async def test_the_token_in_the_path_is_never_logged(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # By name too: the command line's logging quiets aiohttp's access log, and a test before this one may have run it.
    caplog.set_level(logging.INFO, logger="aiohttp.access")
    wrong = "wrong-token-0123456789abcdef"
    async with served.connect("aya") as ws:
        await served.service.consume(CHANNEL, "hana", "hello", amount=60)
        await next_text(ws)
    await served.refused(f"/key/{wrong}/channels/{CHANNEL}/ws")
    await served.refused(served.key_path("aya", "nowhere"))
    async with served.session.get(f"{served.url}/key/{AGENTS['natsu']}/ws"):
        pass  # no such route: a 404 whose line shows the path too
    # aiohttp logs a WebSocket's request line once the socket has closed.
    await eventually(lambda: caplog.text.count("/key/***/") >= 3, what="the access log's lines")
    logged = [
        value for record in caplog.records for value in (record.getMessage(), *vars(record).values())
        if isinstance(value, str)
    ]  # fmt: skip
    for token in (AGENTS["aya"], AGENTS["natsu"], wrong):
        assert not [line for line in logged if token in line]
    assert any("GET /key/***/channels/lobby/ws" in line for line in logged)


async def test_shutdown_closes_open_sockets_at_once(served: Served) -> None:
    async with served.connect("aya") as key, served.connect("admin", header=True) as header:
        stopping = asyncio.create_task(served.runner.cleanup())
        closes = [await asyncio.wait_for(ws.receive(), 5) for ws in (key, header)]
        # Far within aiohttp's grace period (a minute), which an open socket would otherwise hold shutdown for.
        await asyncio.wait_for(stopping, 5)
    assert [message.type for message in closes] == [WSMsgType.CLOSE] * 2
    assert [message.data for message in closes] == [WSCloseCode.GOING_AWAY] * 2
    assert served.arbiter.app[WAKE].open_for(Principal("aya")) == 0


# --- the reference design's own client --------------------------------------------------------------------


async def test_the_reference_agents_websocket_client_wakes_on_each_message(served: Served) -> None:
    """The npm ws client, as the reference's Companion opens it: ``new WebSocket(WS_URL)`` with the token in the
    URL and nothing else set."""
    node = node_with("ws")
    url = served.url.replace("http://", "ws://") + served.key_path("aya")
    agent = await asyncio.create_subprocess_exec(
        node, str(AGENT_SCRIPT), str(NODE_MODULES / "ws"), url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert agent.stdout is not None and agent.stderr is not None

    async def line() -> str:
        read = await asyncio.wait_for(agent.stdout.readline(), 10)
        assert read, f"the agent ended: {(await agent.stderr.read()).decode(errors='replace')}"
        return read.decode("utf-8").rstrip("\n")

    try:
        assert await line() == "open"
        await reference_conversation(served)
        frames = [await line() for _ in range(3)]
        await served.runner.cleanup()
        assert await line() == f"close {WSCloseCode.GOING_AWAY}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            agent.kill()
        await agent.wait()
    expected = REFERENCE_FRAMES.read_text(encoding="utf-8").splitlines()
    assert frames == [f"text {frame}" for frame in expected]
