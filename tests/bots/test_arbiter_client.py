"""The persona's client of the arbiter's HTTP API: each call against the real arbiter, and how failures are
translated - a 4xx is ArbiterRejected with the arbiter's code and field (retrying will not help), a 5xx, a
refused connection, a timeout or a garbled answer is ArbiterUnavailable (try again later)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from arbiter import contract as wire
from arbiter.contract import Tier
from bots.arbiter_client import ArbiterClient
from bots.errors import ArbiterRejected, ArbiterUnavailable
from tests.bots.conftest import CHANNEL
from tests.support.eventually import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from tests.support.fleet import Live


@pytest.fixture
def aoi(live: Live) -> ArbiterClient:
    return live.client("aoi")


# --- the calls, against the real arbiter ----------------------------------------------------------------


async def test_claim_speak_and_link_round_trip(live: Live, aoi: ArbiterClient) -> None:
    human = await live.say(CHANNEL, "Aoi, hello!")

    claimed = await aoi.claim(CHANNEL, wire.ClaimRequest(tier=Tier.REMARK, based_on_seq=human))
    assert claimed.granted and claimed.claim is not None
    assert (await aoi.status(CHANNEL)).claim == claimed.claim
    spoken = await aoi.speak(CHANNEL, claimed.claim.claim_id, wire.SpeakRequest(text="Hi!", tier=Tier.AIZUCHI))
    assert spoken.granted and spoken.message is not None
    assert spoken.refunded == 55  # spoke a cheaper tier than claimed: the difference comes back at once
    linked = await aoi.link(CHANNEL, spoken.message.seq, "discord-1")
    assert linked.platform_message_id == "discord-1"
    page = await aoi.history(CHANNEL, after=human, limit=5)
    assert [(m.author_id, m.text) for m in page.messages] == [("aoi", "Hi!")]
    assert (page.next_after, page.has_more) == (spoken.message.seq, False)


async def test_release_consume_retract_usage_and_register(live: Live, aoi: ArbiterClient) -> None:
    claimed = await aoi.claim(CHANNEL, wire.ClaimRequest(tier=Tier.LONG))
    assert claimed.claim is not None
    released = await aoi.release(CHANNEL, claimed.claim.claim_id)
    assert released.granted and released.level == released.capacity

    said = await aoi.consume(CHANNEL, wire.ConsumeRequest(text="Morning!", tier=Tier.AIZUCHI))
    assert said.granted and said.message is not None
    retracted = await aoi.retract(CHANNEL, said.message.seq)
    assert (retracted.seq, retracted.refunded) == (said.message.seq, 5)

    usage = await aoi.report_usage(CHANNEL, wire.UsageReport(prompt_tokens=30, completion_tokens=12))
    assert usage.tokens_today == 42

    await aoi.register("aoi", wire.PersonaRegistration(display_name="Aoi", aliases=["Blue"]))
    assert (await live.service.settings(CHANNEL)).personas["aoi"].display_name == "Aoi"


async def test_a_refusal_is_an_answer_not_an_error(live: Live, aoi: ArbiterClient) -> None:
    await live.service.update_settings(CHANNEL, {"paused": True})

    result = await aoi.claim(CHANNEL, wire.ClaimRequest(tier=Tier.AIZUCHI))

    assert (result.granted, result.reason) == (False, wire.RefusalReason.PAUSED)


async def test_the_event_stream_replays_after_a_seq_then_goes_live(live: Live, aoi: ArbiterClient) -> None:
    first = await live.say(CHANNEL, "one")
    second = await live.say(CHANNEL, "two")
    seen: list[wire.ArbiterEvent] = []

    async def follow() -> None:
        async for event in aoi.events(CHANNEL, after=first):
            seen.append(event)
            if isinstance(event, wire.MessageEvent) and event.message.text == "three":
                return

    following = asyncio.create_task(follow())
    await eventually(lambda: any(isinstance(e, wire.LevelEvent) for e in seen))  # replay done, live from here
    third = await live.say(CHANNEL, "three")
    await asyncio.wait_for(following, 5)

    assert [e.message.seq for e in seen if isinstance(e, wire.MessageEvent)] == [second, third]


async def test_the_event_stream_yields_each_kind_as_its_model(live: Live, aoi: ArbiterClient) -> None:
    seen: list[wire.ArbiterEvent] = []

    async def follow() -> None:
        async for event in aoi.events(CHANNEL, after=0):
            seen.append(event)
            if isinstance(event, wire.ClearedEvent):
                return

    following = asyncio.create_task(follow())
    await eventually(lambda: bool(seen))  # the level: live from here
    said = await live.service.record_message(
        CHANNEL, author_id="yui", author_name="Yui", text="typo hre", platform_message_id="d-1"
    )
    await live.service.edit_message(CHANNEL, "d-1", "typo here")
    await live.service.delete_message(CHANNEL, "d-1")
    spoken = await live.service.consume(CHANNEL, "aoi", "A post that will fail.", tier=Tier.REMARK)
    assert spoken.message is not None, spoken
    await live.service.retract(CHANNEL, "aoi", spoken.message.seq)
    await live.service.update_settings(CHANNEL, {"topic": "udon"})
    claimed = await live.service.claim(CHANNEL, "aoi", Tier.REMARK)
    assert claimed.claim is not None, claimed
    notes = wire.MemoryUpdate(seq=spoken.message.seq, state=wire.DialogueState(topic="udon"))
    await live.service.release(CHANNEL, "aoi", claimed.claim.claim_id, memory=notes)
    await live.service.clear_history(CHANNEL)
    await asyncio.wait_for(following, 5)

    assert {type(event) for event in seen} == set(wire.EVENT_MODELS)
    [remembered] = [e for e in seen if isinstance(e, wire.MemoryEvent)]
    assert remembered.memory is not None
    assert (remembered.persona, remembered.memory.seq, remembered.memory.state.topic) == ("aoi", notes.seq, "udon")
    assert [e.message.text for e in seen if isinstance(e, wire.MessageEvent)] == ["typo hre", "A post that will fail."]
    assert [(e.message.seq, e.message.text) for e in seen if isinstance(e, wire.EditedEvent)] == [
        (said.seq, "typo here")
    ]
    assert [e.seq for e in seen if isinstance(e, wire.DeletedEvent)] == [said.seq]
    assert [e.seq for e in seen if isinstance(e, wire.RetractedEvent)] == [spoken.message.seq]
    assert [e.claim.state for e in seen if isinstance(e, wire.ClaimEvent)] == [
        wire.SpendState.SPOKEN,
        wire.SpendState.RETRACTED,
        wire.SpendState.HELD,
        wire.SpendState.RELEASED,
    ]
    assert [e.settings.topic for e in seen if isinstance(e, wire.SettingsEvent)] == ["udon"]
    assert [e.last_seq for e in seen if isinstance(e, wire.ClearedEvent)] == [spoken.message.seq]


async def test_the_event_stream_skips_frames_it_cannot_read(caplog: pytest.LogCaptureFixture) -> None:
    # A newer arbiter may send kinds this client does not know; a frame that breaks the contract must not end the
    # stream either (reconnecting would only bring it again). Both are skipped; what follows still arrives.
    level = wire.LevelEvent(channel_id=CHANNEL, level=90, capacity=100, at=1.0)
    frames = [
        '{"type": "weather", "channel_id": "lounge", "sky": "clear"}',
        '{"type": "deleted", "channel_id": "lounge", "seq": "not a seq"}',
        level.model_dump_json(),
    ]

    async def stream(request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        for frame in frames:
            await socket.send_str(frame)
        await socket.close()
        return socket

    async with stub(stream) as url, aiohttp.ClientSession() as session:
        client = ArbiterClient(session, url, "aoi-token-0123456789abcdef")
        async with asyncio.timeout(5):
            received = [event async for event in client.events(CHANNEL)]

    assert received == [level]
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert len(warnings) == 1 and "skipping a malformed event" in warnings[0], warnings


# --- 4xx: rejected, with the arbiter's code and field ----------------------------------------------------


async def _speak_on_unknown_claim(client: ArbiterClient, _live: Live) -> object:
    return await client.speak(CHANNEL, "no-such-claim", wire.SpeakRequest(text="hi"))


async def _status_of_unknown_channel(client: ArbiterClient, _live: Live) -> object:
    return await client.status("nowhere")


async def _release_anothers_claim(client: ArbiterClient, live: Live) -> object:
    claimed = await live.service.claim(CHANNEL, "ben", Tier.AIZUCHI)
    return await client.release(CHANNEL, claimed.claim.claim_id)


async def _retract_a_human_message(client: ArbiterClient, live: Live) -> object:
    return await client.retract(CHANNEL, await live.say(CHANNEL, "mine, not yours"))


async def _link_an_id_twice(client: ArbiterClient, live: Live) -> object:
    one = await live.service.consume(CHANNEL, "aoi", "one", tier=Tier.AIZUCHI)
    two = await live.service.consume(CHANNEL, "aoi", "two", tier=Tier.REMARK)  # a nod to a nod is refused
    await client.link(CHANNEL, one.message.seq, "discord-7")
    return await client.link(CHANNEL, two.message.seq, "discord-7")


async def _based_on_the_future(client: ArbiterClient, _live: Live) -> object:
    return await client.claim(CHANNEL, wire.ClaimRequest(tier=Tier.REMARK, based_on_seq=999))


async def _register_as_another(client: ArbiterClient, _live: Live) -> object:
    await client.register("ben", wire.PersonaRegistration(display_name="Not Ben"))
    return None


async def _history_limit_out_of_range(client: ArbiterClient, _live: Live) -> object:
    return await client.history(CHANNEL, limit=0)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        pytest.param(_speak_on_unknown_claim, (404, "unknown_claim", "claim_id"), id="unknown-claim"),
        pytest.param(_status_of_unknown_channel, (404, "unknown_channel", "channel_id"), id="unknown-channel"),
        pytest.param(_release_anothers_claim, (403, "forbidden", "claim_id"), id="another-personas-claim"),
        pytest.param(_retract_a_human_message, (403, "forbidden", "seq"), id="retract-what-is-not-yours"),
        pytest.param(_link_an_id_twice, (422, "invalid", "platform_message_id"), id="platform-id-taken"),
        pytest.param(_based_on_the_future, (422, "invalid", "based_on_seq"), id="based-on-a-future-seq"),
        pytest.param(_register_as_another, (403, "forbidden", None), id="register-as-another-persona"),
        pytest.param(_history_limit_out_of_range, (422, "invalid_field", "limit"), id="query-out-of-range"),
    ],
)
async def test_a_4xx_is_rejected_with_the_arbiters_code_and_field(
    live: Live,
    aoi: ArbiterClient,
    call: Callable[[ArbiterClient, Live], Awaitable[object]],
    expected: tuple[int, str, str | None],
) -> None:
    with pytest.raises(ArbiterRejected) as caught:
        await call(aoi, live)

    error = caught.value
    status, code, field = expected
    assert (error.status, error.code) == (status, code), error
    if field is not None:
        assert error.field == field
    assert error.message  # the arbiter's own words, for the log


async def test_a_wrong_token_is_rejected_as_unauthorized(live: Live) -> None:
    stranger = ArbiterClient(live.session, live.url, "not-a-token-of-anyone-at-all")

    with pytest.raises(ArbiterRejected) as caught:
        await stranger.status(CHANNEL)

    assert (caught.value.status, caught.value.code) == (401, "unauthorized")


async def test_the_stream_of_an_unknown_channel_or_a_wrong_token_is_rejected(live: Live, aoi: ArbiterClient) -> None:
    stranger = ArbiterClient(live.session, live.url, "not-a-token-of-anyone-at-all")
    for client, channel, status in ((aoi, "nowhere", 404), (stranger, CHANNEL, 401)):
        with pytest.raises(ArbiterRejected) as caught:
            async for _event in client.events(channel):
                pass
        assert caught.value.status == status


# --- 5xx, no connection, timeouts, garbage: unavailable --------------------------------------------------


@contextlib.asynccontextmanager
async def stub(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> AsyncIterator[str]:
    """A server that answers every request with ``handler``: an arbiter having a bad day."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(shutdown_timeout=0.1)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()


