"""The OpenAI adapter: the official SDK (async), one long-lived client, Chat Completions.

Chat Completions rather than Responses because it is what OpenAI-compatible servers speak: with the
profile's ``base_url`` the same adapter drives Ollama, vLLM, LM Studio and Gemini's compatible endpoint
(see profiles.example.toml).

Mapping: system -> a ``system`` message; an assistant turn's tool calls -> ``tool_calls`` with JSON-string
arguments; the next user turn's results -> one ``role: "tool"`` message each; a strict-compatible tool (the
decide tool) gets ``strict: true`` unless the profile's ``strict_tools`` is off; tool_choice -> "auto" |
"required" | "none" | ``{"type": "function", "function": {"name": ...}}``.

Profile options, because compatible servers differ: ``structured_output`` "tools" (a forced ``decide`` call,
the default) or "json_schema" (``response_format`` with a strict JSON schema); ``max_tokens_param``
"max_completion_tokens" (OpenAI) or "max_tokens" (older compatible servers); ``extra_body`` is sent as is
(e.g. ``reasoning_effort`` or a server's sampling options). OpenAI's GPT-5.6 models take function tools on Chat
Completions only with ``reasoning_effort: "none"``, which the built-in profile sends.

Time: the SDK client makes no retries (``max_retries=0``) and each call gets the SDK's per-request
``timeout``; :func:`bots.llm.base.call_with_retries` makes the profile's few retries, only when they fit in
the request's ``time_left_s`` (see there).
"""

from __future__ import annotations

import base64
import json
import logging
from typing import TYPE_CHECKING, Any

import openai

from bots.llm.base import (
    ChatProvider,
    Completion,
    CompletionRequest,
    DecisionRequest,
    DecisionResult,
    ImageInput,
    LLMAuthError,
    LLMBadOutput,
    LLMError,
    LLMTimeout,
    LLMUnavailable,
    StopReason,
    ToolCall,
    ToolSpec,
    Turn,
    Usage,
    call_with_retries,
    decision_instructions,
    decision_schema,
    error_for_status,
    parse_decision_json,
)
from bots.llm.pricing import model_price, prefix_tokens

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bots.llm.pricing import ModelPrice
    from bots.llm.profiles import ProviderProfile

__all__ = ("DEFAULT_OPENAI_URL", "OpenAIChat")

_log = logging.getLogger(__name__)

DEFAULT_OPENAI_URL = "https://api.openai.com/v1"

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


