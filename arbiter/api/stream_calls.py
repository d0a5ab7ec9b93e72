"""Requests carried on the multiplexed stream (``StreamCall``): a persona's endpoints of the endpoint table, run as
their HTTP requests would be, and answered with the status and body HTTP would give (``ReplyEvent``).

A persona process holds the stream anyway; a claim, a speech or a release on it costs both ends a frame each way
instead of an HTTP request and its answer. Only the endpoints a persona's token may call (``Access.PERSONA`` and
``Access.ANY``) are offered, each as the persona the call names: the stream has checked that it acts for it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from arbiter import contract as wire
from arbiter.api.auth import Principal, TokenAuth
from arbiter.api.errors import error_body, error_status
from arbiter.api.routes import (
    ENDPOINTS,
    Access,
    Call,
    Endpoint,
    check_params,
    parse_body,
    parse_query_params,
)
from arbiter.core.errors import ArbiterError

if TYPE_CHECKING:
    from arbiter.service import ArbiterService

__all__ = ("answer_call",)

_log = logging.getLogger(__name__)

_PARAMETER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True, slots=True)
class _Route:
    endpoint: Endpoint
    pattern: re.Pattern[str]


def _routes() -> dict[str, list[_Route]]:
    """The persona's endpoints by method, each path a pattern whose groups are its parameters."""
    routes: dict[str, list[_Route]] = {}
    for endpoint in ENDPOINTS:
        if endpoint.access in (Access.PERSONA, Access.ANY):
            # The table's paths are letters, digits, '/' and '-' between their parameters: nothing to escape.
            pattern = re.compile("^" + _PARAMETER.sub(r"(?P<\1>[^/]+)", endpoint.path) + "$")
            routes.setdefault(endpoint.method, []).append(_Route(endpoint, pattern))
    return routes


_ROUTES = _routes()


class _NoRoute(ArbiterError):
    code = "no_route"


def _match(method: str, path: str) -> tuple[Endpoint, dict[str, str]]:
    for route in _ROUTES.get(method, ()):
        found = route.pattern.match(path)
        if found is not None:
            return route.endpoint, found.groupdict()
    raise _NoRoute(f"no endpoint {method} {path} a persona may call on the stream; see /v1/openapi.json")


async def answer_call(service: ArbiterService, call: wire.StreamCall, persona: str) -> wire.ReplyEvent:
    """``call`` carried out as ``persona`` (one the stream acts for), as its HTTP request would be."""
    path, _, query_text = call.path.partition("?")
    channel: str | None = None
    try:
        endpoint, params = _match(call.method, path)
        channel = params.get("channel_id")
        check_params(params)
        body = parse_body(call.body or "", endpoint.body) if endpoint.body is not None else None
        if endpoint.access is Access.PERSONA:
            claimed = getattr(body, "persona", None) or params.get("persona_id")
            persona = TokenAuth.persona(Principal(persona), claimed)
        query = parse_query_params(dict(parse_qsl(query_text)), endpoint.query) if endpoint.query else None
        result = await endpoint.handler(Call(params, service, persona, body, query))
    except _NoRoute as error:
        return wire.ReplyEvent(id=call.id, status=404, body=error_body(error.code, error.message))
    except ArbiterError as error:
        status = error_status(error)
        if status == 503:
            _log.warning("%s %s on the stream: %s", call.method, path, error.message)
        body_text = error_body(error.code, error.message, error.field)
        return wire.ReplyEvent(channel_id=channel, id=call.id, status=status, body=body_text)
    if result is None:
        return wire.ReplyEvent(channel_id=channel, id=call.id, status=204)
    return wire.ReplyEvent(channel_id=channel, id=call.id, status=endpoint.status, body=result.model_dump_json())
