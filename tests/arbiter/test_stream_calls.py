"""A persona's requests carried on the multiplexed stream (``calls``): each is answered by a reply frame with the
status and body its HTTP request gets, granted or refused; only the endpoints a persona may call are offered, and
only as a persona the stream acts for."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import WSMsgType

from tests.conftest import auth
from tests.support.events import frames_until

if TYPE_CHECKING:
    from aiohttp import ClientWebSocketResponse
    from aiohttp.test_utils import TestClient

    from arbiter.server import Arbiter

    Socket = ClientWebSocketResponse[Any]

PATH = "/v1/events"


async def call(ws: Socket, number: int, method: str, path: str, body: Any = None, **more: Any) -> dict[str, Any]:
    """One call on the stream, and its reply (the frames before it, events, are read past)."""
    sent = {"id": number, "method": method, "path": path, **more}
    if body is not None:
        sent["body"] = json.dumps(body)
    await ws.send_str(json.dumps({"calls": [sent]}))
    frames = await frames_until(ws, lambda f: f["type"] == "reply" and f["id"] == number)
    return frames[-1]


async def over_http(client: TestClient[Any, Any], method: str, path: str, body: Any = None) -> tuple[int, Any]:
    async with client.request(method, path, json=body, headers=auth("hana")) as response:
        return response.status, (await response.json() if response.status != 204 else None)


async def test_a_call_is_answered_as_its_http_request_is_granted_or_refused(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    await arbiter.service.ensure_channel("lobby")
    async with client.ws_connect(PATH, headers=auth("hana")) as ws:
        claimed = await call(ws, 1, "POST", "/v1/channels/lobby/claims", {"tier": "remark"})
        assert (claimed["status"], claimed["channel_id"]) == (200, "lobby")
        claim = json.loads(claimed["body"])
        assert claim["granted"] is True and claim["claim"]["persona"] == "hana"
        speak = f"/v1/channels/lobby/claims/{claim['claim']['claim_id']}/speak"
        spoken = await call(ws, 2, "POST", speak, {"text": "Hello on the stream."})
        assert spoken["status"] == 200
        seq = json.loads(spoken["body"])["message"]["seq"]
        page = (await arbiter.service.history("lobby")).messages
        assert [(m.seq, m.author_id, m.text) for m in page] == [(seq, "hana", "Hello on the stream.")]

        # Refused: the same claim spoken on again, a body the contract refuses, a channel that is not there. Each
        # reply is what HTTP answers the same request with, status and body.
        for number, (method, path, body) in enumerate(
            [
                ("POST", speak, {"text": "Again."}),
                ("POST", "/v1/channels/lobby/claims", {"tier": "shout"}),
                ("POST", "/v1/channels/nowhere/claims", {"tier": "remark"}),
                ("GET", "/v1/channels/lobby/history?after=0&limit=500", None),
            ],
            start=3,
        ):
            reply = await call(ws, number, method, path, body)
            status, answer = await over_http(client, method, path, body)
            assert status >= 400, (path, status)
            assert (reply["status"], json.loads(reply["body"])) == (status, answer), path

        # A read with a query, answered as GET history is.
        reply = await call(ws, 10, "GET", "/v1/channels/lobby/history?after=0&limit=5")
        assert (reply["status"], json.loads(reply["body"])) == await over_http(
            client, "GET", "/v1/channels/lobby/history?after=0&limit=5"
        )


async def test_only_a_personas_endpoints_are_offered_and_only_as_itself(
    arbiter: Arbiter, client: TestClient[Any, Any]
) -> None:
    await arbiter.service.ensure_channel("lobby")
    async with client.ws_connect(PATH, headers=auth("hana")) as ws:
        # The admin's endpoints are not on the stream, whoever opened it.
        reply = await call(ws, 1, "PATCH", "/v1/channels/lobby/settings", {"capacity": 1})
        assert reply["status"] == 404 and json.loads(reply["body"])["error"]["code"] == "no_route"
        assert (await arbiter.service.settings("lobby")).capacity != 1
        # A body naming another persona is refused as HTTP refuses it.
        body = {"tier": "remark", "persona": "kai"}
        reply = await call(ws, 2, "POST", "/v1/channels/lobby/claims", body)
        assert (reply["status"], json.loads(reply["body"])) == await over_http(
            client, "POST", "/v1/channels/lobby/claims", body
        )
        assert reply["status"] == 403


@pytest.mark.parametrize("who", ["hana", "admin"])
async def test_a_call_as_a_persona_the_stream_does_not_act_for_closes_it(
    arbiter: Arbiter, client: TestClient[Any, Any], who: str
) -> None:
    await arbiter.service.ensure_channel("lobby")
    async with client.ws_connect(PATH, headers=auth(who)) as ws:
        sent = {"id": 1, "method": "POST", "path": "/v1/channels/lobby/claims", "body": '{"tier": "remark"}'}
        if who == "hana":
            sent["persona"] = "kai"
        await ws.send_str(json.dumps({"calls": [sent]}))
        frame = await asyncio.wait_for(ws.receive(), 5)
        assert frame.type is WSMsgType.CLOSE, frame
        assert frame.data == 4403 and frame.extra.startswith("calls.0: this stream does not act for"), frame.extra
    assert (await arbiter.service.status("lobby", "kai")).claims_held == {}