class OpenAIChat(ChatProvider):
    def __init__(self, profile: ProviderProfile, api_key: str) -> None:
        self.profile = profile
        self.name = f"openai/{profile.model}"
        # The key goes to the SDK and nowhere else: not stored here, not logged. No SDK retries: its waits know
        # nothing of the turn's time left (call_with_retries retries instead).
        self._client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=profile.base_url or DEFAULT_OPENAI_URL,
            timeout=profile.timeout_s,
            max_retries=0,
        )

    def __repr__(self) -> str:
        return f"OpenAIChat(profile={self.profile.name!r}, model={self.profile.model!r})"

    async def aclose(self) -> None:
        await self._client.close()

    async def check_key(self, timeout_s: float) -> None:
        # Listing models is the cheapest call the key must be good for; it costs no tokens.
        try:
            await self._client.models.list(timeout=timeout_s)
        except openai.OpenAIError as err:
            error = _translate(err)
            raise (self.profile.refused(error) if isinstance(error, LLMAuthError) else error) from err

    @property
    def price(self) -> ModelPrice | None:
        # Only OpenAI's own models are in the table: a compatible server's (Ollama's gemma4, say) gets no cache fields.
        return model_price("openai", self.profile.model)

    async def complete(self, request: CompletionRequest) -> Completion:
        params = self._params(request.system, request.turns, request.max_tokens, request.tools, request.cache_key)
        if request.tools:
            params["tools"] = [self._tool(tool) for tool in request.tools]
            params["tool_choice"] = _tool_choice(request.tool_choice)
        return _completion(await self._create(params, request.time_left_s))

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        if self.profile.structured_output != "json_schema":
            return await super().decide(request)
        system = f"{request.system}\n\n{decision_instructions(request)}".strip()
        params = self._params(system, request.turns, request.max_tokens, (), request.cache_key)
        params["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "decision", "schema": decision_schema(request), "strict": True},
        }
        completion = _completion(await self._create(params, request.time_left_s))
        if completion.stop_reason == "refusal":
            raise LLMBadOutput("the model refused to decide", usage=completion.usage)
        return DecisionResult(parse_decision_json(completion.text, request, completion.usage), completion.usage)

    def _params(
        self,
        system: str,
        turns: tuple[Turn, ...],
        max_tokens: int | None,
        tools: Sequence[ToolSpec],
        cache_key: str | None,
    ) -> dict[str, Any]:
        price = self.price
        messages: list[dict[str, Any]] = []
        if system:
            marked = (
                price is not None
                and price.explicit_breakpoints
                and (prefix_tokens(system, tools) >= price.min_cacheable)
            )
            # The end of what a persona sends the same on every call (the tools, then the system prompt) as an explicit
            # breakpoint: below the model's minimum, nothing would be cached, so nothing is marked.
            part = {"type": "text", "text": system, "prompt_cache_breakpoint": {"mode": "explicit"}}
            messages.append({"role": "system", "content": [part] if marked else system})
        messages.extend(_messages(turns, images=self.profile.images))
        params: dict[str, Any] = {
            "model": self.profile.model,
            "messages": messages,
            self.profile.max_tokens_param: max_tokens or self.profile.max_tokens,
        }
        if price is not None:
            if cache_key is not None:
                params["prompt_cache_key"] = cache_key  # routes a persona's calls to where its prefix is cached
            if price.explicit_breakpoints:
                # No implicit breakpoint: it would be written (at 1.25x) at the newest message, which changes on
                # every call, and never read.
                params["prompt_cache_options"] = {"mode": "explicit"}
        if self.profile.extra_body:
            params["extra_body"] = dict(self.profile.extra_body)
        return params

    def _tool(self, tool: ToolSpec) -> dict[str, Any]:
        function: dict[str, Any] = {
            "name": tool.name,
            "description": tool.description,
            "parameters": dict(tool.parameters),
        }
        if tool.strict and self.profile.strict_tools:
            function["strict"] = True
        return {"type": "function", "function": function}

    async def _create(self, params: dict[str, Any], time_left_s: float | None) -> object:
        return await call_with_retries(
            lambda timeout_s: self._create_once(params, timeout_s),
            name=self.name,
            timeout_s=self.profile.timeout_s,
            max_retries=self.profile.max_retries,
            time_left_s=time_left_s,
        )

    async def _create_once(self, params: dict[str, Any], timeout_s: float) -> object:
        try:
            return await self._client.chat.completions.create(**params, timeout=timeout_s)
        except openai.OpenAIError as err:
            error = _translate(err)
            if isinstance(error, LLMAuthError):
                raise self.profile.refused(error) from err  # said once, by the persona that stops calling
            _log.warning("openai call failed model=%s error=%s: %s", self.profile.model, type(error).__name__, error)
            raise error from err
        except json.JSONDecodeError as err:
            # The SDK lets a body that claims to be JSON but is not escape as a decoding error.
            raise LLMBadOutput("the API answered with a body that is not valid JSON") from err


