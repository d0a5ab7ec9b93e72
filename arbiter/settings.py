"""Arbiter settings from ARBITER_* environment variables and .env (pydantic-settings)."""

from __future__ import annotations

import re

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from arbiter.core.limits import ID_PATTERN

__all__ = ("ArbiterSettings",)

MIN_TOKEN_LENGTH = 16


class ArbiterSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ARBITER_", env_file=".env", env_ignore_empty=True, extra="ignore", frozen=True
    )

    database_url: str = Field(
        "sqlite:///aizuchi.db",
        description="sqlite:///path.db (the default, one process) or postgresql://user@host/db (several)",
    )
    host: str = Field("127.0.0.1", description="address the API listens on; keep it local unless you need more")
    port: int = Field(8340, ge=0, le=65535)
    room: bool = Field(True, description="serve the local room (a web page) at /room/; only on a loopback host")
    admin_token: SecretStr | None = Field(None, description="bearer token for the admin endpoints; unset = off")
    persona_tokens: dict[str, SecretStr] = Field(
        default_factory=dict, description='JSON object persona id -> bearer token, e.g. {"hana": "..."}'
    )
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")
    discord_token: SecretStr | None = Field(None, description="the arbiter bot's Discord token; unset = no Discord")
    moderator_role: str | None = Field(
        None, description="a role name that may use the moderators' commands, beside Manage Channels"
    )
    discord_guilds: list[int] = Field(
        default_factory=list, description="guild ids to register the slash commands in at once (JSON list)"
    )

    @field_validator("persona_tokens")
    @classmethod
    def _check_tokens(cls, tokens: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for persona_id, token in tokens.items():
            if not re.match(ID_PATTERN, persona_id):
                raise ValueError(f"persona id {persona_id!r} must be 1-64 letters, digits, '_', '.' or '-'")
            if len(token.get_secret_value()) < MIN_TOKEN_LENGTH:
                raise ValueError(f"the token of {persona_id} must be at least {MIN_TOKEN_LENGTH} characters")
        return tokens

    @field_validator("discord_token")
    @classmethod
    def _empty_is_unset(cls, token: SecretStr | None) -> SecretStr | None:
        return None if token is not None and not token.get_secret_value().strip() else token

    @field_validator("admin_token")
    @classmethod
    def _check_admin(cls, token: SecretStr | None) -> SecretStr | None:
        if token is not None and not token.get_secret_value():
            return None
        if token is not None and len(token.get_secret_value()) < MIN_TOKEN_LENGTH:
            raise ValueError(f"the admin token must be at least {MIN_TOKEN_LENGTH} characters")
        return token

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, level: str) -> str:
        level = level.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("log_level must be DEBUG, INFO, WARNING or ERROR")
        return level
