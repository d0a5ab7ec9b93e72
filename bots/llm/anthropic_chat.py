"""The Anthropic adapter: the official SDK (async), one long-lived client, Messages API.

Mapping: system -> ``system``; turns -> ``messages`` (an assistant turn's tool calls become ``tool_use``
blocks, the next user turn's results ``tool_result`` blocks); tools -> ``{name, description, input_schema}``,
with ``strict: true`` on a strict-compatible tool (the decide tool) unless the profile's ``strict_tools`` is
off; tool_choice -> ``{"type": "auto" | "any" | "none" | "tool"}``. No ``temperature``: the SDK no longer
takes it and newer models reject non-default sampling.

Thinking: newer models (Claude Haiku 5.5 and later) think by default, and a request that forces a tool while
thinking is on is rejected. With the profile's ``thinking = "off"`` (the default) every request says
``thinking: {"type": "disabled"}``: our replies are short, and latency matters more than deliberation.
Models that cannot stop thinking or be forced to call a tool (Opus 5.5, Fable 5.1; Sonnet 5.5, which takes
``between_tools`` rather than ``disabled``) need ``thinking = "model_default"`` and
``structured_output = "json_schema"`` (the decision then comes through ``output_config``, not a forced tool).

Time: the SDK client makes no retries (``max_retries=0``) and each call gets the SDK's per-request
``timeout``; :func:`bots.llm.base.call_with_retries` makes the profile's few retries, only when they fit in
the request's ``time_left_s`` (see there).
"""

from __future__ import annotations

import base64
import json
import logging
from typing import TYPE_CHECKING, Any

import anthropic

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
from bots.llm.pricing import min_cacheable, model_price, prefix_tokens

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bots.llm.pricing import ModelPrice
    from bots.llm.profiles import ProviderProfile

__all__ = ("DEFAULT_ANTHROPIC_URL", "AnthropicChat")

_log = logging.getLogger(__name__)

DEFAULT_ANTHROPIC_URL = "https://api.anthropic.com"

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
}


class AnthropicChat(ChatProvider):
    def __init__(self, profile: ProviderProfile, api_key: str) -> None:
        self.profile = profile
        self.name = f"anthropic/{profile.model}"
        # The key goes to the SDK and nowhere else: not stored here, not logged. No SDK retries: its waits know
        # nothing of the turn's time left (call_with_retries retries instead).
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=profile.base_url or DEFAULT_ANTHROPIC_URL,
            timeout=profile.timeout_s,
            max_retries=0,
        )

    def __repr__(self) -> str:
        return f"AnthropicChat(profile={self.profile.name!r}, model={self.profile.model!r})"

    async def aclose(self) -> None:
        await self._client.close()

    async def check_key(self, timeout_s: float) -> None:
        # Listing models is the cheapest call the key must be good for; it costs no tokens.
        try:
            await self._client.models.list(limit=1, timeout=timeout_s)
        except anthropic.AnthropicError as err:
            error = _translate(err)
            raise (self.profile.refused(error) if isinstance(error, LLMAuthError) else error) from err

    @property
    def price(self) -> ModelPrice | None:
        return model_price("anthropic", self.profile.model)

    async def complete(self, request: CompletionRequest) -> Completion:
        params = self._params(request.system, request.turns, request.max_tokens, request.tools)
        if request.tools:
            params["tools"] = [self._tool(tool) for tool in request.tools]
            params["tool_choice"] = _tool_choice(request.tool_choice)
        message = await self._create(params, request.time_left_s)
        return _completion(message)

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        if self.profile.structured_output != "json_schema":
            return await super().decide(request)
        system = f"{request.system}\n\n{decision_instructions(request)}".strip()
        params = self._params(system, request.turns, request.max_tokens, ())
        params["output_config"] = {"format": {"type": "json_schema", "schema": decision_schema(request)}}
        completion = _completion(await self._create(params, request.time_left_s))
        return DecisionResult(parse_decision_json(completion.text, request, completion.usage), completion.usage)

    def _params(
        self, system: str, turns: tuple[Turn, ...], max_tokens: int | None, tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.profile.model,
            "max_tokens": max_tokens or self.profile.max_tokens,
            "messages": _messages(turns, images=self.profile.images),
        }
        if system:
            params["system"] = self._system(system, tools)
        if self.profile.thinking == "off":
            params["thinking"] = {"type": "disabled"}
        if self.profile.extra_body:
            params["extra_body"] = dict(self.profile.extra_body)
        return params

    def _system(self, system: str, tools: Sequence[ToolSpec]) -> str | list[dict[str, Any]]:
        """The system prompt, marked as the end of the cacheable prefix (the tools, then the system prompt: what a
        persona sends the same on every call) when that prefix is as long as the model caches. A breakpoint there
        caches both, as the prompt caching guide orders a request: tools, system, messages."""
        minimum = min_cacheable("anthropic", self.profile.model)
        if minimum is None or prefix_tokens(system, tools) < minimum:
            return system
        return [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]

    def _tool(self, tool: ToolSpec) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "name": tool.name,
            "description": tool.description,
            "input_schema": dict(tool.parameters),
        }
        if tool.strict and self.profile.strict_tools:
            spec["strict"] = True
        return spec

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
            return await self._client.messages.create(**params, timeout=timeout_s)
        except anthropic.AnthropicError as err:
            error = _translate(err)
            if isinstance(error, LLMAuthError):
                raise self.profile.refused(error) from err  # said once, by the persona that stops calling
            _log.warning("anthropic call failed model=%s error=%s: %s", self.profile.model, type(error).__name__, error)
            raise error from err
        except json.JSONDecodeError as err:
            # The SDK lets a body that claims to be JSON but is not escape as a decoding error.
            raise LLMBadOutput("the API answered with a body that is not valid JSON") from err


