"""Logging for several clients in one process: every record says which bot (or part) it came from.

discord.py logs through module-level loggers that cannot tell one client from another, so the name travels
in a context variable: each client runs in its own task, and the tasks it starts inherit the context.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Coroutine
    from typing import Any

__all__ = ("acting_as", "configure_logging")

T = TypeVar("T")

_who: contextvars.ContextVar[str] = contextvars.ContextVar("aizuchi_who", default="aizuchi")


class _Who(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.who = _who.get()
        return True


class _Reconnects(logging.Filter):
    """discord.py logs each reconnect after a network error at ERROR, with a traceback. It is routine, and the
    client goes on by itself: a warning naming the exception says all there is to say."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "discord.client" and str(record.msg).startswith("Attempting a reconnect") and record.exc_info:
            error = record.exc_info[1]
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            said = str(error).replace("%", "%%")  # the message is still %-formatted with discord.py's delay
            record.msg = f"lost the connection to Discord ({type(error).__name__}: {said}); reconnecting in %.2fs"
            record.exc_info = record.exc_text = None
        return True


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_Who())
    handler.addFilter(_Reconnects())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s [%(who)s] %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in (
        "aiohttp.access",
        "sqlalchemy.engine",
        "alembic.runtime.migration",
        "discord.gateway",
        "httpx2",
        "mcp",
    ):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


async def acting_as(who: str, work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` with its log records (and those of every task it starts) marked as ``who``'s."""
    _who.set(who)  # in this task's own copy of the context
    return await work
