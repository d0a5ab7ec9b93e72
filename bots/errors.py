"""The persona runtime's exception family (provider errors have their own, under ``bots.llm``)."""

from __future__ import annotations

__all__ = ("ArbiterRejected", "ArbiterUnavailable", "BotError", "PostFailed")


class BotError(Exception):
    """Root of the errors the persona runtime raises on purpose."""


class ArbiterUnavailable(BotError):
    """The arbiter could not be reached or failed (connection error, timeout, 5xx). Try again later."""


class ArbiterRejected(BotError):
    """The arbiter answered with a 4xx: the request was wrong. Retrying the same request will not help."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field


class PostFailed(BotError):
    """The platform did not accept a message (the arbiter is told, so the grant is retracted)."""