def _tool_choice(choice: str) -> dict[str, str]:
    if choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    return {"type": "tool", "name": choice}


def _messages(turns: tuple[Turn, ...], *, images: bool) -> list[dict[str, Any]]:
    """``images``: whether the model takes images (the profile's ``images``); without, a turn's are left out."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        blocks: list[dict[str, Any]] = [
            {
                "type": "tool_result",
                "tool_use_id": result.call_id,
                "content": result.content,
                **({"is_error": True} if result.is_error else {}),
            }
            for result in turn.tool_results
        ]
        if images:  # before the text, as Anthropic's vision guide advises
            blocks.extend({"type": "image", "source": _image_source(image)} for image in turn.images)
        if turn.text:
            blocks.append({"type": "text", "text": turn.text})
        blocks.extend(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}
            for call in turn.tool_calls
        )
        # An empty turn would be a 400; it says nothing, so it is left out.
        if not blocks:
            continue
        only_text = len(blocks) == 1 and blocks[0]["type"] == "text"
        messages.append({"role": turn.role, "content": turn.text if only_text else blocks})
    return messages


def _image_source(image: ImageInput) -> dict[str, str]:
    """By address, which the API fetches; or inline (``base64``, with its media type) when the runtime holds its
    bytes (Anthropic's vision guide: the two source kinds)."""
    if image.data is None:
        return {"type": "url", "url": image.url}
    return {"type": "base64", "media_type": image.media_type, "data": base64.b64encode(image.data).decode("ascii")}


def _completion(message: object) -> Completion:
    reported = getattr(message, "usage", None)
    usage = _usage(reported)
    content = getattr(message, "content", None)
    if not isinstance(content, list):
        raise LLMBadOutput(
            f"the API answered with something that is not a message: {type(message).__name__}",
            usage=usage if reported is not None else None,
        )
    texts: list[str] = []
    calls: list[ToolCall] = []
    # Blocks are read by type, not position: a response may open with thinking blocks.
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(str(getattr(block, "text", "")))
        elif kind == "tool_use":
            arguments = getattr(block, "input", None)
            if not isinstance(arguments, dict):
                raise LLMBadOutput(f"tool {getattr(block, 'name', '?')!r} was called with a non-object", usage=usage)
            calls.append(ToolCall(id=str(block.id), name=str(block.name), arguments=arguments))
    stop = _STOP_REASONS.get(str(getattr(message, "stop_reason", "")), "other")
    return Completion(text="".join(texts).strip(), tool_calls=tuple(calls), usage=usage, stop_reason=stop)


def _usage(usage: object) -> Usage:
    if usage is None:
        return Usage()
    # input_tokens counts only what came after the last cache breakpoint: the cache's reads and writes are input too,
    # each at its own price.
    read = int(getattr(usage, "cache_read_input_tokens", None) or 0)
    written = int(getattr(usage, "cache_creation_input_tokens", None) or 0)
    return Usage(
        prompt_tokens=int(getattr(usage, "input_tokens", None) or 0) + read + written,
        completion_tokens=int(getattr(usage, "output_tokens", None) or 0),
        cache_read_tokens=read,
        cache_write_tokens=written,
    )


def _translate(err: anthropic.AnthropicError) -> LLMError:
    # Order matters: the timeout error is a connection error, and a 429 is a status error.
    if isinstance(err, anthropic.APITimeoutError):
        return LLMTimeout("the Anthropic API did not answer in time")
    if isinstance(err, anthropic.APIConnectionError):
        return LLMUnavailable(f"could not reach the Anthropic API: {err.message}")
    if isinstance(err, anthropic.APIStatusError):
        return _translate_status(err)
    if isinstance(err, anthropic.APIResponseValidationError):
        return LLMBadOutput(f"the Anthropic API answered with an unexpected body: {err.message}")
    if isinstance(err, anthropic.CredentialsError):
        return LLMAuthError(f"Anthropic credentials: {err}")
    return LLMError(f"Anthropic SDK error: {type(err).__name__}: {err}")


def _translate_status(err: anthropic.APIStatusError) -> LLMError:
    status = err.status_code
    detail = f"Anthropic API {status}: {err.api_message or err.message}"
    return error_for_status(status, detail, err.response.headers)
