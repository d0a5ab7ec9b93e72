"""The local room's routes: the page, its static files, its JSON API and its event stream.

There is no bearer token here: the room is for the person at the machine. So ``add_room`` must only be
called when the arbiter listens on a loopback address (see ``is_loopback_host``), and every room request is
checked to be addressed to a loopback name (against DNS rebinding) and, when a browser says where it comes
from (``Origin``), to come from the room's own pages (against other sites posting into the room).

Routes (``{channel_id}`` matches ``arbiter.core.limits.ID_PATTERN``):

- ``GET /`` redirects to ``/room/lobby``; ``GET /room/{channel_id}`` is the page; ``/room/static/`` its files.
- ``GET /room/api/{channel_id}/snapshot``: the room's state and its recent history (``RoomSnapshot``).
- ``GET /room/api/{channel_id}/state``: settings, status, personas and why any are held back (``RoomState``).
- ``POST /room/api/{channel_id}/say`` ``{"name", "text"}``: a human message (``ArbiterService.record_message``);
  as ``multipart/form-data`` (fields ``name``, ``text`` and one ``image`` file per picture) with images, which the
  arbiter checks and holds (``arbiter.room.images``); text may then be empty.
- ``GET /room/images/{name}``: an image the room holds (``name``: the SHA-256 of its bytes and an extension).
- ``PATCH /room/api/{channel_id}/settings``: the body of /v1's ``SettingsPatch`` (pause: ``{"paused": true}``).
- ``DELETE /room/api/{channel_id}/memory[/{persona_id}]``: forget every persona's notes here (or one's).
- ``GET /room/api/{channel_id}/events?after=<seq>``: the WebSocket stream of /v1, from the same code.

A room's channel is created with the default settings on its first visit, and ``on_open`` is awaited once per
channel (per process), so the in-process personas join it before the page talks to it.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import ipaddress
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from yarl import URL

from arbiter import contract as wire
from arbiter.api.errors import validation_error
from arbiter.api.routes import SERVICE
from arbiter.api.stream import stream_events
from arbiter.core.errors import InvalidRequest, NotFound, PermissionDenied
from arbiter.core.images import ImageRef
from arbiter.core.limits import ID_PATTERN, MAX_SEQ
from arbiter.room.form import read_say_form
from arbiter.room.images import NAME_PATTERN, RoomImages
from arbiter.room.models import HELD_BACK, HeldBack, RoomSnapshot, RoomState, SayRequest

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from arbiter.service import ArbiterService

__all__ = ("HISTORY_LIMIT", "LOBBY", "add_room", "human_id", "is_loopback_host")

_log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
LOBBY = "lobby"
HISTORY_LIMIT = 200  # messages a page starts with; older ones stay in the history API
_ID = re.compile(ID_PATTERN)
_API = "/room/api/{channel_id}"

M = TypeVar("M", bound=BaseModel)


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) means this machine only."""
    host = host.strip("[]").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def human_id(name: str) -> str:
    """The author id of a person in the room: readable, stable for a name, never a persona's id."""
    folded = name.casefold()
    slug = re.sub(r"[^a-z0-9]+", "-", folded).strip("-")[:40]
    digest = hashlib.sha256(folded.encode()).hexdigest()[:8]
    return f"room.{slug}.{digest}" if slug else f"room.{digest}"


@dataclass
class _Rooms:
    on_open: Callable[[str], Awaitable[None]] | None
    page: str
    notice: str | None = None
    opened: set[str] = field(default_factory=set)
    images: RoomImages = field(default_factory=RoomImages)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    async def open(self, service: ArbiterService, channel_id: str) -> None:
        """Create the channel if it is new and let the personas join it, once; a failure is tried again on the
        next visit."""
        if channel_id in self.opened:
            return
        lock = self._locks.setdefault(channel_id, asyncio.Lock())
        async with lock:
            if channel_id in self.opened:
                return
            await service.ensure_channel(channel_id)
            if self.on_open is not None:
                await self.on_open(channel_id)
            self.opened.add(channel_id)
            _log.info("room %s opened", channel_id)
        self._locks.pop(channel_id, None)


_ROOMS = web.AppKey("room", _Rooms)


class _EventsQuery(BaseModel):
    model_config = ConfigDict(frozen=True)

    after: Annotated[int, Field(ge=0, le=MAX_SEQ)] | None = None


# --- checks ---------------------------------------------------------------------------------------------