def _tool_choice(choice: str) -> str | dict[str, Any]:
    if choice in ("auto", "required", "none"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _messages(turns: tuple[Turn, ...], *, images: bool) -> list[dict[str, Any]]:
    """``images``: whether the model takes images (the profile's ``images``); without, a turn's are left out."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            if turn.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
                    }
                    for call in turn.tool_calls
                ]
            if message["content"] is not None or turn.tool_calls:
                messages.append(message)
            continue
        # Tool results must directly follow the assistant message that made the calls.
        messages.extend(
            {
                "role": "tool",
                "tool_call_id": result.call_id,
                "content": f"error: {result.content}" if result.is_error else result.content,
            }
            for result in turn.tool_results
        )
        shown = turn.images if images else ()
        if shown:
            # Detail "auto" (the API's default); bots.images estimates its cost as "high", the most it may be.
            parts: list[dict[str, Any]] = [
                {"type": "image_url", "image_url": {"url": _image_url(image), "detail": "auto"}} for image in shown
            ]
            if turn.text:
                parts.append({"type": "text", "text": turn.text})
            messages.append({"role": "user", "content": parts})
        elif turn.text:
            messages.append({"role": "user", "content": turn.text})
    return messages


def _completion(response: object) -> Completion:
    reported = getattr(response, "usage", None)
    usage = _usage(reported)
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise LLMBadOutput(
            f"the API answered without a choice: {type(response).__name__}",
            usage=usage if reported is not None else None,
        )
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise LLMBadOutput("the API answered a choice without a message", usage=usage)
    calls = tuple(_tool_call(call, usage) for call in getattr(message, "tool_calls", None) or ())
    text = getattr(message, "content", None) or ""
    stop = _STOP_REASONS.get(str(getattr(choice, "finish_reason", "")), "other")
    if getattr(message, "refusal", None) and not calls:
        stop = "refusal"
    elif calls:
        # Some compatible servers say "stop" even when the answer is a tool call.
        stop = "tool_use"
    return Completion(text=str(text).strip(), tool_calls=calls, usage=usage, stop_reason=stop)


def _tool_call(call: object, usage: Usage) -> ToolCall:
    function = getattr(call, "function", None)
    name = getattr(function, "name", None)
    if function is None or not isinstance(name, str):
        raise LLMBadOutput("the model made a tool call without a function name", usage=usage)
    raw = getattr(function, "arguments", None)
    # Arguments are a JSON string; a few compatible servers send the object itself, or nothing for no arguments.
    if isinstance(raw, dict):
        arguments: object = raw
    elif raw is None or (isinstance(raw, str) and not raw.strip()):
        arguments = {}
    else:
        try:
            arguments = json.loads(str(raw))
        except ValueError:
            raise LLMBadOutput(f"tool {name!r} was called with arguments that are not JSON", usage=usage) from None
    if not isinstance(arguments, dict):
        raise LLMBadOutput(f"tool {name!r} was called with arguments that are not an object", usage=usage)
    return ToolCall(id=str(getattr(call, "id", "") or f"call_{name}"), name=name, arguments=arguments)


def _usage(usage: object) -> Usage:
    if usage is None:
        return Usage()
    # prompt_tokens counts every input token; the details say how many were read from the cache and written to it.
    details = getattr(usage, "prompt_tokens_details", None)
    return Usage(
        prompt_tokens=int(getattr(usage, "prompt_tokens", None) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", None) or 0),
        cache_read_tokens=int(getattr(details, "cached_tokens", None) or 0),
        cache_write_tokens=int(getattr(details, "cache_write_tokens", None) or 0),
    )


def _translate(err: openai.OpenAIError) -> LLMError:
    # Order matters: the timeout error is a connection error, and a 429 is a status error.
    if isinstance(err, openai.APITimeoutError):
        return LLMTimeout("the OpenAI-compatible API did not answer in time")
    if isinstance(err, openai.APIConnectionError):
        return LLMUnavailable(f"could not reach the OpenAI-compatible API: {err.message}")
    if isinstance(err, openai.APIStatusError):
        return _translate_status(err)
    if isinstance(err, openai.APIResponseValidationError):
        return LLMBadOutput(f"the OpenAI-compatible API answered with an unexpected body: {err.message}")
    if isinstance(err, openai.LengthFinishReasonError | openai.ContentFilterFinishReasonError):
        return LLMBadOutput(str(err))
    return LLMError(f"OpenAI SDK error: {type(err).__name__}: {err}")


def _translate_status(err: openai.APIStatusError) -> LLMError:
    status = err.status_code
    body = err.body if isinstance(err.body, dict) else {}
    message = body.get("message") if isinstance(body.get("message"), str) else err.message
    detail = f"OpenAI-compatible API {status}: {message}"
    return error_for_status(status, detail, err.response.headers)


def _image_url(image: ImageInput) -> str:
    """Its address, which the API fetches; or, when the runtime holds its bytes, a base64 data URL of them (OpenAI's
    images and vision guide: "data:image/jpeg;base64,...")."""
    if image.data is None:
        return image.url
    return f"data:{image.media_type};base64,{base64.b64encode(image.data).decode('ascii')}"
