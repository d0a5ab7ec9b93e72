"""The pure turn-taking core: frozen values and functions of (state, request, now). Standard library only."""

from arbiter.core.addressing import addressed_personas
from arbiter.core.errors import (
    ArbiterError,
    ConflictError,
    InvalidRequest,
    NotFound,
    PermissionDenied,
)
from arbiter.core.models import (
    DEFAULT_TIERS,
    AuthorKind,
    ChannelSettings,
    ChannelState,
    Message,
    PersonaPolicy,
    Priority,
    RefusalReason,
    Spend,
    SpendState,
    Tier,
    TierRule,
)
from arbiter.core.text import display_length, trim_to_length
from arbiter.core.validation import validate_settings

__all__ = (
    "DEFAULT_TIERS",
    "ArbiterError",
    "AuthorKind",
    "ChannelSettings",
    "ChannelState",
    "ConflictError",
    "InvalidRequest",
    "Message",
    "NotFound",
    "PermissionDenied",
    "PersonaPolicy",
    "Priority",
    "RefusalReason",
    "Spend",
    "SpendState",
    "Tier",
    "TierRule",
    "addressed_personas",
    "display_length",
    "trim_to_length",
    "validate_settings",
)
