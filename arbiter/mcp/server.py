"""The 2026-07-28 protocol of MCP, served by the SDK's low-level ``Server`` over the tool table
(``arbiter.mcp.tools``): each request stands alone (no handshake, no session), and a client's
``subscriptions/listen`` request is its notification stream for the histories it names.

The 2025 protocol, which most clients speak, is answered without the SDK (``arbiter.mcp.transport``); this module is
imported on the first request of the 2026 protocol (see ``arbiter.mcp.route``): the SDK takes a second and tens of
MB to load, which an arbiter no such client reaches does not pay.

Built on the low-level ``Server`` rather than ``MCPServer``: the tools come from our table (the reference's ``from``
is a Python keyword, and its models are ours), and ``MCPServer`` configures the process's root logger.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError

from arbiter.core.errors import ArbiterError
from arbiter.mcp.methods import (
    HISTORY_TEMPLATE,
    INSTRUCTIONS,
    RECENT,
    channel_of,
    history_uri,
    input_schema,
    output_schema,
)
from arbiter.mcp.tools import TOOLS, Caller, HistoryResult, ToolFailure, allowed, describe, history_entries, run_tool
from arbiter.mcp.watch import HistoryWatch

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.requests import Request

    from arbiter.events import EventHub
    from arbiter.mcp.bridge import ASGIApp
    from arbiter.service import ArbiterService

__all__ = ("CALLER", "McpApp")

_log = logging.getLogger(__name__)

CALLER = "aizuchi.caller"  # the ASGI scope key the route puts the caller under


def _request(ctx: ServerRequestContext[Any, Any]) -> Request:
    # Streamable HTTP, the only transport served, hands every message its HTTP request.
    assert ctx.request is not None
    request: Request = ctx.request
    return request


def _caller(ctx: ServerRequestContext[Any, Any]) -> Caller:
    # Every request reaches the SDK through our route, which puts the caller in the scope.
    caller: Caller = _request(ctx).scope[CALLER]
    return caller


class McpApp:
    """The MCP side of one arbiter: serve ``asgi`` inside ``running()``."""

    def __init__(self, service: ArbiterService, hub: EventHub, version: str) -> None:
        self._service = service
        self._bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self._bus)
        self._watch = HistoryWatch(hub, self._changed)
        self._tools = [
            types.Tool(
                name=tool.name,
                title=tool.title,
                description=tool.description,
                input_schema=input_schema(tool.args),
                output_schema=output_schema(tool.result),
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
            on_subscriptions_listen=self._listen_to,
        )
        # The SDK's only default middleware is OpenTelemetry's, a cost on every message with no exporter here.
        self.server.middleware.clear()
        # Stateless: the 2026-07-28 protocol keeps no session, and a request of the 2025 protocol never reaches it.
        self._manager = StreamableHTTPSessionManager(self.server, stateless=True)
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

    async def _changed(self, channel_id: str) -> None:
        await self._bus.publish(ResourceUpdated(uri=history_uri(channel_id)))
