"""The local room's JSON: what the page sends and what it gets back, beside the /v1 wire models it reuses."""

from __future__ import annotations

import unicodedata

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The room's name and text are the API's: the same lengths, and no NUL character (which PostgreSQL cannot store).
from arbiter.contract import MessageView, Name, PersonaInfoView, SettingsView, StatusView, Text

__all__ = ("RoomSnapshot", "SayRequest")


class SayRequest(BaseModel):
    """The person at the machine says something in the room."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    text: Text

    @field_validator("name")
    @classmethod
    def _one_line(cls, name: str) -> str:
        # A name is shown on one line beside every message: no line breaks or other control characters.
        if any(unicodedata.category(char).startswith("C") for char in name):
            raise ValueError("the name must not contain line breaks or control characters")
        return name


class RoomSnapshot(BaseModel):
    """Everything the page needs to draw a room; the event stream keeps it current from ``last_seq`` on."""

    model_config = ConfigDict(frozen=True)

    channel_id: str
    settings: SettingsView
    status: StatusView = Field(description="the pool and the channel's state, as the admin sees them")
    personas: list[PersonaInfoView] = Field(description="every persona, with its display name and colour")
    history: list[MessageView] = Field(description="the most recent messages, oldest first")
    last_seq: int = Field(description="pass as ?after= to the event stream: it replays what came after the history")
    notice: str | None = Field(None, description="what the page says above the conversation, if anything")
