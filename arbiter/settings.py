"""Arbiter settings from ARBITER_* environment variables and .env (pydantic-settings)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from arbiter.core.limits import ID_PATTERN

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("ArbiterSettings", "persona_named", "sharing_a_token")

MIN_TOKEN_LENGTH = 16


def persona_named(persona_id: str) -> str:
    """A persona id as an error message may show it. A key of ARBITER_PERSONA_TOKENS as long as a token may be
    one (the mapping written the wrong way round, token -> persona): then only its length is shown."""
    if len(persona_id) < MIN_TOKEN_LENGTH:
        return repr(persona_id)
    return (
        f"the persona id of {len(persona_id)} characters (not shown: it may be a token; the mapping is persona id"
        " -> token)"
    )


def sharing_a_token(tokens: Mapping[str, str]) -> list[str]:
    """The first personas (in order) that share one token, or [] if every persona has its own."""
    by_token: dict[str, list[str]] = {}
    for persona_id, token in tokens.items():
        by_token.setdefault(token, []).append(persona_id)
    return next((personas for personas in by_token.values() if len(personas) > 1), [])


class ArbiterSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ARBITER_",
        env_file=".env",
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
        # A validation error printed whole (a traceback, a tool that reads these settings) must not show the
        # value: it may be a token.
        hide_input_in_errors=True,
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
    agent_tokens: dict[str, SecretStr] = Field(
        default_factory=dict,
        description='JSON object agent id -> bearer token for external agents (MCP clients), e.g. {"aya": "..."}',
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
    def _check_tokens(cls, tokens: dict[str, SecretStr], info: ValidationInfo) -> dict[str, SecretStr]:
        # Each message names the personas, never a token (see persona_named for a key that may be one).
        for persona_id, token in tokens.items():
            if not re.match(ID_PATTERN, persona_id):
                raise ValueError(
                    f"{persona_named(persona_id)} is not a valid persona id: use 1-64 letters, digits, '_', '.' or '-'"
                )
            if len(token.get_secret_value()) < MIN_TOKEN_LENGTH:
                raise ValueError(
                    f"the token of {persona_named(persona_id)} must be at least {MIN_TOKEN_LENGTH} characters"
                )
        plain = {persona_id: secret.get_secret_value() for persona_id, secret in tokens.items()}
        shared = sharing_a_token(plain)
        if shared:
            # One token for two personas would let either act as the other.
            names = " and ".join(persona_named(persona_id) for persona_id in shared)
            raise ValueError(f"personas {names} have the same token; give each persona its own")
        admin = info.data.get("admin_token")
        for persona_id, value in plain.items():
            if admin is not None and value == admin.get_secret_value():
                raise ValueError(
                    f"the token of {persona_named(persona_id)} is the admin token (ARBITER_ADMIN_TOKEN); "
                    "give each its own"
                )
        return tokens

    @field_validator("agent_tokens")
    @classmethod
    def _check_agents(cls, tokens: dict[str, SecretStr], info: ValidationInfo) -> dict[str, SecretStr]:
        # Checked like the personas' tokens, and against them: an agent is a member like a persona, so neither its
        # id nor its token may be a persona's (or the admin's), or one could act as the other.
        for agent_id, token in tokens.items():
            if not re.match(ID_PATTERN, agent_id):
                raise ValueError(
                    f"{persona_named(agent_id)} is not a valid agent id: use 1-64 letters, digits, '_', '.' or '-'"
                )
            if len(token.get_secret_value()) < MIN_TOKEN_LENGTH:
                raise ValueError(
                    f"the token of agent {persona_named(agent_id)} must be at least {MIN_TOKEN_LENGTH} characters"
                )
        plain = {agent_id: secret.get_secret_value() for agent_id, secret in tokens.items()}
        shared = sharing_a_token(plain)
        if shared:
            names = " and ".join(persona_named(agent_id) for agent_id in shared)
            raise ValueError(f"agents {names} have the same token; give each agent its own")
        personas = {pid: secret.get_secret_value() for pid, secret in info.data.get("persona_tokens", {}).items()}
        persona_of_token = {token: pid for pid, token in personas.items()}
        admin = info.data.get("admin_token")
        for agent_id, value in plain.items():
            if agent_id in personas:
                raise ValueError(f"agent {persona_named(agent_id)} has the id of a persona (ARBITER_PERSONA_TOKENS)")
            if value in persona_of_token:
                raise ValueError(
                    f"the token of agent {persona_named(agent_id)} is the token of persona "
                    f"{persona_named(persona_of_token[value])}; give each its own"
                )
            if admin is not None and value == admin.get_secret_value():
                raise ValueError(
                    f"the token of agent {persona_named(agent_id)} is the admin token (ARBITER_ADMIN_TOKEN); "
                    "give each its own"
                )
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
