"""Arbiter settings from ARBITER_* environment variables and .env (pydantic-settings)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

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


def _plain_tokens(
    tokens: Mapping[str, SecretStr], kind: Literal["persona", "agent"], admin: SecretStr | None
) -> dict[str, str]:
    """The members' tokens in plain text, after the checks every member's token gets: a valid id, a long enough
    token, one token per member, not the admin's. Each message names the member, never its token (see persona_named
    for an id that may be one)."""
    label = "" if kind == "persona" else "agent "
    for member_id, token in tokens.items():
        if not re.match(ID_PATTERN, member_id):
            raise ValueError(
                f"{persona_named(member_id)} is not a valid {kind} id: use 1-64 letters, digits, '_', '.' or '-'"
            )
        if len(token.get_secret_value()) < MIN_TOKEN_LENGTH:
            raise ValueError(
                f"the token of {label}{persona_named(member_id)} must be at least {MIN_TOKEN_LENGTH} characters"
            )
    plain = {member_id: secret.get_secret_value() for member_id, secret in tokens.items()}
    shared = sharing_a_token(plain)
    if shared:
        # One token for two members would let either act as the other.
        names = " and ".join(persona_named(member_id) for member_id in shared)
        raise ValueError(f"{kind}s {names} have the same token; give each {kind} its own")
    for member_id, value in plain.items():
        if admin is not None and value == admin.get_secret_value():
            raise ValueError(
                f"the token of {label}{persona_named(member_id)} is the admin token (ARBITER_ADMIN_TOKEN); "
                "give each its own"
            )
    return plain


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
    mcp_sessions_per_token: int = Field(
        16,
        ge=1,
        le=1000,
        description="MCP sessions one token keeps (with subscriptions), and notification streams and wake-up sockets "
        "it holds open; past it, its own least recently used session gives way, never another token's",
    )
    mcp_session_idle_s: float = Field(
        300, ge=10, le=86_400, description="seconds an MCP session's subscriptions outlive its last sign of use"
    )
    images_per_message: int = Field(
        4, ge=0, le=10, description="images of one message the history keeps (attachments, then embeds); 0 = none"
    )
    image_max_bytes: int = Field(
        5 * 1024 * 1024,
        ge=1,
        le=20 * 1024 * 1024,
        description="the largest image the history keeps, in bytes (Anthropic's API takes up to 5 MB an image)",
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
        _plain_tokens(tokens, "persona", info.data.get("admin_token"))
        return tokens

    @field_validator("agent_tokens")
    @classmethod
    def _check_agents(cls, tokens: dict[str, SecretStr], info: ValidationInfo) -> dict[str, SecretStr]:
        # An agent is a member like a persona, so neither its id nor its token may be a persona's either, or one could
        # act as the other.
        plain = _plain_tokens(tokens, "agent", info.data.get("admin_token"))
        personas = {pid: secret.get_secret_value() for pid, secret in info.data.get("persona_tokens", {}).items()}
        persona_of_token = {token: pid for pid, token in personas.items()}
        for agent_id, value in plain.items():
            if agent_id in personas:
                raise ValueError(f"agent {persona_named(agent_id)} has the id of a persona (ARBITER_PERSONA_TOKENS)")
            if value in persona_of_token:
                raise ValueError(
                    f"the token of agent {persona_named(agent_id)} is the token of persona "
                    f"{persona_named(persona_of_token[value])}; give each its own"
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
