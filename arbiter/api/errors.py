"""Every error becomes a JSON body naming what is wrong, with one status code per error family."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.web_protocol import RequestHandler

from arbiter.api.auth import Unauthorized
from arbiter.contract import ErrorBody, ErrorDetail
from arbiter.core.errors import (
    ArbiterError,
    ConflictError,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    TooLarge,
)
from arbiter.storage.errors import StorageError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from aiohttp.web_request import BaseRequest
    from pydantic import ValidationError

__all__ = (
    "RequestsAsReceived",
    "error_body",
    "error_middleware",
    "error_response",
    "error_status",
    "quiet_bad_requests",
    "unquoted_bad_requests",
    "validation_error",
)

_log = logging.getLogger(__name__)

_STATUS: tuple[tuple[type[ArbiterError], int], ...] = (
    (Unauthorized, 401),
    (PermissionDenied, 403),
    (NotFound, 404),
    (ConflictError, 409),
    (TooLarge, 413),
    (InvalidRequest, 422),
    (StorageError, 503),
)


class BadRequest(ArbiterError):
    code = "bad_request"


def error_response(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    response = web.json_response(text=error_body(code, message, field), status=status)
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="aizuchi"'
    return response


def error_status(error: ArbiterError) -> int:
    """The HTTP status of an error of the arbiter's family."""
    if isinstance(error, BadRequest):
        return 400
    return next((code for family, code in _STATUS if isinstance(error, family)), 500)


def error_body(code: str, message: str, field: str | None = None) -> str:
    return ErrorBody(error=ErrorDetail(code=code, message=message, field=field)).model_dump_json(exclude_none=True)


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
    except ArbiterError as error:
        status = error_status(error)
        if status == 503:
            _log.warning("%s %s: %s", request.method, request.path, error.message)
        return error_response(status, error.code, error.message, error.field)
    except web.HTTPRequestEntityTooLarge as error:
        return error_response(413, "too_large", f"the body is too large ({error.text})")
    except web.HTTPNotFound:
        return error_response(404, "no_route", f"no endpoint {request.method} {request.path}; see /v1/openapi.json")
    except web.HTTPMethodNotAllowed as error:
        allowed = ", ".join(sorted(error.allowed_methods))
        response = error_response(405, "method_not_allowed", f"{request.method} is not allowed here; use {allowed}")
        # RFC 9110 requires it on a 405; aiohttp's own answer has it, and this one replaces that answer.
        response.headers["Allow"] = allowed
        return response
    except web.HTTPException as error:
        if error.status >= 400:
            return error_response(error.status, "http_error", error.reason)
        raise


class RequestsAsReceived(logging.Filter):
    """aiohttp logs a request it cannot parse at ERROR, with the parser's exception, whose message quotes the
    offending line: for a header too long, the start of its value - a bearer token, if that is the header.

    A malformed request is the client's mistake, not the server's, and its content may be a secret: the record
    becomes one warning naming the client and what was wrong, without the content or the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, BadHttpMessage):
            remote = record.args[0] if isinstance(record.args, tuple) and record.args else "a client"
            what = _what_was_wrong(error)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = "bad HTTP request from %s: %s; answered 400 (its content is not logged)"
            record.args = (remote, what)
            record.exc_info = record.exc_text = None
        return True


def _what_was_wrong(error: BadHttpMessage) -> str:
    if isinstance(error, LineTooLong):
        return f"a request line or header longer than {error.args[1]} bytes"
    return f"a malformed request ({type(error).__name__})"


class _UnquotedBadRequests(RequestHandler):
    """aiohttp answers a request it cannot parse with the parser's message, which quotes the offending line: for a
    header too long, the start of its value, a bearer token if that is the header, sent back in the clear. The
    answer says what was wrong instead, without the content."""

    def handle_error(
        self, request: BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        if isinstance(exc, BadHttpMessage):
            message = f"{status} Bad Request: {_what_was_wrong(exc)}"
        return super().handle_error(request, status, exc, message)


class _UnquotingServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _UnquotedBadRequests(self, loop=self._loop, **self._kwargs)


def unquoted_bad_requests(server: web.Server) -> None:
    """Make ``server`` (a runner's, once set up) answer unparsable requests without quoting them. aiohttp has no
    option for its answer, and builds each connection's handler in ``Server.__call__``: the server becomes the
    subclass that builds ours (a test holds the answer, so a change in aiohttp shows)."""
    server.__class__ = _UnquotingServer


def quiet_bad_requests() -> None:
    """Filter aiohttp's server log through :class:`RequestsAsReceived` (once, however many apps are built).

    On the logger itself rather than on a handler, so that it holds whatever handlers the process has."""
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(existing, RequestsAsReceived) for existing in server_log.filters):
        server_log.addFilter(RequestsAsReceived())
