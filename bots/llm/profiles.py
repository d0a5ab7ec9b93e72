"""Provider profiles: which API, which model, where, with which key variable; and the provider factory.

A persona names a profile. Five are built in: ``scripted`` (offline), ``anthropic``, ``openai``, and two for local
models, ``ollama`` (Ollama on this machine) and ``local`` (any OpenAI-compatible server by URL: llama.cpp's
llama-server, vLLM, LM Studio). One TOML file adds more or changes the built-ins, one ``[profiles.<name>]`` table
each (see profiles.example.toml). A table named like a built-in starts from it, so ``[profiles.openai]`` with only
``model = "..."`` changes just the model (unless the table names another provider: then it starts afresh).

Profiles hold the *name* of the environment variable with the key, never the key: :func:`create_provider`
reads it from the environment it is given, hands it to the SDK client, and keeps it nowhere else. The same goes
for a server's address and model where a profile names variables for them (``base_url_env``, ``model_env``): the
built-in ``ollama`` and ``local`` profiles read theirs from the settings AIZUCHI_OLLAMA_URL / AIZUCHI_OLLAMA_MODEL
and AIZUCHI_LOCAL_URL / AIZUCHI_LOCAL_MODEL (declared in bots.settings), so no file is needed to switch to them.
A variable that is set wins over the profile's own value.
"""

from __future__ import annotations

import tomllib
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bots.llm.base import ChatProvider, LLMAuthError

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from bots.llm.scripted import Speaker

__all__ = (
    "BUILTIN_PROFILES",
    "NO_KEY",
    "ProfileError",
    "ProviderProfile",
    "create_provider",
    "load_profiles",
    "required_key",
    "resolve_profile",
)

# Sent as the key to OpenAI-compatible servers that take none (Ollama, a local vLLM): the SDK wants one.
NO_KEY = "no-key"

# Ollama's OpenAI-compatible API at its default local address (docs.ollama.com/api/openai-compatibility), and a
# current small instruct model from its library (`ollama pull gemma4`, as Google's Gemma guide for Ollama says:
# ai.google.dev/gemma/docs/integrations/ollama). Both are settings: AIZUCHI_OLLAMA_URL, AIZUCHI_OLLAMA_MODEL.
OLLAMA_URL = "http://127.0.0.1:11434/v1"
OLLAMA_MODEL = "gemma4"
# Where each common OpenAI-compatible server listens by default, for the message that asks for AIZUCHI_LOCAL_URL.
LOCAL_SERVERS = (
    "llama.cpp's llama-server: http://127.0.0.1:8080/v1",
    "vLLM: http://127.0.0.1:8000/v1",
    "LM Studio: http://127.0.0.1:1234/v1",
)

# A variable's name, as the settings and the shell write them.
_ENV_NAME = r"^[A-Z_][A-Z0-9_]*$"


class ProfileError(Exception):
    """A profile file or profile is invalid. The message names the file and the field. (Not a provider error: no
    call was made; the command line reports it as it reports the runtime's own.)"""


