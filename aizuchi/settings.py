"""Settings of the composition root itself: which Discord the fleet talks to, and how long a bot keeps trying to
get a working session from it."""

from __future__ import annotations

import logging

import yarl
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ("DiscordEndpoints", "DiscordReconnects")

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


class DiscordReconnects(BaseSettings):
    """How long a bot keeps trying when every new gateway session fails before it is ready (an event discord.py
    cannot read in each READY, a close code discord.py retries forever, an IDENTIFY refused every time): then it
    gives up, and ``aizuchi`` ends with the reason rather than run deaf. A session lost after it was ready (a
    network drop, one unreadable event) does not count: it just reconnects, and being ready again starts over.

    Each try costs discord.py's own 5 s wait between IDENTIFYs plus the back-off, and spends one of the 1,000
    session starts Discord allows a bot a day. With the defaults a bot gives up after about 35 s."""

    model_config = SettingsConfigDict(
        env_prefix="AIZUCHI_DISCORD_RECONNECT_", env_file=".env", env_ignore_empty=True, extra="ignore", frozen=True
    )

    tries: int = Field(5, ge=1, le=100, description="failed sessions in a row after which a bot gives up")
    within_s: float = Field(
        120.0,
        gt=0,
        le=86_400,
        description="seconds after which a bot gives up at its next failed session, however few tries that was",
    )
    backoff_s: float = Field(
        1.0,
        ge=0,
        le=60,
        description="the wait before the second try (on top of discord.py's 5 s), doubled for each further try "
        "up to 60 s",
    )
