"""Settings of the composition root itself: which Discord the fleet talks to, and how long a bot keeps trying to
get a working session from it; and the check that every ``AIZUCHI_*`` / ``ARBITER_*`` name given is a setting
(:func:`unknown_settings`), since pydantic-settings ignores a misspelt one without a word."""

from __future__ import annotations

import difflib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import yarl
from dotenv import dotenv_values
from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = (
    "ENV_FILE",
    "READ_DIRECTLY",
    "SETTING_PREFIXES",
    "DiscordEndpoints",
    "DiscordReconnects",
    "closest_setting",
    "known_variables",
    "settings_classes",
    "unknown_settings",
    "variables_by_field",
    "variables_of",
)

# Every setting's name starts with one of these; a name with one that is no setting is a typo.
SETTING_PREFIXES = ("AIZUCHI_", "ARBITER_")
# Where the settings live beside the environment, as every settings class reads it (the working directory's .env).
ENV_FILE = Path(".env")
# Variables of ours read without a settings class (by the test suite, see tests/support and the Makefile): known
# too, so that a developer's exported test switch is not called a typo.
READ_DIRECTLY = {
    "AIZUCHI_REQUIRE_SERVICES": "tests: 1 makes a test fail rather than skip when PostgreSQL or Chromium is missing",
    "AIZUCHI_TEST_POSTGRES": "tests: the PostgreSQL server the tests make scratch databases on",
    "AIZUCHI_README_SCREENSHOT": "tests: where the room's browser test saves the README's picture (make screenshot)",
    "AIZUCHI_SCHEMATHESIS_EXAMPLES": "tests: how many examples the API's property tests try per endpoint",
}

_log = logging.getLogger(__name__)


class DiscordEndpoints(BaseSettings):
    """Where Discord is: the official service, or a Discord-compatible server (Spacebar, a local test server)."""

    model_config = SettingsConfigDict(
        env_prefix="AIZUCHI_DISCORD_", env_file=".env", env_ignore_empty=True, extra="ignore", frozen=True
    )

    api_url: str | None = Field(None, description="REST base with its version, e.g. http://127.0.0.1:3001/api/v10")
    gateway_url: str | None = Field(None, description="the gateway's WebSocket URL, e.g. ws://127.0.0.1:3001/")
    # discord.py counts a bot ready only once this long has passed without another server arriving after its READY,
    # and cannot end that wait early: each bot's start waits it out. A server that sends its few servers with the
    # READY (a local one) can do with a fraction of a second; one that comes later is joined at the next refresh.
    ready_s: float = Field(
        2.0, gt=0, le=60, description="seconds a bot waits for more servers after its READY before it is ready"
    )

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


def settings_classes() -> tuple[type[BaseSettings], ...]:
    """Every settings class of aizuchi: the variables they read are the settings."""
    from arbiter.settings import ArbiterSettings
    from bots.settings import BotsSettings

    return (ArbiterSettings, BotsSettings, DiscordEndpoints, DiscordReconnects)


def variables_by_field(kind: type[BaseSettings]) -> dict[str, set[str]]:
    """The variables each field of ``kind`` is read from: its prefixed name, or its aliases where it has them."""
    prefix = str(kind.model_config.get("env_prefix", ""))
    fields: dict[str, set[str]] = {}
    for name, field in kind.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            fields[name] = {choice.upper() for choice in alias.choices if isinstance(choice, str)}
        elif isinstance(alias, str):
            fields[name] = {alias.upper()}
        else:
            fields[name] = {f"{prefix}{name}".upper()}
    return fields


def variables_of(kind: type[BaseSettings]) -> set[str]:
    """Every variable ``kind`` reads."""
    return set().union(*variables_by_field(kind).values())


def known_variables() -> set[str]:
    """Every ``AIZUCHI_*`` and ``ARBITER_*`` variable aizuchi reads."""
    known = set(READ_DIRECTLY)
    for kind in settings_classes():
        known |= variables_of(kind)
    return known


def unknown_settings(
    env_file: Path | None = ENV_FILE, environ: Mapping[str, str] | None = None, known: Iterable[str] | None = None
) -> list[str]:
    """One warning line for each ``AIZUCHI_*`` or ``ARBITER_*`` name in ``env_file`` or ``environ`` that is not a
    setting, naming the closest one: such a name is ignored, and a typo would otherwise pass in silence.

    Names are compared as the settings read them, without regard to case. Other names (a persona's
    ``RIN_DISCORD_TOKEN``, an ``OPENAI_API_KEY``) are not ours to judge.
    """
    names = set(dotenv_values(env_file)) if env_file is not None and env_file.is_file() else set()
    names |= set(os.environ if environ is None else environ)
    known_names = known_variables() if known is None else {name.upper() for name in known}
    lines = []
    for name in sorted(names):
        upper = name.upper()
        if not upper.startswith(SETTING_PREFIXES) or upper in known_names:
            continue
        closest = closest_setting(upper, known_names)
        hint = f" (did you mean {closest}?)" if closest else " (the settings are listed in .env.example)"
        lines.append(f"warning: {name} is not a setting{hint}; it is ignored")
    return lines


def closest_setting(name: str, known: Iterable[str]) -> str | None:
    """The known variable ``name`` most likely meant, or None if none is close.

    Compared without the prefixes, which every name shares and which would make any two look alike (AIZUCHI_ZZZ
    is no AIZUCHI_MODE), but across them, since a setting is easily given the other program's prefix
    (ARBITER_PROFILE for AIZUCHI_PROFILE); on a tie, the same prefix wins.
    """

    def split(variable: str) -> tuple[str, str]:
        prefix = next((p for p in SETTING_PREFIXES if variable.startswith(p)), "")
        return prefix, variable[len(prefix) :]

    prefix, rest = split(name)
    by_rest: dict[str, list[str]] = {}
    for variable in sorted(known):
        by_rest.setdefault(split(variable)[1], []).append(variable)
    matches = difflib.get_close_matches(rest, by_rest, n=1) if rest else []
    if not matches:
        return None
    candidates = by_rest[matches[0]]
    return next((c for c in candidates if c.startswith(prefix)), candidates[0])
