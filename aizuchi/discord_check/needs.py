"""What each kind of bot needs on Discord, declared once: the setup check compares each bot's permissions with these,
and the invite URLs it prints grant exactly these.

The arbiter's bot reads: it records what is said in the channels where the fleet is enabled and reads back what it
missed (View Channel, Read Message History). It answers the moderators' slash commands through interaction
responses, which take no channel permission, but its invite needs the ``applications.commands`` scope for them.

A persona's bot posts, shows typing, and nods with a reaction (View Channel, Send Messages - which typing needs
too -, Add Reactions, and Read Message History, which Discord requires of every reaction: "This endpoint requires
the READ_MESSAGE_HISTORY permission"). In a thread, posting takes Send Messages in Threads instead. It reads no
message content and registers no commands: its invite asks for the ``bot`` scope only.

In one-application mode (``AIZUCHI_WEBHOOKS``) the arbiter's bot also finds or makes each enabled channel's webhook,
through which the personas without a bot of their own post: Discord's Create Webhook and Get Channel Webhooks
"Require the MANAGE_WEBHOOKS permission" (a thread posts through its channel's webhook, so the channel's permission
counts there too). Executing a webhook takes no permission at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import discord
from discord.utils import MISSING

__all__ = ("ARBITER", "ARBITER_WITH_WEBHOOKS", "PERSONA", "Needs", "permission_names")

# Discord's names for the permissions, as its settings show them, in the order the messages list them.
_LABELS = {
    "view_channel": "View Channel",
    "send_messages": "Send Messages",
    "send_messages_in_threads": "Send Messages in Threads",
    "add_reactions": "Add Reactions",
    "read_message_history": "Read Message History",
    "manage_webhooks": "Manage Webhooks",
}


def permission_names(value: int) -> list[str]:
    """The names of the permission bits in ``value``, as Discord's settings show them."""
    named = [label for attribute, label in _LABELS.items() if getattr(discord.Permissions(value), attribute)]
    known = discord.Permissions(**dict.fromkeys(_LABELS, True)).value
    others = discord.Permissions(value & ~known)
    return named + [name.replace("_", " ").title() for name, on in others if on]


@dataclass(frozen=True)
class Needs:
    """What one kind of bot needs in an enabled channel (``channel``) and in an enabled thread (``thread``, where the
    channel's permissions apply), and the scopes its invite asks for. The invite grants both sets server-wide."""

    channel: discord.Permissions
    thread: discord.Permissions
    scopes: tuple[str, ...]
    arbiter: bool = False  # the arbiter's bot: it must see every enabled channel

    @property
    def invite(self) -> discord.Permissions:
        return discord.Permissions(self.channel.value | self.thread.value)

    def invite_url(self, application_id: int, guild_id: int | None = None) -> str:
        """The bot's invite link with exactly these permissions (the server picked in advance, if given)."""
        guild = MISSING if guild_id is None else discord.Object(guild_id)
        return discord.utils.oauth_url(application_id, permissions=self.invite, guild=guild, scopes=self.scopes)

    def lacking(self, has: discord.Permissions, *, thread: bool = False) -> int:
        """The bits of what it needs (in a thread, or else in a channel) that ``has`` lacks."""
        return (self.thread if thread else self.channel).value & ~has.value

    def lacking_anywhere(self, has: discord.Permissions) -> int:
        """The bits of its invite's permissions that ``has`` (what its roles grant server-wide) lacks."""
        return 0 if has.administrator else self.invite.value & ~has.value


_READS = discord.Permissions(view_channel=True, read_message_history=True)

_HOOKS = discord.Permissions(view_channel=True, read_message_history=True, manage_webhooks=True)

ARBITER = Needs(channel=_READS, thread=_READS, scopes=("bot", "applications.commands"), arbiter=True)
ARBITER_WITH_WEBHOOKS = Needs(channel=_HOOKS, thread=_HOOKS, scopes=("bot", "applications.commands"), arbiter=True)
PERSONA = Needs(
    channel=discord.Permissions(view_channel=True, send_messages=True, add_reactions=True, read_message_history=True),
    thread=discord.Permissions(
        view_channel=True, send_messages_in_threads=True, add_reactions=True, read_message_history=True
    ),
    scopes=("bot",),
)
