"""Every error becomes a JSON body naming what is wrong, with one status code per error family."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from arbiter.api.auth import Unauthorized
from arbiter.contract import ErrorBody, ErrorDetail
from arbiter.core.errors import (
    ArbiterError,
    ConflictError,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    StorageError,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from pydantic import ValidationError

__all__ = ("error_middleware", "error_response", "validation_error")

_log = logging.getLogger(__name__)

_STATUS: tuple[tuple[type[ArbiterError], int], ...] = (
    (Unauthorized, 401),
    (PermissionDenied, 403),
    (NotFound, 404),
    (ConflictError, 409),
    (InvalidRequest, 422),
    (StorageError, 503),
)


class BadRequest(ArbiterError):
    code = "bad_request"


def error_response(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    body = ErrorBody(error=ErrorDetail(code=code, message=message, field=field))
    response = web.json_response(text=body.model_dump_json(exclude_none=True), status=status)
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="aizuchi"'
    return response


def validation_error(error: ValidationError, prefix: str = "") -> ArbiterError:
    first = error.errors(include_url=False)[0]
    if first["type"] == "json_invalid":
        return BadRequest(f"malformed JSON: {first['msg']}", code="malformed_json")
    # pydantic marks a bad mapping key with a "[key]" part after the key itself; the key is the field's name.
    location = ".".join(str(part) for part in first["loc"] if part != "[key]")
    field = f"{prefix}{location}" if location else (prefix.rstrip(".") or None)
    if first["type"] == "model_type":
        return BadRequest("the body must be a JSON object", code="malformed_json", field=field)
    message = f"{field}: {first['msg']}" if field else first["msg"]
    return InvalidRequest(message, field=field, code="invalid_field")


@web.middleware
async def error_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadRequest as error:
        return error_response(400, error.code, error.message, error.field)
    except ArbiterError as error:
        status = next((code for family, code in _STATUS if isinstance(error, family)), 500)
        if status == 503:
            _log.warning("%s %s: %s", request.method, request.path, error.message)
        return error_response(status, error.code, error.message, error.field)
    except web.HTTPRequestEntityTooLarge as error:
        return error_response(413, "too_large", f"the body is too large ({error.text})")
    except web.HTTPNotFound:
        return error_response(404, "no_route", f"no endpoint {request.method} {request.path}; see /v1/openapi.json")
    except web.HTTPMethodNotAllowed as error:
        allowed = ", ".join(sorted(error.allowed_methods))
        return error_response(405, "method_not_allowed", f"{request.method} is not allowed here; use {allowed}")
    except web.HTTPException as error:
        if error.status >= 400:
            return error_response(error.status, "http_error", error.reason)
        raise
