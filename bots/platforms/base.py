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
    # Whether the model is told an emoji nod shows as a reaction here; a webhook cannot react: its nod is a message.
    reacts: bool = True

    @abc.abstractmethod
    async def post(self, channel_id: str, text: str) -> Posted:
        """Show ``text`` in the channel as this persona. Raises ``bots.errors.PostFailed`` if it could not."""

    @abc.abstractmethod
    def typing(self, channel_id: str) -> AbstractAsyncContextManager[None]:
        """Show that the persona is writing for as long as the block runs."""

    async def react(self, channel_id: str, platform_message_id: str, emoji: str) -> bool:
        """Put ``emoji`` on a message, if the platform can; returns whether it did."""
        return False

    def emoji_nods(self) -> tuple[str, ...]:
        """The persona's own emojis it can react with here, as it says them (``:name:``); none by default."""
        return ()

    def latest_said(self, channel_id: str) -> int:
        """The newest message a person said in the channel that the persona's own account has seen on the platform
        (a numeric platform message id; 0 when none, or when the platform does not tell): the arbiter may hear of it
        later, and the persona waits for that before it speaks (see ``ChannelWorker``)."""
        return 0

    def cannot_post(self, channel_id: str) -> str | None:
        """Why a post in the channel would fail, as far as the platform can tell without asking (None: it could
        succeed): checked before claiming, so no model is asked for words that could not be shown."""
        return None
