"""Persona runtime settings from AIZUCHI_* environment variables and .env (pydantic-settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ("SHIPPED_PERSONAS", "BotsSettings")

# The project's own persona files, found from the code rather than the working directory, so `aizuchi run`
# works wherever it is started.
SHIPPED_PERSONAS = Path(__file__).resolve().parent.parent / "personas"


class BotsSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AIZUCHI_", env_file=".env", env_ignore_empty=True, extra="ignore", frozen=True
    )

    arbiter_url: str = Field("http://127.0.0.1:8340", description="where the arbiter's HTTP API listens")
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
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")

    @field_validator("personas", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            if value.strip() == "*":
                return []  # every persona file
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, level: str) -> str:
        level = level.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("log_level must be DEBUG, INFO, WARNING or ERROR")
        return level
