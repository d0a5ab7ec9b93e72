"""The endpoint table: one row per endpoint, with the wire models it reads and writes.

The router and the OpenAPI document are both built from this table. Handlers are thin: the wrapper has
already authenticated the caller and parsed the body, query and path into models.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from arbiter import contract as wire
from arbiter.api.auth import TokenAuth
from arbiter.api.errors import validation_error
from arbiter.core.errors import InvalidRequest
from arbiter.core.images import ImageRef
from arbiter.core.limits import ID_PATTERN, MAX_SEQ
from arbiter.service import ArbiterService

__all__ = (
    "AUTH",
    "ENDPOINTS",
    "PATH_PARAMS",
    "SERVICE",
    "Access",
    "Call",
    "Endpoint",
    "HistoryQuery",
    "add_routes",
    "check_params",
    "check_path",
    "parse_body",
    "parse_query",
    "parse_query_params",
)

SERVICE = web.AppKey("service", ArbiterService)
AUTH = web.AppKey("auth", TokenAuth)

MAX_BODY = 64 * 1024


class Access(enum.Enum):
    PUBLIC = "public"
    PERSONA = "persona"
    ADMIN = "admin"
    ANY = "persona or admin"


class HistoryQuery(BaseModel):
    model_config = ConfigDict(frozen=True)

    # Bounded like every integer of the API: a seq is a 64-bit integer in the database.
    after: int = Field(0, ge=0, le=MAX_SEQ, description="return messages with seq greater than this")
    limit: int = Field(50, ge=1, le=200)


@dataclass(frozen=True, slots=True)
class Call:
    params: Mapping[str, str]  # the path's parameters, by name
    service: ArbiterService
    persona: str | None
    body: Any
    query: Any

    def path(self, name: str) -> str:
        return self.params[name]

    @property
    def channel_id(self) -> str:
        return self.path("channel_id")

    @property
    def seq(self) -> int:
        return int(self.path("seq"))


Handler = Callable[[Call], Awaitable[BaseModel | None]]


@dataclass(frozen=True, slots=True)
class Endpoint:
    method: str
    path: str
    summary: str
    access: Access
    handler: Handler
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    status: int = 200
    tag: str = "turns"


PATH_PARAMS = {
    "channel_id": re.compile(ID_PATTERN),
    "persona_id": re.compile(ID_PATTERN),
    "claim_id": re.compile(r"^[A-Za-z0-9_-]{1,40}$"),
    "seq": re.compile(r"^[1-9][0-9]{0,17}$"),
    "platform_message_id": re.compile(r"^[A-Za-z0-9_.:-]{1,64}$"),
}


def check_path(request: web.Request) -> None:
    check_params(request.match_info)


def check_params(params: Mapping[str, str]) -> None:
    for name, value in params.items():
        pattern = PATH_PARAMS.get(name)
        if pattern is not None and not pattern.match(value):
            kind = "a positive whole number" if name == "seq" else "1-64 letters, digits, '_', '.' or '-'"
            raise InvalidRequest(f"{name} {value!r} is not valid: expected {kind}", field=name, code="invalid_field")


async def _parse_body(request: web.Request, model: type[BaseModel]) -> BaseModel:
    return parse_body(await request.read(), model)


def parse_body(raw: bytes | str, model: type[BaseModel]) -> BaseModel:
    if not raw.strip():
        raw = b"{}"
    try:
        return model.model_validate_json(raw)
    except ValidationError as error:
        raise validation_error(error) from None


def parse_query(request: web.Request, model: type[BaseModel]) -> BaseModel:
    return parse_query_params(dict(request.query), model)


def parse_query_params(query: Mapping[str, str], model: type[BaseModel]) -> BaseModel:
    try:
        return model.model_validate(query)
    except ValidationError as error:
        raise validation_error(error) from None


def _wrap(endpoint: Endpoint) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        auth = request.app[AUTH]
        persona: str | None = None
        if endpoint.access is Access.ADMIN:
            auth.admin(request)
        elif endpoint.access is not Access.PUBLIC:
            principal = auth.principal(request)
            persona = principal.persona_id if endpoint.access is Access.ANY else auth.persona(principal)
        check_path(request)
        body = await _parse_body(request, endpoint.body) if endpoint.body is not None else None
        if endpoint.access is Access.PERSONA:
            claimed = getattr(body, "persona", None) or request.match_info.get("persona_id")
            persona = auth.persona(principal, claimed)
        query = parse_query(request, endpoint.query) if endpoint.query is not None else None
        result = await endpoint.handler(Call(request.match_info, request.app[SERVICE], persona, body, query))
        if result is None:
            return web.Response(status=204)
        return web.Response(text=result.model_dump_json(), status=endpoint.status, content_type="application/json")

    return handle


# --- handlers -------------------------------------------------------------------------------------------


async def _consume(call: Call) -> BaseModel:
    body: wire.ConsumeRequest = call.body
    assert call.persona is not None
    return await call.service.consume(
        call.channel_id, call.persona, body.text, tier=body.tier, amount=body.amount, based_on_seq=body.based_on_seq
    )


async def _claim(call: Call) -> BaseModel:
    body: wire.ClaimRequest = call.body
    assert call.persona is not None
    return await call.service.claim(
        call.channel_id,
        call.persona,
        body.tier,
        based_on_seq=body.based_on_seq,
        notes=body.notes,
        own_lines=body.own_lines,
    )


async def _speak(call: Call) -> BaseModel:
    body: wire.SpeakRequest = call.body
    assert call.persona is not None
    return await call.service.speak(
        call.channel_id,
        call.persona,
        call.path("claim_id"),
        body.text,
        tier=body.tier,
        based_on_seq=body.based_on_seq,
        memory=body.memory,
    )


async def _release(call: Call) -> BaseModel:
    body: wire.ReleaseRequest = call.body
    assert call.persona is not None
    return await call.service.release(call.channel_id, call.persona, call.path("claim_id"), memory=body.memory)


async def _memories(call: Call) -> BaseModel:
    # A persona reads its own notes only: they are written from its point of view, about the people here.
    return await call.service.memories(call.channel_id, call.persona)


async def _reset_memories(call: Call) -> None:
    await call.service.reset_memory(call.channel_id)


async def _reset_memory(call: Call) -> None:
    await call.service.reset_memory(call.channel_id, call.path("persona_id"))


async def _status(call: Call) -> BaseModel:
    return await call.service.status(call.channel_id, call.persona)


async def _history(call: Call) -> BaseModel:
    query: HistoryQuery = call.query
    return await call.service.history(call.channel_id, after=query.after, limit=query.limit)


async def _observe(call: Call) -> BaseModel:
    body: wire.ObservedMessage = call.body
    return await call.service.record_message(
        call.channel_id,
        author_id=body.author_id,
        author_name=body.author_name,
        author_kind=body.author_kind,
        text=body.text,
        platform_message_id=body.platform_message_id,
        mentions=body.mentions,
        images=[ImageRef(**image.model_dump()) for image in body.images],
    )


async def _retract(call: Call) -> BaseModel:
    assert call.persona is not None
    return await call.service.retract(call.channel_id, call.persona, call.seq)


async def _link(call: Call) -> BaseModel:
    body: wire.LinkRequest = call.body
    assert call.persona is not None
    return await call.service.link(call.channel_id, call.persona, call.seq, body.platform_message_id)


async def _usage(call: Call) -> BaseModel:
    body: wire.UsageReport = call.body
    assert call.persona is not None
    return await call.service.report_usage(
        call.channel_id,
        call.persona,
        body.prompt_tokens,
        body.completion_tokens,
        cache_read_tokens=body.cache_read_tokens,
        cache_write_tokens=body.cache_write_tokens,
        cache_read_rate=body.cache_read_rate,
        cache_write_rate=body.cache_write_rate,
    )


async def _standing(call: Call) -> BaseModel:
    body: wire.StandingReport = call.body
    assert call.persona is not None
    return await call.service.set_standing(call.channel_id, call.persona, body.cannot_post)


async def _register(call: Call) -> None:
    body: wire.PersonaRegistration = call.body
    assert call.persona is not None
    await call.service.register_persona(
        call.persona,
        body.display_name,
        body.aliases,
        color=body.color,
        platform_user_id=body.platform_user_id,
        cannot_speak=body.cannot_speak,
    )


async def _personas(call: Call) -> BaseModel:
    return call.service.registry.views()


async def _edit(call: Call) -> BaseModel:
    body: wire.EditRequest = call.body
    return await call.service.edit_message(call.channel_id, call.path("platform_message_id"), body.text)


async def _delete(call: Call) -> BaseModel:
    return await call.service.delete_message(call.channel_id, call.path("platform_message_id"))


async def _channels(call: Call) -> BaseModel:
    return await call.service.channels()


async def _create_channel(call: Call) -> BaseModel:
    body: wire.SettingsPatch = call.body
    return await call.service.ensure_channel(call.channel_id, body.changes())


async def _get_settings(call: Call) -> BaseModel:
    return await call.service.settings(call.channel_id)


async def _patch_settings(call: Call) -> BaseModel:
    body: wire.SettingsPatch = call.body
    return await call.service.update_settings(call.channel_id, body.changes())


async def _set_persona(call: Call) -> BaseModel:
    body: wire.PersonaPolicyPatch = call.body
    return await call.service.set_persona(
        call.channel_id, call.path("persona_id"), enabled=body.enabled, muted=body.muted
    )


async def _clear_history(call: Call) -> None:
    await call.service.clear_history(call.channel_id)


CH = "/v1/channels/{channel_id}"

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("POST", f"{CH}/consume", "Spend and speak in one step", Access.PERSONA, _consume,
             body=wire.ConsumeRequest, response=wire.SpeakResult),
    Endpoint("POST", f"{CH}/claims", "Claim a tier before generating", Access.PERSONA, _claim,
             body=wire.ClaimRequest, response=wire.ClaimResult),
    Endpoint("POST", f"{CH}/claims/{{claim_id}}/speak", "Speak on a claim (same or cheaper tier)", Access.PERSONA,
             _speak, body=wire.SpeakRequest, response=wire.SpeakResult),
    Endpoint("DELETE", f"{CH}/claims/{{claim_id}}", "Release a claim (pass): full refund at once", Access.PERSONA,
             _release, body=wire.ReleaseRequest, response=wire.ReleaseResult),
    Endpoint("GET", f"{CH}/status", "The pool, the tiers and the caller's standing", Access.ANY, _status,
             response=wire.StatusView),
    Endpoint("GET", f"{CH}/history", "Messages after a seq, oldest first", Access.ANY, _history,
             query=HistoryQuery, response=wire.HistoryPage),
    Endpoint("POST", f"{CH}/messages", "Record an observed message (idempotent by platform id)", Access.ADMIN,
             _observe, body=wire.ObservedMessage, response=wire.ObserveResult, tag="history"),
    Endpoint("POST", f"{CH}/messages/{{seq}}/retract", "Retract a granted message whose post failed",
             Access.PERSONA, _retract, response=wire.RetractResult, tag="history"),
    Endpoint("PUT", f"{CH}/messages/{{seq}}/platform-id", "Link a posted message to its platform id",
             Access.PERSONA, _link, body=wire.LinkRequest, response=wire.MessageView, tag="history"),
    Endpoint("PATCH", f"{CH}/platform-messages/{{platform_message_id}}", "A message was edited on the platform",
             Access.ADMIN, _edit, body=wire.EditRequest, response=wire.MessageView, tag="history"),
    Endpoint("DELETE", f"{CH}/platform-messages/{{platform_message_id}}", "A message was deleted on the platform",
             Access.ADMIN, _delete, response=wire.MessageView, tag="history"),
    Endpoint("POST", f"{CH}/usage", "Report tokens used by one LLM call", Access.PERSONA, _usage,
             body=wire.UsageReport, response=wire.UsageResult),
    Endpoint("PUT", f"{CH}/standing", "Say whether the calling persona can post here", Access.PERSONA, _standing,
             body=wire.StandingReport, response=wire.PersonaView),
    Endpoint("PUT", "/v1/personas/{persona_id}", "Register the calling persona's names", Access.PERSONA,
             _register, body=wire.PersonaRegistration, status=204, tag="personas"),
    Endpoint("GET", "/v1/personas", "The personas and how they registered", Access.ANY, _personas,
             response=wire.PersonaList, tag="personas"),
    # Any token: persona bots list the channels to follow. Tagged with the turns, not the admin endpoints.
    Endpoint("GET", "/v1/channels", "List channels (any token)", Access.ANY, _channels, response=wire.ChannelList),
    Endpoint("PUT", CH, "Create a channel, or change the settings of an existing one", Access.ADMIN,
             _create_channel, body=wire.SettingsPatch, response=wire.SettingsView, tag="admin"),
    Endpoint("GET", f"{CH}/settings", "A channel's settings", Access.ADMIN, _get_settings,
             response=wire.SettingsView, tag="admin"),
    Endpoint("PATCH", f"{CH}/settings", "Change a channel's settings", Access.ADMIN, _patch_settings,
             body=wire.SettingsPatch, response=wire.SettingsView, tag="admin"),
    Endpoint("PUT", f"{CH}/personas/{{persona_id}}", "Enable, disable, mute or unmute a persona here",
             Access.ADMIN, _set_persona, body=wire.PersonaPolicyPatch, response=wire.SettingsView, tag="admin"),
    Endpoint("DELETE", f"{CH}/history", "Clear the channel's history (and the personas' memories of it)",
             Access.ADMIN, _clear_history, status=204, tag="admin"),
    Endpoint("GET", f"{CH}/memory", "The personas' dialogue states here (a persona: its own)", Access.ANY,
             _memories, response=wire.MemoryList, tag="memory"),
    Endpoint("DELETE", f"{CH}/memory", "Reset every persona's dialogue state here", Access.ADMIN, _reset_memories,
             status=204, tag="memory"),
    Endpoint("DELETE", f"{CH}/memory/{{persona_id}}", "Reset one persona's dialogue state here", Access.ADMIN,
             _reset_memory, status=204, tag="memory"),
)  # fmt: skip


def add_routes(app: web.Application) -> None:
    for endpoint in ENDPOINTS:
        app.router.add_route(endpoint.method, endpoint.path, _wrap(endpoint))
