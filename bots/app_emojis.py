"""A persona's own emojis on Discord: uploaded once as emojis of its bot's application, then found by name.

Discord lets an application own 2,000 emojis, which its bot may react with anywhere without Use External Emojis.
At start the persona lists its application's emojis (one request) and uploads only those of its file it does not
find by name, so a restart uploads nothing. An image changed under the same name is not uploaded again: delete the
emoji in the Developer Portal (or give it a new name) to replace it. Whatever fails is said in one line, and the
persona nods with its words and Unicode emoji instead.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import discord

from bots.platforms.discord import DISCORD_FAILURES

if TYPE_CHECKING:
    from bots.persona import Persona

__all__ = ("own_emojis",)

_log = logging.getLogger(__name__)


async def own_emojis(client: discord.Client, persona: Persona) -> dict[str, discord.PartialEmoji]:
    """``persona``'s emojis by how it says them (``:name:``), uploaded if its application lacks them; those that
    could not be had are left out."""
    if not persona.nod_emojis:
        return {}
    try:
        listed = {emoji.name: emoji for emoji in await client.fetch_application_emojis()}
    except (discord.MissingApplicationID, *DISCORD_FAILURES) as error:
        _log.warning("persona=%s cannot list its application's emojis (%s); it nods without them", persona.id, error)
        return {}
    found: dict[str, discord.PartialEmoji] = {}
    for wanted in persona.nod_emojis:
        emoji = listed.get(wanted.name)
        if emoji is None:
            try:
                emoji = await client.create_application_emoji(name=wanted.name, image=wanted.image.read_bytes())
            except (OSError, ValueError, *DISCORD_FAILURES) as error:
                _log.warning(
                    "persona=%s could not upload its emoji %s from %s (%s); it nods without it",
                    persona.id,
                    wanted.name,
                    wanted.image,
                    error,
                )
                continue
            _log.info("persona=%s uploaded its emoji %s", persona.id, wanted.name)
        found[wanted.said] = discord.PartialEmoji(name=emoji.name, id=emoji.id, animated=emoji.animated)
    return found
