"""Bounds on inputs, shared by the rules and the wire models so they cannot drift."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ("ID_PATTERN", "LIMITS", "MAX_NAME_LENGTH", "MAX_SEQ", "MAX_TEXT_LENGTH", "MAX_TOPIC_LENGTH", "Bound")


@dataclass(frozen=True, slots=True)
class Bound:
    low: float
    high: float


# Bounds of inputs that are not settings (a setting's bounds are declared with it: models.ChannelSettings).
LIMITS: dict[str, Bound] = {
    "tokens": Bound(0, 10_000_000),  # one usage report's prompt or completion tokens
}

# Channel and persona ids: Discord snowflakes, room names, slugs. Safe in URLs and logs.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

MAX_TEXT_LENGTH = 4_000  # an observed message may be a long human post; tiers cap what personas say
MAX_NAME_LENGTH = 80
MAX_TOPIC_LENGTH = 300
# History positions are 64-bit integers in the database (and in SQLite's driver): a larger one in a request is
# refused by the wire models, naming the field, instead of overflowing in the driver.
MAX_SEQ = 2**63 - 1
