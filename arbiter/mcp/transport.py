"""Streamable HTTP for the 2025 protocol (the ``initialize`` handshake era), on aiohttp directly: a POST is one
JSON-RPC message answered in JSON (or as a one-event stream to a client that accepts only that), a GET is the
session's notification stream (``arbiter.mcp.streams``), a DELETE ends the session.

Sessions matter to no tool call: a request without ``Mcp-Session-Id`` is served (a client written for a stateless
server). The session id ``initialize`` hands out proves itself (``arbiter.mcp.kept``), so every request of the
session, its subscriptions and its stream work in any arbiter process, and after a restart, with no session store
in memory; a session id this token did not open is "Session not found" (404), as the protocol says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from arbiter.core.errors import ArbiterError
from arbiter.mcp.kept import new_session_id, session_of
from arbiter.mcp.methods import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, Json, Methods, RpcError
from arbiter.mcp.streams import NotificationStreams, TooManyStreams
from arbiter.mcp.tools import describe

if TYPE_CHECKING:
    from arbiter.events import EventHub
    from arbiter.mcp.kept import KeptSessions
    from arbiter.mcp.tools import Caller
    from arbiter.service import ArbiterService

__all__ = ("SESSION_HEADER", "HandshakeTransport", "Visitor")

_log = logging.getLogger(__name__)

SESSION_HEADER = "Mcp-Session-Id"
_SUBSCRIPTIONS = ("resources/subscribe", "resources/unsubscribe")


@dataclass(frozen=True, slots=True)
class Visitor:
    """Who calls, and the key their token signs session ids with."""

    caller: Caller
    key: bytes

    @property
    def member(self) -> str:
        return self.caller.member or ""


def _rpc(request_id: Any, *, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": error.code, "message": error.message}}


def _result(request_id: Any, result: dict[str, Any] | Json) -> Json:
    written = result if isinstance(result, Json) else json.dumps(result, ensure_ascii=False, separators=(",", ":"))
    return Json(f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"result":{written}}}')


def _answer(
    request: web.Request, message: dict[str, Any] | Json, *, status: int = 200, session: str | None = None
) -> web.Response:
    """JSON, unless the client accepts only an event stream (the protocol lets a server answer either way)."""
    body = message if isinstance(message, Json) else json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    accept = request.headers.get("Accept", "")
    headers = {SESSION_HEADER: session} if session else {}
    if "text/event-stream" in accept and "application/json" not in accept and "*/*" not in accept:
        return web.Response(text=f"event: message\ndata: {body}\n\n", status=status, headers=headers,
                            content_type="text/event-stream")  # fmt: skip
    return web.Response(text=body, status=status, headers=headers, content_type="application/json")


def _failed(request: web.Request, code: int, why: str, *, status: int) -> web.Response:
    """A refusal at the HTTP level (no request id to answer to)."""
    return _answer(request, _rpc(None, error=RpcError(code, why)), status=status)


class HandshakeTransport:
    def __init__(self, service: ArbiterService, hub: EventHub, kept: KeptSessions, version: str) -> None:
        self._service = service
        self._kept = kept
        self._methods = Methods(service, version)
        self._streams = NotificationStreams(hub, kept)
        self._sweeper: asyncio.Task[None] | None = None

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self._streams.close()

    async def handle(self, request: web.Request, visitor: Visitor) -> web.StreamResponse:
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="mcp-session-expiry")
        if request.method == "POST":
            return await self._post(request, visitor)
        session = session_of(request.headers.get(SESSION_HEADER), visitor.key)
        if request.method == "GET":
            if session is None:
                return self._no_session(request, "a notification stream (GET)")
            try:
                return await self._streams.serve(request, session, visitor.member)
            except TooManyStreams:
                limit = self._kept.limits.per_token
                why = f"this token has {limit} notification streams open here, the most it may; close one first"
                return _failed(request, INVALID_REQUEST, why, status=429)
        # DELETE: the session ends; what it kept goes.
        if session is None:
            return self._no_session(request, "ending a session (DELETE)")
        self._streams.end(session)
        await self._kept.forget(session)
        return web.Response(status=200)

    def _no_session(self, request: web.Request, what: str) -> web.Response:
        if request.headers.get(SESSION_HEADER):
            why = "Session not found: this token did not open it; initialize again"
            return _failed(request, INVALID_REQUEST, why, status=404)
        # No session: tool calls need none; a client that keeps none opens no stream (405 is the protocol's answer).
        why = f"{what} needs the Mcp-Session-Id that initialize answered"
        response = _failed(request, INVALID_REQUEST, why, status=405)
        response.headers["Allow"] = "POST" if request.method == "GET" else "POST, GET"
        return response

    async def _post(self, request: web.Request, visitor: Visitor) -> web.StreamResponse:
        try:
            message = json.loads(await request.read())
        except ValueError:
            return _answer(
                request, _rpc(None, error=RpcError(PARSE_ERROR, "Parse error: the body is not JSON")), status=400
            )
        if isinstance(message, list):
            why = "batches are not supported: send one JSON-RPC message per request"
            return _failed(request, INVALID_REQUEST, why, status=400)
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            why = 'Invalid Request: expected a JSON-RPC 2.0 object ("jsonrpc": "2.0")'
            return _failed(request, INVALID_REQUEST, why, status=400)
        method, request_id = message.get("method"), message.get("id")
        if not isinstance(method, str) or "id" not in message:
            return web.Response(status=202)  # a notification, or an answer to a request we never send
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return _failed(request, INVALID_REQUEST, "id must be a string or a number", status=400)
        params = message.get("params")
        _log.debug("MCP %s from %s", method, visitor.caller.member or "the admin")
        result: dict[str, Any] | Json
        try:
            if method == "initialize":
                return await self._initialize(request, visitor, request_id, params)
            session = session_of(request.headers.get(SESSION_HEADER), visitor.key)
            if session is None and request.headers.get(SESSION_HEADER):
                return self._no_session(request, method)
            if method in _SUBSCRIPTIONS:
                if session is None:
                    why = f"{method} needs a session: send the Mcp-Session-Id that initialize answered"
                    raise RpcError(INVALID_REQUEST, why)
                result = await self._subscription(visitor, session, method, params)
            else:
                result = await self._methods.answer(visitor.caller, method, params)
        except RpcError as error:
            return _answer(request, _rpc(request_id, error=error))
        return _answer(request, _result(request_id, result))

    async def _initialize(self, request: web.Request, visitor: Visitor, request_id: Any, params: Any) -> web.Response:
        channel = visitor.caller.channel
        if channel is not None:
            # Refused here rather than on each call: a URL naming no channel is a mistake to say at once.
            try:
                await self._service.level_event(channel)
            except ArbiterError as error:
                return _answer(request, _rpc(request_id, error=RpcError(INVALID_PARAMS, describe(error))), status=404)
        result = self._methods.initialize(params)
        return _answer(request, _result(request_id, result), session=new_session_id(visitor.key))

    async def _subscription(self, visitor: Visitor, session: str, method: str, params: Any) -> dict[str, Any]:
        wanted = await self._methods.subscription(method, params)
        if wanted.subscribe:
            evicted = await self._kept.subscribe(session, visitor.member, wanted.channel_id)
            for gone in evicted:
                self._streams.end(gone)
        else:
            await self._kept.unsubscribe(session, wanted.channel_id)
        self._streams.subscribed(session, wanted.channel_id, subscribe=wanted.subscribe)
        return {}

    async def _sweep(self) -> None:
        every = min(self._kept.limits.idle_s / 4, 60.0)
        while True:
            await asyncio.sleep(every)
            try:
                gone = await self._kept.expire()
            except Exception:  # the database away for a while: the next sweep tries again
                _log.warning("forgetting idle MCP sessions failed; trying again in %.0f s", every, exc_info=True)
                continue
            if gone:
                _log.info("forgot %d subscription(s) of idle MCP sessions", gone)
