"""The local room's JSON: what the page sends and what it gets back, beside the /v1 wire models it reuses."""

from __future__ import annotations

import unicodedata

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The room's name and text are the API's: the same lengths, and no NUL character (which PostgreSQL cannot store).
from arbiter.contract import (
    MemoryView,
    MessageView,
    Name,
    PersonaInfoView,
    PersonaUsageView,
    RefusalReason,
    SettingsView,
    StatusView,
    Text,
)

__all__ = ("HELD_BACK", "HeldBack", "RoomSnapshot", "RoomState", "SayRequest")

# The refusals a persona gets whatever it would say, which waiting for the pool does not lift: the room says why the
# personas are quiet. (The others - the pool, the floor, one nod per message - are the conversation's rhythm.)
HELD_BACK = frozenset(
    {RefusalReason.NOT_ENABLED, RefusalReason.MUTED, RefusalReason.PAUSED, RefusalReason.IDLE_CAP, RefusalReason.BUDGET}
)


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


class HeldBack(BaseModel):
    """Why the arbiter would refuse a persona any turn now, as it would answer its claim."""

    model_config = ConfigDict(frozen=True)

    reason: RefusalReason
    detail: str | None = None
    retry_after: float | None = Field(None, description="seconds until that ends by itself (the budget's next day)")


class RoomState(BaseModel):
    """What the page shows beside the conversation; the page reads it again after the events that may change it."""

    model_config = ConfigDict(frozen=True)

    channel_id: str
    settings: SettingsView
    status: StatusView = Field(description="the pool and the channel's state, as the admin sees them")
    personas: list[PersonaInfoView] = Field(description="every persona taking part, with its display name and colour")
    held_back: dict[str, HeldBack] = Field(
        default_factory=dict, description="the personas the arbiter would refuse any turn now, and why"
    )
    colors: dict[str, str] = Field(
        default_factory=dict,
        description="the colour of every persona the arbiter knows, also of those not taking part now (old messages)",
    )
    memories: list[MemoryView] = Field(
        default_factory=list, description="each persona's notes on this conversation (its dialogue state), if any"
    )
    notice: str | None = Field(None, description="what the page says about the room, if anything")
    usage: list[PersonaUsageView] = Field(
        default_factory=list,
        description="each persona's LLM tokens here today, the prompt cache's reads and writes apart",
    )


class RoomSnapshot(RoomState):
    """Everything the page needs to draw a room; the event stream keeps it current from ``last_seq`` on."""

    history: list[MessageView] = Field(description="the most recent messages, oldest first")
    last_seq: int = Field(description="pass as ?after= to the event stream: it replays what came after the history")
