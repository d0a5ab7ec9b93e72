"""The arbiter on Discord: it records the enabled channels' messages and serves the moderators' commands.

Handlers only translate between discord.py and ``ArbiterService``; no turn-taking rule lives here.
"""

from arbiter.discord_bot.bot import ArbiterBot, CommandSyncRefused, arbiter_intents

__all__ = ("ArbiterBot", "CommandSyncRefused", "arbiter_intents")
