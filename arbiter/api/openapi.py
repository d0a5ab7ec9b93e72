"""The OpenAPI 3.1 document, generated from the endpoint table and the wire models."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic.json_schema import models_json_schema

from arbiter.api.routes import ENDPOINTS, PATH_PARAMS, Access, Endpoint, HistoryQuery
from arbiter.contract import EVENT_MODELS, EndedEvent, ErrorBody, Health, StatusEvent, StreamCommand

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ("MCP_METHODS", "MCP_PATHS", "WAKE_PATHS", "openapi_document")

_REF = "#/components/schemas/{model}"
_PATH_PARAM = re.compile(r"{(\w+)}")
# What the router's checks accept (the same patterns), so that generated clients send only what works. A seq is
# 1 to 18 digits, with no leading zero.
_PARAM_SCHEMAS: dict[str, dict[str, Any]] = {
    name: {"type": "integer", "minimum": 1, "maximum": 10**18 - 1}
    if name == "seq"
    else {"type": "string", "pattern": pattern.pattern}
    for name, pattern in PATH_PARAMS.items()
}
_ERRORS = {
    400: "Malformed JSON",
    401: "Missing or unknown token",
    403: "Not allowed for this token",
    404: "Unknown channel, claim, message or persona",
    409: "The claim or message is in the wrong state",
    413: "The body is larger than the server accepts",
    422: "A field is invalid; the error names it",
    503: "The database is unavailable; nothing changed",
}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _REF.format(model=model.__name__)}


def _operation(endpoint: Endpoint) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": _PARAM_SCHEMAS.get(name, {"type": "string"})}
        for name in _PATH_PARAM.findall(endpoint.path)
    ]
    if endpoint.query is not None:
        schema = endpoint.query.model_json_schema()
        for name, prop in schema["properties"].items():
            parameters.append({"name": name, "in": "query", "required": False, "schema": prop})
    responses: dict[str, Any] = {}
    if endpoint.response is not None:
        responses[str(endpoint.status)] = {
            "description": endpoint.response.__doc__ or endpoint.summary,
            "content": {"application/json": {"schema": _ref(endpoint.response)}},
        }
    else:
        responses[str(endpoint.status)] = {"description": "Done"}
    codes = [422, 503]
    if endpoint.body is not None:
        codes[0:0] = [400, 413]
    if endpoint.access is not Access.PUBLIC:
        codes[0:0] = [401, 403]
    if "{" in endpoint.path:
        codes.append(404)
    if "claims/" in endpoint.path or "messages/" in endpoint.path:
        codes.append(409)
    for code in sorted(codes):
        responses[str(code)] = {
            "description": _ERRORS[code],
            "content": {"application/json": {"schema": _ref(ErrorBody)}},
        }
    operation: dict[str, Any] = {
        "summary": endpoint.summary,
        "operationId": endpoint.handler.__name__.lstrip("_"),
        "tags": [endpoint.tag],
        "parameters": parameters,
        "responses": responses,
        "x-access": endpoint.access.value,
    }
    if endpoint.body is not None:
        # The server reads an empty body as {}: a body is required only where {} would not do.
        required = any(field.is_required() for field in endpoint.body.model_fields.values())
        operation["requestBody"] = {
            "required": required,
            "content": {"application/json": {"schema": _ref(endpoint.body)}},
        }
    if endpoint.access is not Access.PUBLIC:
        operation["security"] = [{"bearer": []}]
    return operation


def openapi_document(version: str) -> dict[str, Any]:
    models: set[type[BaseModel]] = {ErrorBody, Health, *EVENT_MODELS, *_STREAM_MODELS, StreamCommand}
    for endpoint in ENDPOINTS:
        models.update(m for m in (endpoint.body, endpoint.query, endpoint.response) if m is not None)
    ordered = sorted(models, key=lambda model: model.__name__)
    inputs = {*_inputs(), StreamCommand}
    _, schemas = models_json_schema(
        [(model, "validation" if model in inputs else "serialization") for model in ordered], ref_template=_REF
    )
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in ENDPOINTS:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint)
    paths["/v1/channels/{channel_id}/events"] = {"get": _events_operation()}
    paths["/v1/events"] = {"get": _multiplex_operation()}
    # The two routes build_app adds beside the endpoint table; public, like any health check.
    paths["/v1/health"] = {"get": _public_operation("health", "Whether the arbiter is up", {"schema": _ref(Health)})}
    paths["/v1/openapi.json"] = {"get": _public_operation("openapi", "This document (OpenAPI 3.1)", {})}
    for path in MCP_PATHS:
        paths[path] = {method.lower(): _mcp_operation(path, method) for method in MCP_METHODS}
    for path in WAKE_PATHS:
        paths[path] = {"get": _wake_operation(path)}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "aizuchi arbiter",
            "version": version,
            "description": "Turn-taking for a fleet of AI personas: each channel's resource pool, history and rules.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


# Each ends in /mcp: clients such as the MCP Inspector send anything else to <origin>/mcp instead.
MCP_PATHS = ("/mcp", "/channels/{channel_id}/mcp", "/key/{token}/mcp", "/key/{token}/channels/{channel_id}/mcp")
MCP_METHODS = {
    "POST": "send a JSON-RPC message",
    "GET": "the session's stream of notifications",
    "DELETE": "end the session",
}
WAKE_PATHS = ("/channels/{channel_id}/ws", "/key/{token}/channels/{channel_id}/ws")


def _mcp_responses() -> dict[str, dict[str, Any]]:
    """What each method of the MCP paths answers: JSON-RPC errors where the protocol has a message, the API's error
    body where the request never reached it (the token, the path, the body's size)."""
    body = {"content": {"application/json": {"schema": _ref(ErrorBody)}}}
    common = {
        "401": {"description": _ERRORS[401], **body},
        "422": {"description": "The channel in the path is not a channel id", **body},
    }
    return {
        "POST": {
            "200": {"description": "a JSON-RPC answer (JSON, or a text/event-stream to a client that takes only that)"},
            "202": {"description": "a notification, accepted"},
            "400": {"description": "not one JSON-RPC 2.0 message (parse error, a batch); a JSON-RPC error"},
            "404": {"description": "Session not found (not this token's), or no such channel; a JSON-RPC error"},
            "413": {"description": _ERRORS[413], **body},
            **common,
        },
        "GET": {
            "200": {"description": "the session's notification stream (text/event-stream)"},
            "404": {"description": "Session not found (not this token's); a JSON-RPC error"},
            "405": {"description": "no Mcp-Session-Id: tool calls need no session, a stream does; a JSON-RPC error"},
            "429": {"description": "the token has as many streams open as it may; a JSON-RPC error"},
            **common,
        },
        "DELETE": {
            "200": {"description": "the session ended; its subscriptions are gone"},
            "404": {"description": "Session not found (not this token's); a JSON-RPC error"},
            "405": {"description": "no Mcp-Session-Id; a JSON-RPC error"},
            **common,
        },
    }


_MCP_RESPONSES = _mcp_responses()


def _inputs() -> set[type[BaseModel]]:
    return {m for e in ENDPOINTS for m in (e.body, e.query) if m is not None}


def _public_operation(operation_id: str, summary: str, media: dict[str, Any]) -> dict[str, Any]:
    return {
        "summary": summary,
        "operationId": operation_id,
        "tags": ["meta"],
        "responses": {"200": {"description": summary, "content": {"application/json": media}}},
        "x-access": Access.PUBLIC.value,
    }


def _events_operation() -> dict[str, Any]:
    return {
        "summary": "The channel's live events (WebSocket)",
        "operationId": "events",
        "tags": ["turns"],
        "description": "Upgrade to a WebSocket. Each text frame is one JSON event, told apart by its type: "
        + ", ".join(model.__name__ for model in EVENT_MODELS)
        + ". With ?after=<seq> the messages after that seq are replayed first, then the level, then the stream"
        " goes live without a gap or a duplicate. A client that falls behind is closed with code 4008 and the"
        " reason 'fell behind; reconnect with ?after=<seq>', that seq the last message it was sent.",
        "parameters": [
            {"name": "channel_id", "in": "path", "required": True, "schema": _PARAM_SCHEMAS["channel_id"]},
            {"name": "after", "in": "query", "required": False, "schema": _after_schema()},
        ],
        "responses": {
            "101": {
                "description": "Switching to the event stream",
                "content": {"application/json": {"schema": {"oneOf": [_ref(model) for model in EVENT_MODELS]}}},
            },
            **{
                str(code): {"description": description, "content": {"application/json": {"schema": _ref(ErrorBody)}}}
                for code, description in (
                    (400, "Not a WebSocket upgrade request"),
                    (401, _ERRORS[401]),
                    (404, _ERRORS[404]),
                    (422, "channel_id or after is invalid; the error names it"),
                    (503, _ERRORS[503]),
                )
            },
        },
        "security": [{"bearer": []}],
        "x-access": Access.ANY.value,
    }


_STREAM_MODELS = (StatusEvent, EndedEvent)


def _multiplex_operation() -> dict[str, Any]:
    frames: list[type[BaseModel]] = [*EVENT_MODELS, *_STREAM_MODELS]
    return {
        "summary": "The events of every channel the client follows, on one WebSocket",
        "operationId": "multiplexed_events",
        "tags": ["turns"],
        "description": "Upgrade to a WebSocket, then send StreamCommand text frames to follow channels"
        ' ({"subscribe": [{"channel": "lobby", "after": 41}], "unsubscribe": ["hall"]}): per channel, the messages'
        " after `after` (or the last `recent`, or from whichever starts earlier when both are given) are replayed,"
        " then the level, then every event as it happens, joined without a gap or a duplicate as on a channel's own"
        " stream. Each frame is one JSON object naming its channel: "
        + ", ".join(model.__name__ for model in frames)
        + ". The stream acts for the persona whose token opened it and for those whose `tokens` a command adds (a"
        ' process of several personas shares one stream); `{"status": [{"channel": "lobby", "persona": "rin"}]}`'
        " asks for a persona's status, answered with a StatusEvent computed when the ask came. `skip` lists kinds"
        " of events not to send (the level that ends a replay is always sent). A channel that falls behind ends"
        " alone with an EndedEvent naming the seq to subscribe again after. A malformed command closes the socket"
        " with code 4400 and the problem as the reason; a token the arbiter does not know in `tokens`, 4401; a"
        " status asked for a persona the stream does not act for, 4403.",
        "responses": {
            "101": {
                "description": "Switching to the multiplexed stream",
                "content": {"application/json": {"schema": {"oneOf": [_ref(model) for model in frames]}}},
            },
            **{
                str(code): {"description": description, "content": {"application/json": {"schema": _ref(ErrorBody)}}}
                for code, description in (
                    (400, "Not a WebSocket upgrade request"),
                    (401, _ERRORS[401]),
                    (503, _ERRORS[503]),
                )
            },
        },
        "security": [{"bearer": []}],
        "x-access": Access.ANY.value,
    }


def _after_schema() -> dict[str, Any]:
    # The stream reads ?after= with the history's query model: the same bounds.
    schema: dict[str, Any] = HistoryQuery.model_json_schema()["properties"]["after"]
    return {key: value for key, value in schema.items() if key != "default"}


def _key_path_parameters(path: str) -> list[dict[str, Any]]:
    """The token and channel a /key/... or /channels/... path of MCP or the wake-up socket carries."""
    return [
        {"name": name, "in": "path", "required": True, "schema": schema}
        for name, schema in (
            ("token", {"type": "string", "minLength": 1}),
            ("channel_id", _PARAM_SCHEMAS["channel_id"]),
        )
        if f"{{{name}}}" in path
    ]


def _mcp_operation(path: str, method: str) -> dict[str, Any]:
    parameters = _key_path_parameters(path)
    suffix = path.removeprefix("/mcp").replace("/", "_").replace("{", "").replace("}", "")
    operation: dict[str, Any] = {
        "summary": f"MCP (Streamable HTTP): {MCP_METHODS[method]}",
        "operationId": f"mcp{suffix}_{method.lower()}",
        "tags": ["mcp"],
        "description": "The Model Context Protocol, spoken by MCP clients (JSON-RPC): its tools are listed by "
        "tools/list, not here. The token goes in the Authorization header, or in the path (/key/<token>/mcp) for "
        "clients that can set only a URL; the channel in the path, or as each tool's channel argument.",
        "parameters": parameters,
        "responses": _MCP_RESPONSES[method],
        "x-access": "persona, agent or admin",
    }
    if "{token}" not in path:
        operation["security"] = [{"bearer": []}]
    return operation


def _wake_operation(path: str) -> dict[str, Any]:
    error = {"content": {"application/json": {"schema": _ref(ErrorBody)}}}
    operation: dict[str, Any] = {
        "summary": "Wake-up WebSocket: a frame on each new message, as the reference design sends",
        "operationId": "wake" + path.removesuffix("/ws").replace("/", "_").replace("{", "").replace("}", ""),
        "tags": ["mcp"],
        "description": 'A WebSocket that receives {"type":"newMessage","message":{"from","message"}} for each new '
        "message of the channel (the reference design's frame), so its agents are woken unchanged.",
        "parameters": _key_path_parameters(path),
        "responses": {
            "101": {"description": "the WebSocket is open"},
            "400": {"description": "not a WebSocket upgrade", **error},
            "401": {"description": _ERRORS[401], **error},
            "404": {"description": "Unknown channel", **error},
            "422": {"description": _ERRORS[422], **error},
            "429": {"description": "The token has as many wake-up sockets open as it may", **error},
            "503": {"description": _ERRORS[503], **error},
        },
        "x-access": "persona, agent or admin",
    }
    if "{token}" not in path:
        operation["security"] = [{"bearer": []}]
    return operation
