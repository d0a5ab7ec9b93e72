"""The arbiter's one exception family.

A refusal (not enough resource, paused, ...) is a normal answer, not an exception. These errors are for
requests that cannot be answered at all: they name what is wrong, and they change nothing. The HTTP layer
maps each family to a status code in one place (``arbiter.api.errors``).
"""

from __future__ import annotations

__all__ = (
    "ArbiterError",
    "ConflictError",
    "InvalidRequest",
    "NotFound",
    "PermissionDenied",
    "TooLarge",
)


class ArbiterError(Exception):
    """Root of every error the arbiter raises on purpose."""

    code = "arbiter_error"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code


class InvalidRequest(ArbiterError):
    """Well-formed but not acceptable here, e.g. an amount above the channel's capacity."""

    code = "invalid"


class TooLarge(InvalidRequest):
    """Acceptable but for its size, e.g. an image over the bytes the room takes."""

    code = "too_large"


class NotFound(ArbiterError):
    code = "not_found"


class PermissionDenied(ArbiterError):
    """The caller is known but may not do this, e.g. a persona acting on another persona's claim."""

    code = "forbidden"


class ConflictError(ArbiterError):
    """The target exists but is in the wrong state, e.g. speaking on a claim that was released."""

    code = "conflict"
