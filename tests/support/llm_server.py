"""A local aiohttp server that speaks the Anthropic and OpenAI wire formats, for driving the real SDK clients.

Each test scripts the replies, in order, whatever the endpoint: a tool call, plain text, an HTTP error with
headers, a delay past the client's timeout, a malformed body. The server records every request it received,
so a test can assert what the SDK actually sent. One reply is consumed per request, retries included.

    async with FakeLLMServer(tool_call("decide", {"action": "pass", "text": ""})) as server:
        profile = fake_profile(server, "openai")
        ...
        assert server.requests[0].body["tool_choice"] == ...

Endpoints: ``POST /v1/messages`` (Anthropic; base URL ``server.anthropic_url``) and
``POST /v1/chat/completions`` (OpenAI; base URL ``server.openai_url``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web

from bots.llm.profiles import ProviderProfile

if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import TracebackType

__all__ = (
    "FAKE_KEY",
    "FAKE_KEY_ENV",
    "FakeLLMServer",
    "RecordedRequest",
    "Reply",
    "decision_reply",
    "delayed",
    "error",
    "fake_profile",
    "raw",
    "text_reply",
    "tool_call",
)

Api = Literal["anthropic", "openai"]

FAKE_KEY_ENV = "FAKE_LLM_API_KEY"
FAKE_KEY = "sk-fake-0123456789abcdef-never-log-me"


@dataclass(frozen=True)
class Reply:
    """One scripted answer; build it with :func:`tool_call`, :func:`text_reply`, :func:`error` or :func:`raw`."""

    kind: Literal["tool_calls", "text", "error", "raw"]
    text: str = ""
    # (name, arguments); arguments given as a str are sent as is, to fake malformed output.
    calls: tuple[tuple[str, object], ...] = ()
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str = ""
    content_type: str = "application/json"
    delay_s: float = 0.0
    usage: tuple[int, int] = (21, 7)
    stop_reason: str | None = None


def tool_call(
    name: str,
    arguments: object,
    *more: tuple[str, object],
    text: str = "",
    usage: tuple[int, int] = (21, 7),
    stop_reason: str | None = None,
) -> Reply:
    """The model calls a tool (and maybe more: ``(name, arguments)`` pairs). A str ``arguments`` is sent raw."""
    return Reply("tool_calls", text=text, calls=((name, arguments), *more), usage=usage, stop_reason=stop_reason)


def text_reply(text: str, *, usage: tuple[int, int] = (21, 7), stop_reason: str | None = None) -> Reply:
    return Reply("text", text=text, usage=usage, stop_reason=stop_reason)


def error(status: int, message: str = "scripted failure", *, headers: Mapping[str, str] | None = None) -> Reply:
    """An HTTP error in the API's own error format. Add ``retry-after-ms`` to keep SDK retries fast."""
    return Reply("error", status=status, body=message, headers=dict(headers or {}))


def raw(body: str, *, status: int = 200, content_type: str = "application/json") -> Reply:
    """A body sent exactly as given: for malformed responses."""
    return Reply("raw", status=status, body=body, content_type=content_type)


def decision_reply(structured_output: str, arguments: object, *, usage: tuple[int, int] = (21, 7)) -> Reply:
    """How a model answers a decision in a profile's ``structured_output`` mode: a decide call, or JSON text."""
    if structured_output == "tools":
        return tool_call("decide", arguments, usage=usage)
    return text_reply(arguments if isinstance(arguments, str) else json.dumps(arguments), usage=usage)


def delayed(seconds: float, reply: Reply) -> Reply:
    """``reply``, after ``seconds``: longer than the client's timeout, it makes a timeout."""
    return replace(reply, delay_s=seconds)


@dataclass(frozen=True)
class RecordedRequest:
    api: Api
    path: str
    headers: Mapping[str, str]
    body: Any