def _check_local(request: web.Request) -> None:
    host = request.url.host or ""
    if not is_loopback_host(host):
        raise PermissionDenied(f"the room answers only on a loopback address, not {host!r}", code="not_local")
    origin = request.headers.get("Origin")
    if origin is None:
        return
    try:
        same = URL(origin).origin() == request.url.origin()
    except ValueError:
        same = False
    if not same:
        raise PermissionDenied(f"the room answers only its own pages, not {origin!r}", code="cross_origin")


def _channel(request: web.Request) -> str:
    channel_id = request.match_info["channel_id"]
    if not _ID.match(channel_id):
        raise InvalidRequest(
            f"channel_id {channel_id!r} is not valid: expected 1-64 letters, digits, '_', '.' or '-'",
            field="channel_id",
            code="invalid_field",
        )
    return channel_id


async def _opened(request: web.Request) -> tuple[ArbiterService, str]:
    """The checks every room API call makes, then the room's channel, created and joined if new."""
    _check_local(request)
    channel_id = _channel(request)
    service = request.app[SERVICE]
    await request.app[_ROOMS].open(service, channel_id)
    return service, channel_id


async def _body(request: web.Request, model: type[M]) -> M:
    raw = await request.read()
    try:
        return model.model_validate_json(raw.strip() or b"{}")
    except ValidationError as error:
        raise validation_error(error) from None


def _json(model: BaseModel) -> web.Response:
    return web.Response(text=model.model_dump_json(), content_type="application/json")


# --- handlers -------------------------------------------------------------------------------------------


async def _home(_request: web.Request) -> web.Response:
    raise web.HTTPFound(f"/room/{LOBBY}")


async def _page(request: web.Request) -> web.Response:
    _check_local(request)
    channel_id = request.match_info["channel_id"]
    if not _ID.match(channel_id):
        return web.Response(status=404, text=_not_a_room(channel_id), content_type="text/html")
    await request.app[_ROOMS].open(request.app[SERVICE], channel_id)
    return web.Response(text=request.app[_ROOMS].page, content_type="text/html")


def _not_a_room(channel_id: str) -> str:
    name = html.escape(channel_id)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>No such room</title>'
        '<link rel="stylesheet" href="/room/static/room.css"></head><body class="notice"><main>'
        f"<h1>No such room</h1><p>“{name}” is not a room name. A room name has 1 to 64 letters, digits, "
        "'_', '.' or '-', and starts with a letter or a digit.</p>"
        f'<p><a href="/room/{LOBBY}">Go to the lobby</a></p></main></body></html>'
    )


async def _room_state(service: ArbiterService, channel_id: str, notice: str | None) -> RoomState:
    personas = service.registry.views().personas
    held_back = {}
    for persona in personas:
        # A nod is the least a persona can say: what holds it back from a nod holds it back from everything.
        verdict = (await service.status(channel_id, persona.id)).tiers[wire.Tier.AIZUCHI]
        if verdict.reason in HELD_BACK:
            held_back[persona.id] = HeldBack(
                reason=verdict.reason, detail=verdict.detail, retry_after=verdict.retry_after
            )
    return RoomState(
        channel_id=channel_id,
        settings=await service.settings(channel_id),
        status=await service.status(channel_id),
        personas=personas,
        held_back=held_back,
        colors={info.id: info.color for info in service.registry.views(former=True).personas if info.color},
        memories=(await service.memories(channel_id)).memories,
        notice=notice,
        usage=(await service.usage_today(channel_id)).personas,
    )


async def _state(request: web.Request) -> web.Response:
    service, channel_id = await _opened(request)
    return _json(await _room_state(service, channel_id, request.app[_ROOMS].notice))


async def _snapshot(request: web.Request) -> web.Response:
    service, channel_id = await _opened(request)
    history = await service.recent(channel_id, HISTORY_LIMIT)
    state = await _room_state(service, channel_id, request.app[_ROOMS].notice)
    snapshot = RoomSnapshot(
        **dict(state),
        history=history,
        # The stream replays from the last message shown, so one recorded meanwhile is not missed.
        last_seq=history[-1].seq if history else 0,
    )
    return _json(snapshot)


