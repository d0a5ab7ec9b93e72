"""Provider profiles: which API, which model, where, with which key variable; and the provider factory.

A persona names a profile. Three are built in (``scripted``, ``anthropic``, ``openai``); one TOML file adds
more or changes the built-ins, one ``[profiles.<name>]`` table each (see profiles.example.toml). A table named
like a built-in starts from it, so ``[profiles.openai]`` with only ``model = "..."`` changes just the model
(unless the table names another provider: then it starts afresh).

Profiles hold the *name* of the environment variable with the key, never the key: :func:`create_provider`
reads it from the environment it is given, hands it to the SDK client, and keeps it nowhere else.
"""

from __future__ import annotations

import tomllib
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bots.errors import BotError
from bots.llm.base import ChatProvider, LLMAuthError

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from bots.persona import Persona

__all__ = (
    "BUILTIN_PROFILES",
    "NO_KEY",
    "ProfileError",
    "ProviderProfile",
    "create_provider",
    "load_profiles",
    "required_key",
)

# Sent as the key to OpenAI-compatible servers that take none (Ollama, a local vLLM): the SDK wants one.
NO_KEY = "no-key"


class ProfileError(BotError):
    """A profile file or profile is invalid. The message names the file and the field."""


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

    @model_validator(mode="after")
    def _provider_needs(self) -> ProviderProfile:
        if self.provider in ("anthropic", "openai") and not self.model:
            raise ValueError(f"a {self.provider} profile needs a model")
        if self.provider == "anthropic" and not self.api_key_env:
            raise ValueError("an anthropic profile needs api_key_env (the variable holding the key)")
        return self


BUILTIN_PROFILES: dict[str, ProviderProfile] = {
    "scripted": ProviderProfile(name="scripted", provider="scripted"),
    # The cheapest, fastest current model of each family (checked against the providers' model pages).
    "anthropic": ProviderProfile(
        name="anthropic",
        provider="anthropic",
        model="claude-haiku-5-5",
        api_key_env="ANTHROPIC_API_KEY",
    ),
    "openai": ProviderProfile(
        name="openai",
        provider="openai",
        model="gpt-5.6-luna",
        api_key_env="OPENAI_API_KEY",
        # Chat Completions takes function tools on this model only without reasoning; short lines need none.
        extra_body={"reasoning_effort": "none"},
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
    persona: Persona | None = None,
    seed: int = 0,
) -> ChatProvider:
    """Build the profile's provider. The scripted provider speaks ``persona``'s sample lines in its language
    (generic English lines without one), deterministically for ``seed``; the others ignore both.

    Raises LLMAuthError naming the variable when the profile's key variable is unset or empty.
    """
    # Imported here so that a scripted-only fleet does not pay for importing both SDKs.
    if profile.provider == "scripted":
        from bots.llm.scripted import ScriptedProvider  # noqa: PLC0415

        if persona is None:
            return ScriptedProvider(seed=seed, latency_s=profile.latency_s)
        return ScriptedProvider.for_persona(persona, seed=seed, latency_s=profile.latency_s)
    api_key = required_key(profile, env)
    if profile.provider == "anthropic":
        from bots.llm.anthropic_chat import AnthropicChat  # noqa: PLC0415

        return AnthropicChat(profile, api_key)
    from bots.llm.openai_chat import OpenAIChat  # noqa: PLC0415

    return OpenAIChat(profile, api_key)


def required_key(profile: ProviderProfile, env: Mapping[str, str]) -> str:
    """The key the profile's provider is called with. Raises LLMAuthError naming the variable if it is unset."""
    if profile.provider == "scripted" or profile.api_key_env is None:
        return NO_KEY
    key = env.get(profile.api_key_env, "").strip()
    if not key:
        raise LLMAuthError(
            f"profile {profile.name!r} needs an API key in {profile.api_key_env}, which is not set or empty:"
            f" put {profile.api_key_env}=... in .env"
        )
    return key
