"""The platform interface: how a persona shows a message and that it is typing.

Incoming messages do not come through here: the arbiter records every message of a channel, and the runtime
hears of them on the arbiter's event stream, in order and with sequence numbers, whatever the platform.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

__all__ = ("Platform", "Posted")


@dataclass(frozen=True, slots=True)
class Posted:
    platform_message_id: str


class Platform(abc.ABC):
    """One persona's presence on a platform. Implementations must never let a message ping anyone."""

    name: str = "platform"
    user_id: str | None = None  # the persona's own account here, once known (a Discord user id)

    @abc.abstractmethod
    async def post(self, channel_id: str, text: str) -> Posted:
        """Show ``text`` in the channel as this persona. Raises ``bots.errors.PostFailed`` if it could not."""

    @abc.abstractmethod
    def typing(self, channel_id: str) -> AbstractAsyncContextManager[None]:
        """Show that the persona is writing for as long as the block runs."""

    async def react(self, channel_id: str, platform_message_id: str, emoji: str) -> bool:
        """Put ``emoji`` on a message, if the platform can; returns whether it did."""
        return False

    def may_post(self, channel_id: str) -> bool:
        """Whether a post in the channel could succeed, as far as the platform can tell without asking: checked
        before claiming, so no model is asked for words that could not be shown."""
        return True
