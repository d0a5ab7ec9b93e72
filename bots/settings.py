"""Persona runtime settings from AIZUCHI_* environment variables and .env (pydantic-settings), and the
variables whose names come from files (:class:`Environment`)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Literal

from dotenv import dotenv_values
from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bots.affinity import parse_arbiter_urls

__all__ = ("ENV_FILE", "SHIPPED_PERSONAS", "BotsSettings", "Environment")

# Where the settings live beside the environment; read from the directory the command runs in.
ENV_FILE = Path(".env")

# The project's own persona files, found from the code rather than the working directory, so `aizuchi run`
# works wherever it is started.
SHIPPED_PERSONAS = Path(__file__).resolve().parent.parent / "personas"


class BotsSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AIZUCHI_",
        env_file=ENV_FILE,
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
        # A validation error printed whole must not show the value: persona_tokens holds tokens.
        hide_input_in_errors=True,
    )

    arbiter_url: str = Field(
        "http://127.0.0.1:8340",
        description="where the arbiter's HTTP API listens; several arbiter processes' URLs, comma-separated, send "
        "each channel's calls to one of them (the next when it is down)",
    )
    personas_dir: Path = Field(SHIPPED_PERSONAS, description="directory of persona files (default: the shipped ones)")
    personas: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["rin", "theo", "juno"],
        description="persona ids to run, comma-separated (the default is the English trio; hana,mio,sora speak "
        "Japanese; * runs every persona file)",
    )
    profiles_file: Path = Field(Path("profiles.toml"), description="provider profiles; built-ins if missing")
    profile: str | None = Field(None, description="run every persona on this profile instead of its own")
    mode: Literal["decide", "tool-loop"] = Field("decide", description="decide (default) or tool-loop")
    persona_tokens: dict[str, SecretStr] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("AIZUCHI_PERSONA_TOKENS", "ARBITER_PERSONA_TOKENS"),
        description="the personas' bearer tokens for the arbiter (the same variable the arbiter reads)",
    )
    webhooks: bool = Field(
        False,
        description="one-application mode: a persona without a Discord token of its own posts through a channel "
        "webhook of the arbiter's bot, under its own name and avatar (the bot needs Manage Webhooks)",
    )
    arbiter_discord_token: SecretStr | None = Field(
        None,
        validation_alias="ARBITER_DISCORD_TOKEN",
        description="the arbiter bot's token, which webhook personas post through (the variable the arbiter reads)",
    )
    image_messages: int = Field(
        3, ge=0, le=24, description="images are shown to a model from this many of the latest messages only; 0 = none"
    )
    images_per_prompt: int = Field(4, ge=0, le=20, description="the most images one prompt shows, the newest")
    image_bytes_per_prompt: int = Field(
        20 * 1024 * 1024, ge=0, le=50 * 1024 * 1024, description="the most bytes of images one prompt shows"
    )
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")
    check_keys: bool = Field(
        True,
        description="at start, check each model key once against its API (listing models: no tokens spent) and stop "
        "with one line if one is refused; false starts without asking (offline)",
    )
    # Local models. The built-in profiles `ollama` and `local` read these four by name (their base_url_env and
    # model_env, as a profile reads its key from api_key_env); they are declared here so that they are documented
    # and checked with the other settings. Unset: the profile's own value (profiles.toml, or the built-in's).
    # (The defaults named here are bots.llm.profiles' OLLAMA_URL and OLLAMA_MODEL; a test holds them equal.)
    ollama_url: str | None = Field(
        None, description="Ollama's OpenAI-compatible API, for the ollama profile (default http://127.0.0.1:11434/v1)"
    )
    ollama_model: str | None = Field(
        None,
        description="the model the ollama profile asks Ollama for: any you have pulled (default gemma4; "
        "`ollama pull gemma4`)",
    )
    local_url: str | None = Field(
        None,
        description="an OpenAI-compatible server's API, for the local profile: llama.cpp's llama-server "
        "(http://127.0.0.1:8080/v1), vLLM (http://127.0.0.1:8000/v1), LM Studio (http://127.0.0.1:1234/v1)",
    )
    local_model: str | None = Field(
        None, description="the model id that server serves, for the local profile (its /v1/models lists them)"
    )

    @field_validator("ollama_url", "local_url")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        if url is not None and not url.strip().lower().startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://, e.g. http://127.0.0.1:8080/v1")
        return url.strip() if url is not None else None

    @field_validator("personas", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            if value.strip() == "*":
                return []  # every persona file
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("arbiter_url")
    @classmethod
    def _check_urls(cls, value: str) -> str:
        # Checked here, so a mistake stops the start-up with the setting's name rather than the first call.
        return ",".join(parse_arbiter_urls(value))

    @field_validator("persona_tokens")
    @classmethod
    def _own_tokens(cls, tokens: dict[str, SecretStr]) -> dict[str, SecretStr]:
        # One token for two personas would make the arbiter take one for the other. The message names the
        # personas, never the token.
        seen: dict[str, str] = {}
        for persona_id, token in tokens.items():
            other = seen.setdefault(token.get_secret_value(), persona_id)
            if other != persona_id:
                raise ValueError(f"personas {other!r} and {persona_id!r} have the same token; give each its own")
        return tokens

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, level: str) -> str:
        level = level.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("log_level must be DEBUG, INFO, WARNING or ERROR")
        return level


class Environment(Mapping[str, str]):
    """Variables by exact name, merged as the typed settings merge them: the process's environment over the
    ``.env`` file, an empty value counting as unset.

    For the variables whose names come from files - a persona's ``discord_token_env``, a profile's
    ``api_key_env`` - which pydantic-settings cannot declare. Read once at start-up and passed in; nothing is
    copied into ``os.environ``, and neither ``repr`` nor ``str`` shows a value.
    """

    def __init__(self, variables: Mapping[str, str]) -> None:
        self._variables = {name: value.strip() for name, value in variables.items() if value and value.strip()}

    @classmethod
    def read(cls, env_file: Path | None = ENV_FILE, environ: Mapping[str, str] | None = None) -> Environment:
        from_file = dotenv_values(env_file) if env_file is not None and env_file.is_file() else {}
        merged = {name: value for name, value in from_file.items() if value is not None}
        for name, value in (os.environ if environ is None else environ).items():
            if value.strip():
                merged[name] = value
        return cls(merged)

    def __getitem__(self, name: str) -> str:
        return self._variables[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._variables)

    def __len__(self) -> int:
        return len(self._variables)

    def __repr__(self) -> str:
        return f"Environment({len(self._variables)} variables)"