def answering(status: int, body: str, content_type: str = "application/json") -> Any:
    async def handler(_request: web.Request) -> web.Response:
        return web.Response(status=status, text=body, content_type=content_type)

    return handler


async def slow(_request: web.Request) -> web.Response:
    await asyncio.sleep(60)  # cancelled when the stub stops
    return web.Response(text="{}")


ERROR_BODY = '{"error": {"code": "storage_unavailable", "message": "database down"}}'


@pytest.mark.parametrize(
    "handler",
    [
        pytest.param(answering(500, ERROR_BODY), id="500"),
        pytest.param(answering(503, ERROR_BODY), id="503"),
        pytest.param(answering(502, "<html>Bad Gateway</html>", "text/html"), id="502-from-a-proxy"),
        pytest.param(answering(200, '{"granted": "perhaps"}'), id="200-with-an-unexpected-body"),
        pytest.param(answering(200, "not json"), id="200-not-json"),
        pytest.param(slow, id="timeout"),
    ],
)
async def test_server_trouble_is_unavailable(handler: Any) -> None:
    async with stub(handler) as url, aiohttp.ClientSession() as session:
        client = ArbiterClient(session, url, "aoi-token-0123456789abcdef", timeout_s=0.2)
        # The client's own time limit must end a hung call; the test's outer one only guards against a hang.
        async with asyncio.timeout(3):
            with pytest.raises(ArbiterUnavailable):
                await client.claim(CHANNEL, wire.ClaimRequest(tier=Tier.AIZUCHI))
            with pytest.raises(ArbiterUnavailable):
                async for _event in client.events(CHANNEL):
                    pass


async def test_a_4xx_that_is_not_the_arbiters_json_is_still_rejected() -> None:
    async with (
        stub(answering(404, "<html>Not Found</html>", "text/html")) as url,
        aiohttp.ClientSession() as session,
    ):
        client = ArbiterClient(session, url, "aoi-token-0123456789abcdef")
        with pytest.raises(ArbiterRejected) as caught:
            await client.status(CHANNEL)

    assert (caught.value.status, caught.value.code) == (404, "http_error")
    assert "Not Found" in caught.value.message


async def test_a_refused_connection_is_unavailable() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago, and nothing listens on now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with aiohttp.ClientSession() as session:
        client = ArbiterClient(session, f"http://127.0.0.1:{port}", "aoi-token-0123456789abcdef")
        with pytest.raises(ArbiterUnavailable):
            await client.status(CHANNEL)
        with pytest.raises(ArbiterUnavailable):
            async for _event in client.events(CHANNEL):
                pass
