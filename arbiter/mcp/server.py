"""The MCP SDK's server for the tool table (``arbiter.mcp.tools``), its Streamable HTTP session manager, and the
channel histories as resources a client can subscribe to.

Built on the SDK's low-level ``Server`` rather than ``MCPServer``: the tools come from our table (the reference's
``from`` is a Python keyword, and its models are ours), and ``MCPServer`` configures the process's root logger.

Sessions are kept (stateful Streamable HTTP): a client of the 2025 protocol (the reference's agents, the Inspector,
desktop clients) gets notifications on its session's GET stream. Notifications are resource updates: each channel's
history is the resource ``aizuchi://channels/<channel>/history``; a client subscribes to it (``resources/subscribe``,
or ``subscriptions/listen`` on the 2026-07-28 protocol) and hears ``notifications/resources/updated`` whenever a
message arrives, then reads it (or calls ``history``).

Imported on the first request to ``/mcp`` (see ``arbiter.mcp.route``): the SDK takes a second and tens of MB to
load, which an arbiter nobody reaches over MCP does not pay.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError

from arbiter.core.errors import ArbiterError
from arbiter.core.limits import ID_PATTERN
from arbiter.mcp.tools import TOOLS, Caller, HistoryResult, ToolFailure, allowed, describe, history_entries, run_tool
from arbiter.mcp.watch import HistoryWatch

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from mcp.server.session import ServerSession
    from pydantic import BaseModel
    from starlette.requests import Request

    from arbiter.events import EventHub
    from arbiter.mcp.bridge import ASGIApp
    from arbiter.service import ArbiterService

__all__ = ("CALLER", "McpApp", "channel_of", "history_uri")

_log = logging.getLogger(__name__)

CALLER = "aizuchi.caller"  # the ASGI scope key the route puts the caller under
HISTORY_TEMPLATE = "aizuchi://channels/{channel}/history"
_HISTORY_URI = re.compile(r"^aizuchi://channels/([^/]+)/history$")
RECENT = 50  # messages in a read of a history resource

INSTRUCTIONS = (
    "A conversation shared with other speakers, who take turns through a pool of resource. Read history and "
    "status first; then speak with consume (amount buys a tier: short aizuchi, a remark, a long turn; each has a "
    "length limit) or claim, then speak or release. A refusal says why and when to try again. Subscribe to the "
    "channel's history resource to hear when someone speaks."
)


def history_uri(channel_id: str) -> str:
    return HISTORY_TEMPLATE.format(channel=channel_id)


def channel_of(uri: str) -> str | None:
    match = _HISTORY_URI.match(uri)
    return match.group(1) if match and re.match(ID_PATTERN, match.group(1)) else None


def _request(ctx: ServerRequestContext[Any, Any]) -> Request:
    # Streamable HTTP, the only transport served, hands every message its HTTP request.
    assert ctx.request is not None
    request: Request = ctx.request
    return request


def _caller(ctx: ServerRequestContext[Any, Any]) -> Caller:
    # Every request reaches the SDK through our route, which puts the caller in the scope.
    caller: Caller = _request(ctx).scope[CALLER]
    return caller


def _schema(model: type[BaseModel], mode: str) -> dict[str, Any]:
    return model.model_json_schema(by_alias=True, mode="validation" if mode == "in" else "serialization")


class McpApp:
    """The MCP side of one arbiter: serve ``asgi`` inside ``running()``."""

    def __init__(self, service: ArbiterService, hub: EventHub, version: str) -> None:
        self._service = service
        self._bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self._bus)
        # Clients of the 2025 protocol subscribed to a history: uri -> their session id -> a way to reach them.
        self._subscribed: dict[str, dict[str, ServerSession]] = {}
        self._watch = HistoryWatch(hub, self._changed)
        self._tools = [
            types.Tool(
                name=tool.name,
                title=tool.title,
                description=tool.description,
                input_schema=_schema(tool.args, "in"),
                output_schema=_schema(tool.result, "out"),
            )
            for tool in TOOLS
        ]
        self.server: Server[Any] = Server(
            "aizuchi",
            version=version,
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._listen_to,
        )
        # The SDK's only default middleware is OpenTelemetry's, a cost on every message with no exporter here.
        self.server.middleware.clear()
        self._manager = StreamableHTTPSessionManager(self.server)
        self.asgi: ASGIApp = self._manager.handle_request

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[McpApp]:
        """Enter and leave in one task: the session manager holds a task group."""
        async with self._manager.run():
            try:
                yield self
            finally:
                self._listen.close()
                await self._watch.close()

    @staticmethod
    def scope(caller: Caller) -> dict[str, Any]:
        """What the SDK's scope carries for a request: the caller, for the tools; and as the SDK's user, who it is,
        so that a session is served only to the token that opened it."""
        who = "admin" if caller.member is None else f"member:{caller.member}"
        return {CALLER: caller, "user": AuthenticatedUser(AccessToken(token="", client_id=who, scopes=[]))}

    def forget_session(self, session_id: str) -> None:
        """The session ended (deleted, or unknown to the SDK): drop its subscriptions."""
        for uri, sessions in list(self._subscribed.items()):
            if sessions.pop(session_id, None) is not None:
                self._unwatch(uri)
            if not sessions:
                del self._subscribed[uri]

    # --- tools ----------------------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        caller = _caller(ctx)
        return types.ListToolsResult(
            tools=[listed for tool, listed in zip(TOOLS, self._tools, strict=True) if allowed(tool, caller)]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            result = await run_tool(self._service, _caller(ctx), params.name, dict(params.arguments or {}))
        except ToolFailure as failure:
            return types.CallToolResult(content=[types.TextContent(text=str(failure))], is_error=True)
        data = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=data)

    # --- the histories as resources -------------------------------------------------------------------

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        channels = await self._service.channels()
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=history_uri(channel.channel_id),
                    name=f"{channel.channel_id} history",
                    description=f"the latest {RECENT} messages of {channel.channel_id}; subscribe to hear new ones",
                    mime_type="application/json",
                )
                for channel in channels.channels
            ]
        )

    async def _list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        template = types.ResourceTemplate(
            uri_template=HISTORY_TEMPLATE,
            name="history",
            description="a channel's latest messages",
            mime_type="application/json",
        )
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def _channel(self, uri: str) -> str:
        """The channel of a history URI, which must exist."""
        channel = channel_of(uri)
        if channel is None:
            raise MCPError(types.INVALID_PARAMS, f"uri: no resource {uri}; a history is {HISTORY_TEMPLATE}")
        try:
            await self._service.level_event(channel)
        except ArbiterError as error:
            raise MCPError(types.INVALID_PARAMS, f"uri: {describe(error)}") from None
        return channel

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        channel = await self._channel(params.uri)
        messages = await self._service.recent(channel, RECENT)
        last = messages[-1].seq if messages else 0
        page = HistoryResult(history=history_entries(messages), next_after=last, has_more=False)
        text = page.model_dump_json(by_alias=True)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, text=text, mime_type="application/json")]
        )

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        channel = await self._channel(params.uri)
        session_id = _request(ctx).headers.get("mcp-session-id")
        if session_id is None:
            raise MCPError(types.INVALID_REQUEST, "resources/subscribe needs a session (Mcp-Session-Id)")
        sessions = self._subscribed.setdefault(params.uri, {})
        if session_id not in sessions:
            self._watch.watch(channel)
        sessions[session_id] = ctx.session
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        session_id = _request(ctx).headers.get("mcp-session-id", "")
        sessions = self._subscribed.get(params.uri, {})
        if sessions.pop(session_id, None) is not None:
            self._unwatch(params.uri)
        if not sessions:
            self._subscribed.pop(params.uri, None)
        return types.EmptyResult()

    async def _listen_to(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """A 2026-07-28 client's subscription stream: its channels are watched while it is open."""
        uris = params.notifications.resource_subscriptions or []
        channels = [channel for channel in map(channel_of, uris) if channel is not None]
        for channel in channels:
            self._watch.watch(channel)
        try:
            return await self._listen(ctx, params)
        finally:
            for channel in channels:
                self._watch.unwatch(channel)

    def _unwatch(self, uri: str) -> None:
        channel = channel_of(uri)
        if channel is not None:
            self._watch.unwatch(channel)

    async def _changed(self, channel_id: str) -> None:
        uri = history_uri(channel_id)
        await self._bus.publish(ResourceUpdated(uri=uri))
        for session in list(self._subscribed.get(uri, {}).values()):
            await session.send_resource_updated(uri)
