"""The command line's own exception family: what ends ``aizuchi`` with one line and a non-zero status."""

from __future__ import annotations

__all__ = ("FleetError", "FleetStopped", "SetupError")


class FleetError(Exception):
    """Root of the errors the composition root raises on purpose; the message is the whole story, on one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SetupError(FleetError):
    """The settings cannot work; the message says what to change."""


class FleetStopped(FleetError):
    """A part the fleet cannot run without stopped for good (a refused token, every persona bot gone): exit, so
    that a supervisor restarts the fleet or a person reads why."""