async def _say(request: web.Request) -> web.Response:
    service, channel_id = await _opened(request)
    if request.content_type != "multipart/form-data":
        body = await _body(request, SayRequest)
        result = await service.record_message(
            channel_id, author_id=human_id(body.name), author_name=body.name, text=body.text
        )
        return _json(result)
    body, accepted = await read_say_form(request, service.image_bounds)
    store = request.app[_ROOMS].images
    origin = request.url.origin()
    images = [
        ImageRef(
            url=str(origin.with_path(f"/room/images/{image.name}")),
            content_type=image.image.media_type,
            size=len(image.data),
            width=image.image.width,
            height=image.image.height,
            local=True,
        )
        for _filename, image in accepted
    ]
    # Held before the message is recorded (a persona may ask for one as soon as it hears of it), and given back
    # if it is not: nothing is kept of a message that was refused.
    new = [image.name for _filename, image in accepted if store.put(image)]
    try:
        result = await service.record_message(
            channel_id, author_id=human_id(body.name), author_name=body.name, text=body.text, images=images
        )
    except BaseException:
        for name in new:
            store.discard(name)
        raise
    return _json(result)


async def _image(request: web.Request) -> web.Response:
    _check_local(request)
    held = request.app[_ROOMS].images.get(request.match_info["name"])
    if held is None:
        raise NotFound(
            "the room no longer holds this image (it keeps them in memory, until the arbiter restarts)",
            code="image_gone",
        )
    media_type, data = held
    # Named by the hash of its bytes: it never changes. Served as what its bytes are, and as nothing else.
    return web.Response(
        body=data,
        content_type=media_type,
        headers={
            "Cache-Control": "private, max-age=31536000, immutable",
            "Content-Security-Policy": "default-src 'none'; sandbox",
        },
    )


async def _settings(request: web.Request) -> web.Response:
    service, channel_id = await _opened(request)
    patch = await _body(request, wire.SettingsPatch)
    return _json(await service.update_settings(channel_id, patch.changes()))


async def _forget(request: web.Request) -> web.Response:
    service, channel_id = await _opened(request)
    persona_id = request.match_info.get("persona_id")
    if persona_id is not None and not _ID.match(persona_id):
        raise InvalidRequest(f"{persona_id!r} is not a persona id", field="persona_id")
    await service.reset_memory(channel_id, persona_id)
    return web.Response(status=204)


async def _events(request: web.Request) -> web.StreamResponse:
    _service, channel_id = await _opened(request)
    try:
        query = _EventsQuery.model_validate(dict(request.query))
    except ValidationError as error:
        raise validation_error(error) from None
    return await stream_events(request, channel_id, after=query.after)


async def _no_cache(request: web.Request, response: web.StreamResponse) -> None:
    """The page and its files are small: let the browser check each time, so an upgrade shows at once."""
    if request.path.startswith("/room"):
        response.headers.setdefault("Cache-Control", "no-cache")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if response.content_type == "text/html":
            response.headers.setdefault(
                "Content-Security-Policy",
                # img-src blob: for the preview of a picture about to be sent (a blob: URL of the file).
                "default-src 'self'; img-src 'self' blob:; connect-src 'self' ws: wss:; frame-ancestors 'none';"
                " base-uri 'none'",
            )


def add_room(
    app: web.Application,
    *,
    on_open: Callable[[str], Awaitable[None]] | None = None,
    notice: str | None = None,
) -> None:
    """Add the local room to the arbiter's app (before it starts; it uses ``app[SERVICE]`` and ``app[HUB]``).

    The room has no authentication: only add it when the arbiter listens on a loopback address.
    ``on_open(channel_id)`` is awaited when a room's channel is first opened, e.g. to have the personas join.
    ``notice`` is shown above the conversation (e.g. that the personas are offline stand-ins).
    """
    app[_ROOMS] = _Rooms(on_open, (STATIC / "index.html").read_text(encoding="utf-8"), notice)
    router = app.router
    router.add_get("/", _home)
    router.add_get("/room", _home)
    router.add_get("/room/", _home)
    router.add_static("/room/static/", STATIC)
    router.add_get(f"/room/images/{{name:{NAME_PATTERN}}}", _image)
    router.add_get("/room/{channel_id}", _page)
    router.add_get(f"{_API}/snapshot", _snapshot)
    router.add_get(f"{_API}/state", _state)
    router.add_post(f"{_API}/say", _say)
    router.add_patch(f"{_API}/settings", _settings)
    router.add_delete(f"{_API}/memory", _forget)
    router.add_delete(f"{_API}/memory/{{persona_id}}", _forget)
    router.add_get(f"{_API}/events", _events)
    app.on_response_prepare.append(_no_cache)
