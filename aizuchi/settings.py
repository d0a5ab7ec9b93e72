"""Settings of the composition root itself: which Discord the fleet talks to."""

from __future__ import annotations

import logging

import yarl
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ("DiscordEndpoints",)

_log = logging.getLogger(__name__)


class DiscordEndpoints(BaseSettings):
    """Where Discord is: the official service, or a Discord-compatible server (Spacebar, a local test server)."""

    model_config = SettingsConfigDict(
        env_prefix="AIZUCHI_DISCORD_", env_file=".env", env_ignore_empty=True, extra="ignore", frozen=True
    )

    api_url: str | None = Field(None, description="REST base with its version, e.g. http://127.0.0.1:3001/api/v10")
    gateway_url: str | None = Field(None, description="the gateway's WebSocket URL, e.g. ws://127.0.0.1:3001/")

    @field_validator("api_url")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        if url is not None and yarl.URL(url).scheme not in ("http", "https"):
            raise ValueError("the Discord API URL must start with http:// or https://")
        return url.rstrip("/") if url is not None else None

    @field_validator("gateway_url")
    @classmethod
    def _ws(cls, url: str | None) -> str | None:
        if url is not None and yarl.URL(url).scheme not in ("ws", "wss"):
            raise ValueError("the Discord gateway URL must start with ws:// or wss://")
        return url

    def apply(self) -> None:
        """Point every discord.py client in this process at these endpoints (unset ones stay Discord's).

        discord.py keeps both addresses as class attributes, so this is done once, before any client starts.
        """
        import discord  # only the Discord modes pay for importing it

        if self.api_url is not None:
            discord.http.Route.BASE = self.api_url
        if self.gateway_url is not None:
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.gateway_url)
        if self.api_url is not None or self.gateway_url is not None:
            _log.info("talking to a Discord-compatible server at %s", self.api_url or self.gateway_url)