class ProviderProfile(BaseModel):
    """How to reach one model. Unknown fields are errors, so a typo does not pass silently."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64)
    provider: Literal["anthropic", "openai", "scripted"]
    model: str = Field("", description="the API's model id; unused by scripted")
    base_url: str | None = Field(None, description="None: the provider's official API")
    api_key_env: str | None = Field(
        None,
        description="the environment variable holding the key; for openai, None sends a placeholder key",
    )
    base_url_env: str | None = Field(
        None, pattern=_ENV_NAME, description="a variable that, when set, replaces base_url (for a server's address)"
    )
    model_env: str | None = Field(None, pattern=_ENV_NAME, description="a variable that, when set, replaces model")
    max_tokens: int = Field(1024, ge=1, le=200_000)
    # A turn lasts as long as the persona's claim (about 30 s): an attempt must answer well within it. A thinking
    # model may need more, hence the high ceiling.
    timeout_s: float = Field(8.0, gt=0, le=600, description="seconds one attempt may take")
    # Retries happen in bots.llm.base.call_with_retries, only when their wait fits in the turn's time left.
    max_retries: int = Field(0, ge=0, le=2, description="retries on 429, 5xx and timeouts")
    structured_output: Literal["tools", "json_schema"] = Field(
        "tools", description="how decide() gets a structured answer: a forced tool call, or a JSON schema"
    )
    max_tokens_param: Literal["max_completion_tokens", "max_tokens"] = Field(
        "max_completion_tokens", description="openai: the parameter name the server takes"
    )
    thinking: Literal["off", "model_default"] = Field(
        "off", description="anthropic: 'off' sends thinking disabled; 'model_default' leaves it to the model"
    )
    strict_tools: bool = Field(
        True,
        description="ask for strict schema adherence on the decide tool; off for a server that refuses the field",
    )
    extra_body: dict[str, Any] = Field(default_factory=dict, description="sent as is in every request body")
    latency_s: float = Field(0.0, ge=0, le=60, description="scripted: a pause per call, for demos")
    images: bool = Field(
        False,
        description="whether the model takes images: the conversation's latest images are then sent with the prompt"
        " (on for the built-in anthropic, openai and scripted profiles)",
    )

    @model_validator(mode="after")
    def _provider_needs(self) -> ProviderProfile:
        if self.provider in ("anthropic", "openai") and not self.model and not self.model_env:
            raise ValueError(f"a {self.provider} profile needs a model (or model_env, the variable naming one)")
        if self.provider == "anthropic" and not self.api_key_env:
            raise ValueError("an anthropic profile needs api_key_env (the variable holding the key)")
        return self

    def refused(self, error: LLMAuthError) -> LLMAuthError:
        """``error`` (the API refused a call's credentials) saying which profile and which variable's key it was."""
        what = f"the key in {self.api_key_env}" if self.api_key_env else "a call without a key"
        return LLMAuthError(
            f"the API refused {what} (profile {self.name!r}): {error.message}", usage=error.usage, status=error.status
        )


BUILTIN_PROFILES: dict[str, ProviderProfile] = {
    "scripted": ProviderProfile(name="scripted", provider="scripted", images=True),
    # The cheapest, fastest current model of each family (checked against the providers' model pages).
    "anthropic": ProviderProfile(
        name="anthropic",
        provider="anthropic",
        model="claude-haiku-5-5",
        api_key_env="ANTHROPIC_API_KEY",
        images=True,
    ),
    "openai": ProviderProfile(
        name="openai",
        provider="openai",
        model="gpt-5.6-luna",
        api_key_env="OPENAI_API_KEY",
        # Chat Completions takes function tools on this model only without reasoning; short lines need none.
        extra_body={"reasoning_effort": "none"},
        images=True,
    ),
    # Ollama on this machine: `ollama pull gemma4`, and it is served at once (the app, or `ollama serve`). No key:
    # Ollama ignores the one the SDK insists on (NO_KEY is sent). What its OpenAI compatibility does with each field
    # (docs.ollama.com/api/openai-compatibility; the request it reads is openai.ChatCompletionRequest in
    # github.com/ollama/ollama, openai/openai.go):
    # - tool_choice is not among the fields it reads (its documentation leaves it unticked too), so a "forced" decide
    #   call is only a suggestion the model may answer in prose; response_format json_schema becomes Ollama's
    #   `format`, which constrains the sampling to the schema (its structured outputs, since v0.5): json_schema it is.
    # - max_completion_tokens is not read (an unknown field is dropped without a word), max_tokens is: the cap.
    # - reasoning_effort "none" turns a thinking model's thinking off (think=false), which a one-line answer does
    #   not need; a model that cannot think accepts it too (only think=true is refused there).
    # - no "strict" on tools: they are not used to decide here, and Ollama has no strict mode to ask for.
    # The first call loads the model into memory, which can take many seconds: a longer timeout (the turn's own
    # time bounds each call anyway).
    "ollama": ProviderProfile(
        name="ollama",
        provider="openai",
        model=OLLAMA_MODEL,
        base_url=OLLAMA_URL,
        base_url_env="AIZUCHI_OLLAMA_URL",
        model_env="AIZUCHI_OLLAMA_MODEL",
        structured_output="json_schema",
        strict_tools=False,
        max_tokens_param="max_tokens",
        extra_body={"reasoning_effort": "none"},
        timeout_s=60,
    ),
    # Any other OpenAI-compatible server, by URL and model (AIZUCHI_LOCAL_URL, AIZUCHI_LOCAL_MODEL; no defaults, so
    # a missing one is said at start). What such servers share is schema-constrained output through
    # response_format json_schema: llama.cpp's llama-server ("schema-constrained JSON response format",
    # tools/server/README.md), vLLM (its structured outputs; vllm/entrypoints/openai/protocol.py turns the schema
    # into guided decoding), LM Studio (lmstudio.ai/docs/advanced/structured-output) and Ollama. A forced tool call
    # is not shared: llama.cpp takes tool_choice only as "auto", "none" or "required" (common/chat.cpp) and calls
    # tools only with a tool-aware chat template (--jinja); LM Studio answers a named tool_choice with a 400
    # ("Invalid tool_choice type: 'object'", as its users report); only vLLM forces a named function (its tool
    # calling docs). All of them read max_tokens (vLLM reads max_completion_tokens too). Neither strict nor
    # reasoning_effort is sent: vLLM takes only "low", "medium" or "high" for the latter (protocol.py). A thinking
    # model's thinking is turned off in profiles.toml with the server's own switch, e.g.
    # extra_body = { chat_template_kwargs = { enable_thinking = false } } (llama.cpp and vLLM), and a server
    # started with an API key gets it through api_key_env there too.
    "local": ProviderProfile(
        name="local",
        provider="openai",
        base_url_env="AIZUCHI_LOCAL_URL",
        model_env="AIZUCHI_LOCAL_MODEL",
        structured_output="json_schema",
        strict_tools=False,
        max_tokens_param="max_tokens",
        timeout_s=60,
    ),
}


def load_profiles(path: Path | None) -> dict[str, ProviderProfile]:
    """The built-in profiles, with the file's ``[profiles.<name>]`` tables merged over them."""
    profiles = dict(BUILTIN_PROFILES)
    if path is None:
        return profiles
    try:
        with path.open("rb") as file:
            data = tomllib.load(file)
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such file") from None
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ProfileError(f"{path}: cannot read: {err}") from None
    unknown = sorted(set(data) - {"profiles"})
    if unknown:
        raise ProfileError(f"{path}: unknown top-level key(s) {unknown}; profiles go in [profiles.<name>] tables")
    tables = data.get("profiles", {})
    if not isinstance(tables, dict):
        raise ProfileError(f"{path}: profiles must be a table of [profiles.<name>] tables")
    for name, table in tables.items():
        where = f"{path}: profiles.{name}"
        if not isinstance(table, dict):
            raise ProfileError(f"{where}: must be a table")
        if "name" in table and table["name"] != name:
            raise ProfileError(f"{where}.name: must be {name!r} (the table's own name) or left out")
        builtin = BUILTIN_PROFILES.get(name)
        # Start from the built-in of that name, unless the table makes it another provider altogether.
        same_provider = builtin is not None and table.get("provider", builtin.provider) == builtin.provider
        base = builtin.model_dump() if builtin is not None and same_provider else {}
        try:
            profiles[name] = ProviderProfile.model_validate({**base, **table, "name": name})
        except ValidationError as err:
            raise ProfileError(f"{where}{_describe(err)}") from None
    return profiles


def _describe(err: ValidationError) -> str:
    parts = []
    for error in err.errors():
        field = ".".join(str(part) for part in error["loc"])
        parts.append(f".{field}: {error['msg']}" if field else f": {error['msg']}")
    return "; ".join(parts)


def create_provider(
    profile: ProviderProfile,
    env: Mapping[str, str],
    *,
    persona: Speaker | None = None,
    seed: int = 0,
) -> ChatProvider:
    """Build the profile's provider. The scripted provider speaks ``persona``'s sample lines in its language
    (generic English lines without one), deterministically for ``seed``; the others ignore both.

    Raises LLMAuthError naming the variable when the profile's key variable is unset or empty, and ProfileError
    naming the variables when the profile has no address or no model (see :func:`resolve_profile`).
    """
    # Imported here so that a scripted-only fleet does not pay for importing both SDKs.
    if profile.provider == "scripted":
        from bots.llm.scripted import ScriptedProvider  # noqa: PLC0415

        if persona is None:
            return ScriptedProvider(seed=seed, latency_s=profile.latency_s)
        return ScriptedProvider.for_persona(persona, seed=seed, latency_s=profile.latency_s)
    api_key = required_key(profile, env)
    profile = resolve_profile(profile, env)
    if profile.provider == "anthropic":
        from bots.llm.anthropic_chat import AnthropicChat  # noqa: PLC0415

        return AnthropicChat(profile, api_key)
    from bots.llm.openai_chat import OpenAIChat  # noqa: PLC0415

    return OpenAIChat(profile, api_key)


def resolve_profile(profile: ProviderProfile, env: Mapping[str, str]) -> ProviderProfile:
    """``profile`` with the values of its variables (``base_url_env``, ``model_env``) where they are set.

    Raises ProfileError, one line naming the variables to set, when the profile is left without a model, or names
    an address variable and has no address (a ``base_url`` of None would mean the provider's official API).
    """
    changes: dict[str, str] = {}
    for field, variable in (("base_url", profile.base_url_env), ("model", profile.model_env)):
        value = env.get(variable, "").strip() if variable else ""
        if value:
            changes[field] = value
    resolved = profile.model_copy(update=changes)
    missing = []
    if profile.base_url_env and not resolved.base_url:
        missing.append(profile.base_url_env)
    if profile.provider != "scripted" and not resolved.model:
        missing.append(profile.model_env or "model")
    if missing:
        example = " ".join(f"{name}=..." for name in missing)
        where = f" (where the server listens: {'; '.join(LOCAL_SERVERS)})" if profile.base_url_env in missing else ""
        raise ProfileError(
            f"profile {profile.name!r} needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'}"
            f" not set: put {example} in .env{where}"
        )
    return resolved


def required_key(profile: ProviderProfile, env: Mapping[str, str]) -> str:
    """The key the profile's provider is called with. Raises LLMAuthError naming the variable if it is unset, and
    ProfileError when the profile's address or model is missing (checked here too, so that a setup check that
    asks for the key finds them missing before anything starts)."""
    resolve_profile(profile, env)
    if profile.provider == "scripted" or profile.api_key_env is None:
        return NO_KEY
    key = env.get(profile.api_key_env, "").strip()
    if not key:
        raise LLMAuthError(
            f"profile {profile.name!r} needs an API key in {profile.api_key_env}, which is not set or empty:"
            f" put {profile.api_key_env}=... in .env"
        )
    return key
