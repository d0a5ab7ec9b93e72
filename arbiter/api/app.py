"""build_app: the aiohttp application for a ready service. Resources are created by the caller and passed in."""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from aiohttp import web

from arbiter.api.errors import error_middleware, quiet_bad_requests
from arbiter.api.multiplex import FRAMES, MULTIPLEXED, FrameTexts, close_multiplexed, multiplex_handler
from arbiter.api.openapi import openapi_document
from arbiter.api.routes import AUTH, MAX_BODY, SERVICE, add_routes
from arbiter.api.stream import HUB, events_handler
from arbiter.contract import Health

if TYPE_CHECKING:
    from arbiter.api.auth import TokenAuth
    from arbiter.events import EventHub
    from arbiter.service import ArbiterService

__all__ = ("build_app", "package_version")


def package_version() -> str:
    try:
        return version("aizuchi")
    except PackageNotFoundError:
        return "0.0.0"


async def _openapi(request: web.Request) -> web.Response:
    return web.json_response(text=request.app[_OPENAPI])


async def _health(_request: web.Request) -> web.Response:
    return web.json_response(text=Health().model_dump_json())


_OPENAPI = web.AppKey("openapi", str)


async def _end_streams(app: web.Application) -> None:
    # Open event streams would otherwise hold shutdown for aiohttp's whole grace period (a minute): end them;
    # clients reconnect with ?after= and lose nothing.
    app[HUB].close_all()
    await close_multiplexed(app)


def build_app(service: ArbiterService, hub: EventHub, auth: TokenAuth) -> web.Application:
    """The HTTP API. The MCP routes (``arbiter.mcp``, which uses the API's parts and which the OpenAPI document
    describes) are added by the caller that builds the arbiter (``arbiter.server``), so the API never imports MCP."""
    quiet_bad_requests()
    app = web.Application(middlewares=[error_middleware], client_max_size=MAX_BODY)
    app[SERVICE] = service
    app[HUB] = hub
    app[AUTH] = auth
    app[MULTIPLEXED] = set()
    app[FRAMES] = FrameTexts()
    app[_OPENAPI] = json.dumps(openapi_document(package_version()))
    app.on_shutdown.append(_end_streams)
    add_routes(app)
    app.router.add_get("/v1/channels/{channel_id}/events", events_handler)
    app.router.add_get("/v1/events", multiplex_handler)
    app.router.add_get("/v1/openapi.json", _openapi)
    app.router.add_get("/v1/health", _health)
    return app