class FakeLLMServer:
    """Start with ``async with``; ``requests`` lists what arrived, ``remaining`` how many replies are left."""

    def __init__(self, *replies: Reply) -> None:
        self._replies: deque[Reply] = deque(replies)
        self.requests: list[RecordedRequest] = []
        self.unscripted = 0
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        self._ids = 0

    def script(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    @property
    def remaining(self) -> int:
        return len(self._replies)

    @property
    def anthropic_url(self) -> str:
        return self.base_url

    @property
    def openai_url(self) -> str:
        return f"{self.base_url}/v1"

    def bodies(self, api: Api | None = None) -> list[Any]:
        return [request.body for request in self.requests if api is None or request.api == api]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_post("/v1/chat/completions", self._openai)
        # handler_cancellation: a client that gave up (timeout) cancels its slow handler instead of leaving it.
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeLLMServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    # --- handlers ---------------------------------------------------------------------------------------

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        reply = await self._next(request, "anthropic")
        if reply is None:
            return _unscripted("anthropic")
        if reply.kind == "raw":
            return web.Response(status=reply.status, text=reply.body, content_type=reply.content_type)
        if reply.kind == "error":
            body = {"type": "error", "error": {"type": _anthropic_error_type(reply.status), "message": reply.body}}
            return web.json_response(body, status=reply.status, headers=reply.headers)
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        for name, arguments in reply.calls:
            content.append({"type": "tool_use", "id": self._id("toolu"), "name": name, "input": arguments})
        message = {
            "id": self._id("msg"),
            "type": "message",
            "role": "assistant",
            "model": _model(self.requests[-1].body),
            "content": content,
            "stop_reason": reply.stop_reason or ("tool_use" if reply.calls else "end_turn"),
            "stop_sequence": None,
            "usage": {"input_tokens": reply.usage[0], "output_tokens": reply.usage[1]},
        }
        return web.json_response(message)

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        reply = await self._next(request, "openai")
        if reply is None:
            return _unscripted("openai")
        if reply.kind == "raw":
            return web.Response(status=reply.status, text=reply.body, content_type=reply.content_type)
        if reply.kind == "error":
            failure = {"error": {"message": reply.body, "type": _openai_error_type(reply.status), "param": None}}
            return web.json_response(failure, status=reply.status, headers=reply.headers)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.calls:
            message["tool_calls"] = [
                {
                    "id": self._id("call"),
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                    },
                }
                for name, arguments in reply.calls
            ]
        prompt, completion = reply.usage
        body: dict[str, Any] = {
            "id": self._id("chatcmpl"),
            "object": "chat.completion",
            "created": 1_785_000_000,
            "model": _model(self.requests[-1].body),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.stop_reason or ("tool_calls" if reply.calls else "stop"),
                }
            ],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }
        return web.json_response(body)

    async def _next(self, request: web.Request, api: Api) -> Reply | None:
        try:
            body: Any = await request.json()
        except ValueError:
            body = await request.text()
        self.requests.append(RecordedRequest(api, request.path, dict(request.headers), body))
        if not self._replies:
            self.unscripted += 1
            return None
        reply = self._replies.popleft()
        if reply.delay_s > 0:
            # Ends early when the server stops, so a test's teardown never waits out a long delay.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), reply.delay_s)
        return reply

    def _id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}_fake{self._ids:04d}"


def _model(body: Any) -> str:
    return str(body.get("model", "fake-model")) if isinstance(body, dict) else "fake-model"


def _unscripted(api: Api) -> web.Response:
    # A 400 that tells the SDK not to retry: the test scripted too few replies.
    message = "fake LLM server: no scripted reply left"
    body: dict[str, Any] = (
        {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        if api == "anthropic"
        else {"error": {"message": message, "type": "invalid_request_error", "param": None}}
    )
    return web.json_response(body, status=400, headers={"x-should-retry": "false"})


def _anthropic_error_type(status: int) -> str:
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error")


def _openai_error_type(status: int) -> str:
    return {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )


def fake_profile(server: FakeLLMServer, provider: Api, **overrides: Any) -> ProviderProfile:
    """A profile pointing the provider's SDK at ``server``, with short timeouts fit for tests."""
    settings: dict[str, Any] = {
        "name": f"fake-{provider}",
        "provider": provider,
        "model": "claude-haiku-5-5" if provider == "anthropic" else "gpt-5.6-luna",
        "base_url": server.anthropic_url if provider == "anthropic" else server.openai_url,
        "api_key_env": FAKE_KEY_ENV,
        "timeout_s": 2.0,
        "max_retries": 2,
        "max_tokens": 256,
    }
    return ProviderProfile.model_validate({**settings, **overrides})
