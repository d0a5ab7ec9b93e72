"""The JSON-RPC methods of the 2025 protocol (the ``initialize`` handshake era), answered from the tool table and
the service with plain JSON: no SDK, no task or stream per call, each argument validated once (by the tool's own
model, ``arbiter.mcp.tools``).

What the MCP Inspector, desktop clients, Claude Code, the TypeScript SDK (the reference's agents) and the Python
SDK's ``legacy`` mode speak. The 2026-07-28 protocol goes to the SDK (``arbiter.mcp.server``).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from arbiter.core.errors import ArbiterError
from arbiter.core.limits import ID_PATTERN
from arbiter.mcp.tools import TOOLS, Caller, HistoryResult, ToolFailure, allowed, describe, history_entries, run_tool

if TYPE_CHECKING:
    from pydantic import BaseModel

    from arbiter.service import ArbiterService

__all__ = (
    "HANDSHAKE_VERSIONS",
    "HISTORY_TEMPLATE",
    "INSTRUCTIONS",
    "RECENT",
    "Json",
    "Methods",
    "RpcError",
    "channel_of",
    "history_uri",
    "input_schema",
    "output_schema",
)

_log = logging.getLogger(__name__)

# The protocol revisions with the initialize handshake, oldest first; a client asking for another gets the latest.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

HISTORY_TEMPLATE = "aizuchi://channels/{channel}/history"
_HISTORY_URI = re.compile(r"^aizuchi://channels/([^/]+)/history$")
RECENT = 50  # messages in a read of a history resource

INSTRUCTIONS = (
    "A conversation shared with other speakers, who take turns through a pool of resource. Read history and "
    "status first; then speak with consume (amount buys a tier: short aizuchi, a remark, a long turn; each has a "
    "length limit) or claim, then speak or release. A refusal says why and when to try again. Subscribe to the "
    "channel's history resource to hear when someone speaks."
)

# JSON-RPC error codes.
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602


class Json(str):
    """A result already written as JSON."""


class RpcError(Exception):
    """A request answered with a JSON-RPC error: nothing changed."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def history_uri(channel_id: str) -> str:
    return HISTORY_TEMPLATE.format(channel=channel_id)


def channel_of(uri: str) -> str | None:
    match = _HISTORY_URI.match(uri)
    return match.group(1) if match and re.match(ID_PATTERN, match.group(1)) else None


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments, each optional one by its own type (``integer``, not ``integer or
    null``): leaving it out is how a client says "none", and clients that turn text into the type the schema names
    (the MCP Inspector's command line, ``--tool-arg amount=5``) see the type. Numbers are then refused as text, in
    MCP as in the HTTP API."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    for name, prop in schema.get("properties", {}).items():
        options = prop.get("anyOf")
        if name in schema.get("required", ()) or not options or prop.get("default", 0) is not None:
            continue
        typed = [option for option in options if option.get("type") != "null"]
        if len(typed) == 1:
            del prop["anyOf"], prop["default"]
            prop.update(typed[0])
    return schema


def output_schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema(by_alias=True, mode="serialization")


def _listing() -> list[dict[str, Any]]:
    return [
        {
            "name": tool.name,
            "title": tool.title,
            "description": tool.description,
            "inputSchema": input_schema(tool.args),
            "outputSchema": output_schema(tool.result),
        }
        for tool in TOOLS
    ]


def _params(params: Any) -> dict[str, Any]:
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object")
    return params


def _text(params: dict[str, Any], name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str):
        raise RpcError(INVALID_PARAMS, f"params.{name} must be a string")
    return value


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a resources/subscribe or unsubscribe asks for, for the transport to keep (it holds the sessions)."""

    channel_id: str
    subscribe: bool


class Methods:
    """Answers one JSON-RPC request of the handshake era: ``answer`` returns the result object."""

    def __init__(self, service: ArbiterService, version: str) -> None:
        self._service = service
        self._version = version
        self._tools = _listing()  # built once per process: the schemas never change while it runs

    def initialize(self, params: Any) -> dict[str, Any]:
        asked = _params(params).get("protocolVersion")
        return {
            "protocolVersion": asked if asked in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1],
            "capabilities": {"tools": {"listChanged": False}, "resources": {"subscribe": True, "listChanged": False}},
            "serverInfo": {"name": "aizuchi", "version": self._version},
            "instructions": INSTRUCTIONS,
        }

    async def answer(self, caller: Caller, method: str, params: Any) -> dict[str, Any] | Json:
        match method:
            case "ping":
                return {}
            case "tools/list":
                return {
                    "tools": [listed for tool, listed in zip(TOOLS, self._tools, strict=True) if allowed(tool, caller)]
                }
            case "tools/call":
                return await self._call_tool(caller, _params(params))
            case "resources/list":
                return await self._list_resources()
            case "resources/templates/list":
                template = {"uriTemplate": HISTORY_TEMPLATE, "name": "history",
                            "description": "a channel's latest messages", "mimeType": "application/json"}  # fmt: skip
                return {"resourceTemplates": [template]}
            case "resources/read":
                return await self._read(_text(_params(params), "uri"))
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")

    async def subscription(self, method: str, params: Any) -> Subscription:
        """The channel a resources/subscribe or unsubscribe names (it must exist to subscribe)."""
        uri = _text(_params(params), "uri")
        if method == "resources/unsubscribe":
            channel = channel_of(uri)
            if channel is None:
                raise RpcError(INVALID_PARAMS, f"uri: no resource {uri}; a history is {HISTORY_TEMPLATE}")
            return Subscription(channel, subscribe=False)
        return Subscription(await self.channel(uri), subscribe=True)

    async def _call_tool(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any] | Json:
        name = _text(params, "name")
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "params.arguments must be an object")
        try:
            result = await run_tool(self._service, caller, name, arguments)
        except ToolFailure as failure:
            return {"content": [{"type": "text", "text": str(failure)}], "isError": True}
        # The answer as JSON once (pydantic's serializer), then as text and as structured content, without a
        # round trip through Python objects: a tool call is the hot path.
        text = result.model_dump_json(by_alias=True, exclude_none=True)
        quoted = json.dumps(text, ensure_ascii=False)
        return Json(f'{{"content":[{{"type":"text","text":{quoted}}}],"structuredContent":{text},"isError":false}}')

    async def _list_resources(self) -> dict[str, Any]:
        channels = await self._service.channels()
        return {
            "resources": [
                {
                    "uri": history_uri(channel.channel_id),
                    "name": f"{channel.channel_id} history",
                    "description": f"the latest {RECENT} messages of {channel.channel_id}; subscribe to hear new ones",
                    "mimeType": "application/json",
                }
                for channel in channels.channels
            ]
        }

    async def channel(self, uri: str) -> str:
        """The channel of a history URI, which must exist."""
        channel = channel_of(uri)
        if channel is None:
            raise RpcError(INVALID_PARAMS, f"uri: no resource {uri}; a history is {HISTORY_TEMPLATE}")
        try:
            await self._service.level_event(channel)
        except ArbiterError as error:
            raise RpcError(INVALID_PARAMS, f"uri: {describe(error)}") from None
        return channel

    async def _read(self, uri: str) -> dict[str, Any]:
        channel = await self.channel(uri)
        messages = await self._service.recent(channel, RECENT)
        last = messages[-1].seq if messages else 0
        page = HistoryResult(history=history_entries(messages), next_after=last, has_more=False)
        return {"contents": [{"uri": uri, "mimeType": "application/json", "text": page.model_dump_json(by_alias=True)}]}
