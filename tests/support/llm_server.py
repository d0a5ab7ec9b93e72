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

It refuses what the real APIs refuse, so a test cannot pass on a request production would reject: a 400 in
the API's own error format, with ``x-should-retry: false``, recorded in ``refusals`` (and in ``requests``),
consuming no scripted reply. The rules, and where each comes from:

Images (image blocks and parts: their kinds, sources, roles and counts, and what they are charged) follow the
rules in ``tests.support.llm_images``; the prompt cache (breakpoints, minimums, lifetimes, and the cache's reads and
writes in the usage) those in ``tests.support.llm_cache``, on the server's ``clock``.

Anthropic Messages (every model name; per model where the documentation says so, see ``CLAUDE_MODELS``):

- ``model``, ``max_tokens`` and ``messages`` are required ("max_tokens: Field required"); a top-level field the
  API does not define is refused ("<name>: Extra inputs are not permitted"). The fields are the SDK's own
  ``anthropic.types.MessageCreateParams`` (the SDK is generated from the API's specification).
- ``temperature``, ``top_p`` and ``top_k`` are refused on current models ("`temperature` is deprecated for this
  model."): platform.claude.com/docs/en/models/haiku-5-5/migration-guide ("Remove temperature, top_p, and
  top_k"), github.com/Comfy-Org/ComfyUI/issues/13923 for the message. The SDK has dropped them altogether.
- An assistant prefill (the last message from the assistant) is refused on current models: the SDK's
  ``messages`` docstring ("On models that don't support prefill ... returns a 400 error"), the Haiku 5.5
  migration guide, and github.com/jobrunr/JavaClaw/issues/36 for the message.
- A forced tool (``tool_choice`` ``any`` or ``tool``) while thinking is on is refused ("Thinking may not be
  enabled when tool_choice forces tool use.": platform.claude.com/docs/en/build-with-claude/extended-thinking
  #feature-compatibility, github.com/mastra-ai/mastra/issues/7507). Thinking is on when ``thinking`` is
  ``enabled``/``adaptive``, or left out on a model that thinks by default (Haiku 5.5 and later:
  platform.claude.com/docs/en/models/haiku-5-5/whats-new-haiku-5-5). Opus 5.5, Fable 5.1 and Sonnet 5.5
  refuse forced tool use outright (platform.claude.com/docs/en/models/opus-5-5/whats-new-opus-5-5,
  .../sonnet-5-5/whats-new-sonnet-5-5).
- ``thinking.type`` values a model does not take are refused (platform.claude.com/docs/en/build-with-claude/
  thinking-troubleshooting; the message from the Opus 5.5 page): ``enabled`` on Claude 4.7 and later,
  ``disabled`` on Opus 5.5, Fable 5.1 and Sonnet 5.5, ``between_tools`` everywhere but Sonnet 5.5, ``adaptive``
  on Haiku 4.5. A ``budget_tokens`` must be at least 1024 and less than ``max_tokens`` (the SDK's docstring).
- A request whose messages hold ``tool_use`` or ``tool_result`` blocks must declare ``tools`` ("Requests which include
  tool_use or tool_result blocks must define tools.": github.com/anthropics/anthropic-sdk-python/issues/494), and
  each ``tool_use`` must be answered by a ``tool_result`` in the next message ("messages.N: `tool_use` ids were found
  without `tool_result` blocks immediately after: ...": github.com/anthropics/claude-code/issues/3512,
  github.com/anthropics/anthropic-sdk-typescript/issues/653).
- A custom tool's ``input_schema`` must be an object schema (``type: "object"``: the SDK's ``InputSchema``).
- Strict mode (a tool's ``strict: true``, which the SDK's ``ToolParam`` takes, and ``output_config.format``)
  wants ``additionalProperties: false`` on every object ("For 'object' type, 'additionalProperties' must be
  explicitly set to false": platform.claude.com/docs/en/build-with-claude/structured-outputs, messages as
  quoted in many public repositories).

OpenAI Chat Completions (any model name: required fields; OpenAI's own models only - ``gpt-*`` but for the
open-weight ``gpt-oss``, and ``o*``, see ``GPT_MODELS`` - the rest, because Ollama, vLLM and LM Studio take
much more than OpenAI does):

- ``model`` and a non-empty ``messages`` are required ("Missing required parameter: 'messages'.").
- A parameter the API does not define is refused ("Unrecognized request argument supplied: <name>"; the
  fields are the SDK's ``openai.types.chat.CompletionCreateParams``; the message as quoted in many public
  repositories).
- An assistant message with ``tool_calls`` must be followed by one ``tool`` message per call ("An assistant message
  with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids
  did not have response messages: ...": github.com/agno-agi/agno/issues/3105, github.com/BerriAI/litellm/issues/10083).
- ``max_tokens`` on reasoning models (GPT-5, o-series) is refused ("Unsupported parameter: 'max_tokens' is not
  supported with this model. Use 'max_completion_tokens' instead.": the SDK's ``max_tokens`` docstring,
  github.com/teilomillet/gollm/issues/33).
- Function tools with a ``reasoning_effort`` other than ``none`` are refused on GPT-5.4 and later; GPT-5.6
  reasons at ``medium`` when none is sent, so there leaving it out is refused too ("Function tools with
  reasoning_effort are not supported for gpt-5.6-luna in /v1/chat/completions. ...":
  github.com/langflow-ai/langflow/issues/14361, github.com/danny-avila/LibreChat/issues/14355,
  github.com/UKGovernmentBEIS/inspect_ai/issues/5162 for the default, docs.apiyi.com on GPT-5.4). GPT-5.6
  does not take ``minimal`` (github.com/livekit/agents/pull/7169).
- A strict function (``strict: true``) or strict ``response_format`` schema must be strict-compatible: every
  object with ``additionalProperties: false`` and all its properties in ``required`` ("Invalid schema for
  function '...': In context=(), 'required' is required to be supplied and to be an array including every key
  in properties. Missing '...'.": github.com/kevinwatt/mysql-mcp/issues/5; the SDK's ``strict`` docstrings).

``FakeLLMServer(lenient=True)`` models a lenient OpenAI-compatible server whatever the model name.

``FakeLLMServer(ollama=["gemma4:latest", ...])`` answers on the OpenAI endpoints as Ollama does, with those models
pulled. What its OpenAI compatibility reads, refuses and answers, from its documentation
(docs.ollama.com/api/openai-compatibility) and its source (github.com/ollama/ollama: openai/openai.go for the
request it reads and the shapes it answers, middleware/openai.go and server/routes.go for the refusals):

- ``GET /v1/models``: ``{"object": "list", "data": [...]}``, one ``{"id", "object": "model", "created",
  "owned_by"}`` per pulled model, ``owned_by`` the name's namespace ("library" for the official ones); ``data`` is
  ``null`` when no model is pulled (a Go nil slice). ``GET /v1/models/{model}``: that model, or a 404.
- ``POST /v1/chat/completions`` reads only ``OLLAMA_FIELDS``; any other field is dropped without a word (Go's JSON
  decoding), so the server lists them in ``ignored`` instead of refusing them: ``tool_choice`` (a forced tool call
  is only a suggestion to Ollama) and ``max_completion_tokens`` (no cap at all) among them.
- Refused, in Ollama's error shape (``{"error": {"message", "type", "param": null, "code": null}}``): no messages
  ("[] is too short - 'messages'"), a message without content that makes no tool calls ("invalid message content
  type: <nil>"), a ``reasoning_effort`` (or ``reasoning.effort``) other than high, medium, low or none ("invalid
  reasoning value: ..."), no model ("model is required"), and a model not pulled (404, "model 'x' not found"; a
  name without a tag means ``:latest``).
- ``response_format`` ``json_schema`` is Ollama's ``format``: the answer follows the schema (the test scripts it).
  The key is ignored (the SDK's placeholder is fine); the answer carries ``"system_fingerprint": "fp_ollama"``.

Keys and model lists (``FakeLLMServer(keys=[...])``: only those keys are good; without, any key is):

- A request with another key (or none) is refused with a 401 on every endpoint, in the API's shape. Anthropic
  reads ``x-api-key`` (or a bearer token) and answers ``{"type": "error", "error": {"type":
  "authentication_error", "message": "invalid x-api-key"}, "request_id": ...}`` (as quoted in many public issues,
  e.g. github.com/anthropics/claude-quickstarts/issues/193). OpenAI reads the bearer token and answers
  ``{"error": {"message": "Incorrect API key provided: sk-pr****...SJh4. You can find your API key at
  https://platform.openai.com/account/api-keys.", "type": "invalid_request_error", "param": null, "code":
  "invalid_api_key"}}``, quoting the key masked (as quoted in public issues, e.g.
  github.com/chatanywhere/GPT_API_free/issues/62).
- ``GET /v1/models`` (both APIs share the path; Anthropic's SDK sends ``anthropic-version``) lists the models in
  the API's shape: Anthropic's ``{"data": [{"type": "model", "id", "display_name", "created_at", ...}],
  "has_more", "first_id", "last_id"}`` (platform.claude.com/docs/en/api/models-list), OpenAI's ``{"object":
  "list", "data": [{"id", "object": "model", "created", "owned_by"}]}``. These requests are kept apart, in
  ``key_checks``, so that ``requests`` holds the model calls alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from aiohttp import web
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

from bots.llm.profiles import BUILTIN_PROFILES, ProviderProfile
from tests.support.llm_cache import Cached, CacheRefused, PromptCache, claude_prefixes, gpt_prefixes
from tests.support.llm_images import ImageRefused, claude_images, fetch_images, gpt_images, image_charge

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping
    from types import TracebackType

__all__ = (
    "CLAUDE_MODELS",
    "FAKE_KEY",
    "FAKE_KEY_ENV",
    "GPT_MODELS",
    "OLLAMA_FIELDS",
    "ClaudeModel",
    "FakeLLMServer",
    "GPTModel",
    "RecordedRequest",
    "Refusal",
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
    """An HTTP error in the API's own error format. Add ``retry-after-ms`` to keep retries fast."""
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


@dataclass(frozen=True)
class Refusal:
    """A request the server refused as the real API would: what it said, and about which parameter."""

    api: Api
    message: str
    param: str | None = None


# --- the models' rules ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaudeModel:
    """What a Claude model takes. ``current``: it refuses sampling parameters and an assistant prefill.
    ``min_cacheable``: the shortest prefix it caches (its overview page's "minimum cacheable prompt length")."""

    thinks_by_default: bool
    refused_thinking: frozenset[str]
    forced_tools: bool
    current: bool = True
    min_cacheable: int = 512


_CURRENT = ClaudeModel(thinks_by_default=True, refused_thinking=frozenset({"between_tools"}), forced_tools=True)
_ALWAYS_THINKS = ClaudeModel(
    thinks_by_default=True, refused_thinking=frozenset({"enabled", "disabled", "between_tools"}), forced_tools=False
)
# By the longest prefix of the model name (dated snapshots match their family); any other name: _CURRENT.
CLAUDE_MODELS: dict[str, ClaudeModel] = {
    "claude-haiku-5-5": replace(_CURRENT, refused_thinking=frozenset({"enabled", "between_tools"})),
    "claude-sonnet-5-5": replace(_ALWAYS_THINKS, refused_thinking=frozenset({"enabled", "disabled"})),
    "claude-opus-5-5": _ALWAYS_THINKS,
    "claude-fable-5-1": _ALWAYS_THINKS,
    "claude-haiku-4-5": ClaudeModel(
        thinks_by_default=False,
        refused_thinking=frozenset({"adaptive", "between_tools"}),
        forced_tools=True,
        current=False,
        min_cacheable=4096,
    ),
}


@dataclass(frozen=True)
class GPTModel:
    """What an official OpenAI model takes on Chat Completions.

    ``reasoning``: it wants ``max_completion_tokens``. ``efforts``: the ``reasoning_effort`` values it takes (None:
    any the SDK knows). ``effort_with_tools``: the effort it assumes when none is sent, for the rule that function
    tools need ``none`` (None: no such rule). ``cache_writes``: GPT-5.6 and later, which bill and report cache writes
    and take explicit cache breakpoints (see ``tests.support.llm_cache``).
    """

    reasoning: bool
    efforts: frozenset[str] | None = None
    effort_with_tools: str | None = None
    cache_writes: bool = False


# By the longest prefix of the model name. A name matching none (or None) is a compatible server's: lenient.
GPT_MODELS: dict[str, GPTModel | None] = {
    "gpt-5.6": GPTModel(
        reasoning=True,
        efforts=frozenset({"none", "low", "medium", "high", "xhigh", "max"}),
        effort_with_tools="medium",
        cache_writes=True,
    ),
    "gpt-5.5": GPTModel(reasoning=True, effort_with_tools="none"),
    "gpt-5.4": GPTModel(reasoning=True, effort_with_tools="none"),
    "gpt-5": GPTModel(reasoning=True),
    "gpt-": GPTModel(reasoning=False),
    "gpt-oss": None,  # open weights, served by Ollama, vLLM and the like
    "o1": GPTModel(reasoning=True),
    "o3": GPTModel(reasoning=True),
    "o4": GPTModel(reasoning=True),
}

# "Caching is enabled automatically for prompts that are 1024 tokens or longer" (the prompt caching guide).
GPT_MIN_CACHEABLE = 1024
_SAMPLING = ("temperature", "top_p", "top_k")
_ANTHROPIC_FIELDS = (
    MessageCreateParamsNonStreaming.__optional_keys__ | MessageCreateParamsNonStreaming.__required_keys__
)
_OPENAI_FIELDS = (
    CompletionCreateParamsNonStreaming.__optional_keys__ | CompletionCreateParamsNonStreaming.__required_keys__
)


class _Refused(Exception):
    def __init__(self, message: str, *, param: str | None = None, code: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status


M = TypeVar("M")


def _by_prefix(table: Mapping[str, M], model: str) -> M | None:
    matches = [prefix for prefix in table if model.startswith(prefix)]
    return table[max(matches, key=len)] if matches else None


def _check_anthropic(body: Any) -> None:
    """Raise _Refused for what the Messages API refuses (the module docstring says why each)."""
    if not isinstance(body, dict):
        raise _Refused("The request body is not valid JSON")
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            raise _Refused(f"{name}: Field required")
    model = _by_prefix(CLAUDE_MODELS, str(body["model"])) or _CURRENT
    for name in _SAMPLING:
        if name in body and model.current:
            raise _Refused(f"`{name}` is deprecated for this model.")
    known = _ANTHROPIC_FIELDS | (frozenset() if model.current else frozenset(_SAMPLING))
    for name in body:
        if name not in known:
            raise _Refused(f"{name}: Extra inputs are not permitted")
    _check_claude_messages(body["messages"], model)
    _check_claude_tool_turns(body)
    _check_claude_tools(body.get("tools", []))
    _check_claude_output(body.get("output_config"))
    thinking = _claude_thinking(body, model)
    forced = isinstance(body.get("tool_choice"), dict) and body["tool_choice"].get("type") in ("any", "tool")
    if forced and not model.forced_tools:
        raise _Refused("tool_choice: forcing tool use (type 'any' or 'tool') is not supported for this model.")
    if forced and thinking:
        raise _Refused("Thinking may not be enabled when tool_choice forces tool use.")


def _check_claude_messages(messages: Any, model: ClaudeModel) -> None:
    if not isinstance(messages, list) or not messages:
        raise _Refused("messages: at least one message is required")
    last = messages[-1]
    if model.current and isinstance(last, dict) and last.get("role") == "assistant":
        raise _Refused(
            "This model does not support assistant message prefill. The conversation must end with a user message."
        )


def _check_claude_tool_turns(body: dict[str, Any]) -> None:
    messages = body["messages"]
    blocks = [
        [block for block in message.get("content") if isinstance(block, dict)]
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        else []
        for message in messages
    ]
    if not body.get("tools") and any(block.get("type") in ("tool_use", "tool_result") for b in blocks for block in b):
        raise _Refused("Requests which include tool_use or tool_result blocks must define tools.")
    for index, content in enumerate(blocks):
        used = [block.get("id") for block in content if block.get("type") == "tool_use"]
        if not used:
            continue
        answered = {block.get("tool_use_id") for block in blocks[index + 1]} if index + 1 < len(blocks) else set()
        missing = [call for call in used if call not in answered]
        if missing:
            raise _Refused(
                f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{', '.join(map(str, missing))}. Each `tool_use` block must have a corresponding `tool_result` block "
                "in the next message."
            )


def _check_gpt_tool_turns(messages: list[Any]) -> None:
    for index, message in enumerate(messages):
        calls = message.get("tool_calls") if isinstance(message, dict) and message.get("role") == "assistant" else None
        if not calls:
            continue
        answered: set[Any] = set()
        for after in messages[index + 1 :]:
            if not isinstance(after, dict) or after.get("role") != "tool":
                break
            answered.add(after.get("tool_call_id"))
        missing = [call.get("id") for call in calls if isinstance(call, dict) and call.get("id") not in answered]
        if missing:
            raise _Refused(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(missing)}",
                param=f"messages.[{index}].role",
            )


def _check_claude_tools(tools: Any) -> None:
    for index, tool in enumerate(tools if isinstance(tools, list) else []):
        if not isinstance(tool, dict) or tool.get("type", "custom") not in ("custom", None):
            continue  # server tools have their own shapes
        where = f"tools.{index}.custom"
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise _Refused(f"{where}.input_schema.type: Input should be 'object'")
        if "strict" in tool and not isinstance(tool["strict"], bool):
            raise _Refused(f"{where}.strict: Input should be a valid boolean")
        if tool.get("strict") is True and _open_objects(schema):
            raise _Refused(f"{where}: For 'object' type, 'additionalProperties' must be explicitly set to false")


def _check_claude_output(output_config: Any) -> None:
    form = output_config.get("format") if isinstance(output_config, dict) else None
    if isinstance(form, dict) and form.get("type") == "json_schema" and _open_objects(form.get("schema")):
        raise _Refused(
            "output_config.format.schema: For 'object' type, 'additionalProperties' must be explicitly set to false"
        )


def _claude_thinking(body: dict[str, Any], model: ClaudeModel) -> bool:
    """Check ``thinking`` against the model; whether the model will think on this request."""
    thinking = body.get("thinking")
    if thinking is None:
        return model.thinks_by_default
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind not in ("enabled", "adaptive", "disabled", "between_tools"):
        raise _Refused(f"thinking: unknown thinking type {kind!r}")
    if kind in model.refused_thinking:
        raise _Refused(
            f'"thinking.type.{kind}" is not supported for this model. Use "thinking.type.adaptive" and '
            '"output_config.effort" to control thinking behavior.'
        )
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            raise _Refused("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
        if budget >= body["max_tokens"]:
            raise _Refused("`max_tokens` must be greater than `thinking.budget_tokens`.")
    return bool(kind != "disabled")


def _check_openai(body: Any, *, lenient: bool) -> None:
    """Raise _Refused for what Chat Completions refuses (the module docstring says why each). ``lenient``: a
    compatible server, which checks only the required fields (as do servers for model names not OpenAI's)."""
    if not isinstance(body, dict):
        raise _Refused("We could not parse the JSON body of your request.")
    if not body.get("model"):
        raise _Refused("you must provide a model parameter", param="model")
    if "messages" not in body:
        raise _Refused("Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter")
    if not isinstance(body["messages"], list) or not body["messages"]:
        raise _Refused(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            param="messages",
            code="empty_array",
        )
    model = None if lenient else _by_prefix(GPT_MODELS, str(body["model"]))
    if model is None:
        return
    for name in body:
        if name not in _OPENAI_FIELDS:
            raise _Refused(f"Unrecognized request argument supplied: {name}")
    if model.reasoning and "max_tokens" in body:
        raise _Refused(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' "
            "instead.",
            param="max_tokens",
            code="unsupported_parameter",
        )
    _check_gpt_effort(body, model)
    _check_gpt_tool_turns(body["messages"])
    for index, tool in enumerate(body.get("tools") or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("strict") is True:
            _check_strict_schema(
                function.get("parameters", {}), f"function '{function.get('name')}'", f"tools[{index}].function"
            )
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        if spec.get("strict") is True:
            _check_strict_schema(spec.get("schema", {}), f"response_format '{spec.get('name')}'", "response_format")


def _check_gpt_effort(body: dict[str, Any], model: GPTModel) -> None:
    effort = body.get("reasoning_effort")
    if effort is not None and model.efforts is not None and effort not in model.efforts:
        supported = ", ".join(f"'{value}'" for value in sorted(model.efforts))
        raise _Refused(
            f"Unsupported value: 'reasoning_effort' does not support '{effort}' with this model. "
            f"Supported values are: {supported}.",
            param="reasoning_effort",
            code="unsupported_value",
        )
    has_functions = any(isinstance(tool, dict) and tool.get("type") == "function" for tool in body.get("tools") or [])
    if has_functions and model.effort_with_tools is not None and (effort or model.effort_with_tools) != "none":
        raise _Refused(
            f"Function tools with reasoning_effort are not supported for {body['model']} in /v1/chat/completions. "
            "To use function tools, use /v1/responses or set reasoning_effort to 'none'.",
            param="reasoning_effort",
        )


def _check_strict_schema(schema: Any, what: str, param: str) -> None:
    for path, node in _objects(schema):
        context = f"In context={tuple(path)!r}"
        if node.get("additionalProperties") is not False:
            raise _Refused(
                f"Invalid schema for {what}: {context}, 'additionalProperties' is required to be supplied and to be "
                "false.",
                param=param,
                code="invalid_function_parameters",
            )
        required: list[Any] = node["required"] if isinstance(node.get("required"), list) else []
        missing = [key for key in node.get("properties", {}) if key not in required]
        if missing:
            raise _Refused(
                f"Invalid schema for {what}: {context}, 'required' is required to be supplied and to be an array "
                f"including every key in properties. Missing '{missing[0]}'.",
                param=param,
                code="invalid_function_parameters",
            )


def _open_objects(schema: Any) -> bool:
    """Whether any object in ``schema`` allows properties beyond its own (strict modes refuse that)."""
    return any(node.get("additionalProperties") is not False for _, node in _objects(schema))


def _objects(schema: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every object schema in ``schema`` (through properties, items, anyOf/allOf and definitions), with its path."""
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "object" or "properties" in schema:
        yield path, schema
    for key in ("properties", "$defs", "definitions"):
        children = schema.get(key)
        if isinstance(children, dict):
            for name, child in children.items():
                yield from _objects(child, (*path, key, name))
    if isinstance(schema.get("items"), dict):
        yield from _objects(schema["items"], (*path, "items"))
    for key in ("anyOf", "allOf"):
        for index, child in enumerate(schema.get(key) or []):
            yield from _objects(child, (*path, key, str(index)))


# --- Ollama ---------------------------------------------------------------------------------------------

# The fields Ollama's OpenAI compatibility reads from a chat request (openai.ChatCompletionRequest in
# github.com/ollama/ollama, openai/openai.go); it drops every other one without a word.
OLLAMA_FIELDS = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "seed",
        "stop",
        "temperature",
        "frequency_penalty",
        "presence_penalty",
        "top_p",
        "response_format",
        "tools",
        "reasoning",
        "reasoning_effort",
        "_debug_render_only",
    }
)
_OLLAMA_EFFORTS = ("high", "medium", "low", "none")


def _ollama_name(model: str) -> str:
    """A model name as ``ollama list`` shows it: ``library/`` left out, ``:latest`` when no tag is given."""
    name = model.removeprefix("registry.ollama.ai/").removeprefix("library/")
    return name if ":" in name.rpartition("/")[2] else f"{name}:latest"


def _check_ollama(body: Any, pulled: frozenset[str]) -> list[str]:
    """Raise _Refused for what Ollama refuses (the module docstring says where each comes from); return the fields
    it would drop without a word."""
    if not isinstance(body, dict):
        raise _Refused("invalid character looking for beginning of value")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _Refused("[] is too short - 'messages'")
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(message, dict) or (content is None and not message.get("tool_calls")):
            raise _Refused("invalid message content type: <nil>")
        if isinstance(content, list) and not all(
            isinstance(part, dict) and part.get("type") in ("text", "image_url") for part in content
        ):
            raise _Refused("invalid message format")
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else body.get("reasoning_effort")
    if effort and effort not in _OLLAMA_EFFORTS:
        raise _Refused(f'invalid reasoning value: \'{effort}\' (must be "high", "medium", "low", or "none")')
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _Refused("model is required")
    if _ollama_name(model) not in pulled:
        raise _Refused(f"model '{model}' not found", status=404)
    return [name for name in body if name not in OLLAMA_FIELDS]


def _ollama_model(name: str) -> dict[str, Any]:
    """A pulled model as Ollama's ``/v1/models`` lists it."""
    namespace = name.rpartition("/")[0] or "library"
    return {"id": name, "object": "model", "created": 1_785_000_000, "owned_by": namespace}


# --- the server -----------------------------------------------------------------------------------------


class FakeLLMServer:
    """Start with ``async with``; ``requests`` lists what arrived, ``remaining`` how many replies are left,
    ``refusals`` what was refused (as the real API would have; see the module docstring).

    ``lenient=True``: the OpenAI endpoint is a lenient compatible server (Ollama, vLLM, LM Studio) whatever the
    model name, checking only the required fields.

    ``ollama=[model, ...]``: the OpenAI endpoints answer as Ollama does with those models pulled (see the module
    docstring); ``ignored`` lists the request fields Ollama would have dropped without a word.

    ``keys=[...]``: the only keys it takes; any other is refused with a 401, as the API refuses it.

    ``clock``: the seconds the prompt cache's entries live by (a test moves a fake one past their lifetime).
    """

    def __init__(
        self,
        *replies: Reply,
        lenient: bool = False,
        ollama: Iterable[str] | None = None,
        keys: Iterable[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._replies: deque[Reply] = deque(replies)
        self.cache = PromptCache(clock)
        self.keys = None if keys is None else frozenset(keys)
        self.key_checks: list[RecordedRequest] = []
        self.lenient = lenient
        self.ollama = None if ollama is None else frozenset(_ollama_name(model) for model in ollama)
        self.requests: list[RecordedRequest] = []
        # What each answer said was spent: (every input token, output tokens, read from the cache, written to it).
        self.usages: list[tuple[int, int, int, int]] = []
        self.refusals: list[Refusal] = []
        self.ignored: list[str] = []
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
        # Bodies as large as the APIs take (Anthropic's Messages API: 32 MB a request), not aiohttp's 1 MB: inline
        # images make large requests.
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/models/{model:.+}", self._model)
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
        body = await self._record(request, "anthropic")
        if (refused := self._refused_key(request, "anthropic")) is not None:
            return refused
        try:
            _check_anthropic(body)
            images = await fetch_images("anthropic", claude_images(body["messages"]))
            breakpoints = claude_prefixes(body)
        except _Refused as refused:
            return self._refuse("anthropic", refused)
        except (ImageRefused, CacheRefused) as refused:
            return self._refuse("anthropic", _Refused(refused.message))
        reply = await self._next()
        if reply is None:
            return _unscripted("anthropic")
        if reply.kind == "raw":
            return web.Response(status=reply.status, text=reply.body, content_type=reply.content_type)
        if reply.kind == "error":
            failure = {"type": "error", "error": {"type": _anthropic_error_type(reply.status), "message": reply.body}}
            return web.json_response(failure, status=reply.status, headers=reply.headers)
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        for name, arguments in reply.calls:
            content.append({"type": "tool_use", "id": self._id("toolu"), "name": name, "input": arguments})
        model = _by_prefix(CLAUDE_MODELS, str(body["model"])) or _CURRENT
        cached = self.cache.use(breakpoints, model.min_cacheable)
        uncached = reply.usage[0] + image_charge("anthropic", images)
        self.usages.append((uncached + cached.read + cached.written, reply.usage[1], cached.read, cached.written))
        message = {
            "id": self._id("msg"),
            "type": "message",
            "role": "assistant",
            "model": _model(body),
            "content": content,
            "stop_reason": reply.stop_reason or ("tool_use" if reply.calls else "end_turn"),
            "stop_sequence": None,
            "usage": {
                "input_tokens": uncached,
                "cache_creation_input_tokens": cached.written,
                "cache_read_input_tokens": cached.read,
                "output_tokens": reply.usage[1],
            },
        }
        return web.json_response(message)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        api: Api = "anthropic" if "anthropic-version" in request.headers else "openai"
        self.key_checks.append(RecordedRequest(api, request.path, dict(request.headers), None))
        if (refused := self._refused_key(request, api)) is not None:
            return refused
        if api == "anthropic":
            made = "2026-10-01T00:00:00Z"
            models = [
                {"type": "model", "id": name, "display_name": name, "created_at": made, "lifecycle": "active"}
                for name in CLAUDE_MODELS
            ]
            return web.json_response(
                {"data": models, "has_more": False, "first_id": models[0]["id"], "last_id": models[-1]["id"]}
            )
        if self.ollama is None:
            listed = [name for name, model in GPT_MODELS.items() if model is not None and name[-1] not in "-."]
            owned = [{"id": name, "object": "model", "created": 1_785_000_000, "owned_by": "openai"} for name in listed]
            return web.json_response({"object": "list", "data": owned})
        # Ollama answers "data": null when nothing is pulled (a nil slice in Go).
        models = [_ollama_model(name) for name in sorted(self.ollama)] or None
        return web.json_response({"object": "list", "data": models})

    async def _model(self, request: web.Request) -> web.StreamResponse:
        model = request.match_info["model"]
        if self.ollama is None or _ollama_name(model) not in self.ollama:
            return self._ollama_error(404, f"model '{model}' not found")
        return web.json_response(_ollama_model(model))

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request, "openai")
        if (refused := self._refused_key(request, "openai")) is not None:
            return refused
        try:
            if self.ollama is not None:
                self.ignored.extend(_check_ollama(body, self.ollama))
            else:
                _check_openai(body, lenient=self.lenient)
            images = await fetch_images("openai", gpt_images(body.get("messages") if isinstance(body, dict) else None))
            # OpenAI's own models cache; what a compatible server does is its own (nothing, here).
            gpt = None if self.lenient or self.ollama is not None else _by_prefix(GPT_MODELS, str(body["model"]))
            breakpoints, writes = gpt_prefixes(body, explicit_breakpoints=gpt.cache_writes) if gpt else ([], 0)
        except _Refused as refused:
            return self._refuse("openai", refused)
        except ImageRefused as refused:
            return self._refuse("openai", _Refused(refused.message, param=refused.param, code=refused.code))
        except CacheRefused as refused:
            return self._refuse("openai", _Refused(refused.message, param=refused.param))
        reply = await self._next()
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
        if self.ollama is not None:
            for index, call in enumerate(message.get("tool_calls", [])):
                call["index"] = index
        prompt, completion = reply.usage
        cached = self.cache.use(breakpoints, GPT_MIN_CACHEABLE, writes=writes) if gpt is not None else Cached()
        prompt += image_charge("openai", images) + cached.read + cached.written
        self.usages.append((prompt, completion, cached.read, cached.written))
        answer: dict[str, Any] = {
            "id": self._id("chatcmpl"),
            "object": "chat.completion",
            "created": 1_785_000_000,
            "model": _model(body),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.stop_reason or ("tool_calls" if reply.calls else "stop"),
                }
            ],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }
        if gpt is not None:
            details: dict[str, int] = {"cached_tokens": cached.read}
            if gpt.cache_writes:
                details["cache_write_tokens"] = cached.written
            answer["usage"]["prompt_tokens_details"] = details
        if self.ollama is not None:
            answer["system_fingerprint"] = "fp_ollama"
        return web.json_response(answer)

    async def _record(self, request: web.Request, api: Api) -> Any:
        try:
            body: Any = await request.json()
        except ValueError:
            body = await request.text()
        self.requests.append(RecordedRequest(api, request.path, dict(request.headers), body))
        return body

    def _refused_key(self, request: web.Request, api: Api) -> web.Response | None:
        """A 401 as the API answers a key it does not take; None when the key is good (or any key is)."""
        if self.keys is None or self.ollama is not None:
            return None
        if api == "anthropic":
            # The SDK sends the key as x-api-key, or (its newer versions) as a bearer token.
            key = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
            if key in self.keys:
                return None
            error = {"type": "authentication_error", "message": "invalid x-api-key"}
            return web.json_response({"type": "error", "error": error, "request_id": self._id("req")}, status=401)
        key = request.headers.get("authorization", "").removeprefix("Bearer ")
        if key in self.keys:
            return None
        masked = f"{key[:6]}{'*' * max(0, len(key) - 10)}{key[-4:]}"
        message = (
            f"Incorrect API key provided: {masked}. You can find your API key at"
            " https://platform.openai.com/account/api-keys."
        )
        error = {"message": message, "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}
        return web.json_response({"error": error}, status=401)

    def _ollama_error(self, status: int, message: str) -> web.Response:
        kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
        error = {"message": message, "type": kind, "param": None, "code": None}
        return web.json_response({"error": error}, status=status)

    def _refuse(self, api: Api, refused: _Refused) -> web.Response:
        self.refusals.append(Refusal(api, refused.message, refused.param))
        if api == "openai" and self.ollama is not None:
            return self._ollama_error(refused.status, refused.message)
        headers = {"x-should-retry": "false"}
        if api == "anthropic":
            request_id = self._id("req")
            headers["request-id"] = request_id
            body: dict[str, Any] = {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": refused.message},
                "request_id": request_id,
            }
        else:
            headers["x-request-id"] = self._id("req")
            body = {
                "error": {
                    "message": refused.message,
                    "type": "invalid_request_error",
                    "param": refused.param,
                    "code": refused.code,
                }
            }
        return web.json_response(body, status=400, headers=headers)

    async def _next(self) -> Reply | None:
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
    # A 400 that tells the client not to retry: the test scripted too few replies.
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
    """The built-in profile of ``provider`` (its model, its extra_body) pointed at ``server``, with few retries
    and a short answer; ``overrides`` change any field. An attempt may take 10 s: on a loaded machine a turn of
    three requests and two tool calls took over 2 s (tests of timeouts set their own)."""
    builtin = BUILTIN_PROFILES[provider].model_dump()
    settings: dict[str, Any] = {
        **builtin,
        "name": f"fake-{provider}",
        "base_url": server.anthropic_url if provider == "anthropic" else server.openai_url,
        "api_key_env": FAKE_KEY_ENV,
        "timeout_s": 10.0,
        "max_retries": 2,
        "max_tokens": 256,
    }
    return ProviderProfile.model_validate({**settings, **overrides})
