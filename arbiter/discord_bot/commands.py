"""``/aizuchi ...``: the moderators' slash commands. They act on the channel they are used in, through the same
service methods as the admin API, and answer at once and privately (ephemeral).

What each command takes is declared once, in its signature: the tiers and actions as choices, each number with the
bounds its setting is declared with (``arbiter.core.models.SETTING_BOUNDS``), which Discord's client enforces. A
server that does not enforce them (Spacebar, for one) may send anything, and discord.py passes a value outside the
choices or the range through unchecked; so ``ModeratorTree.interaction_check`` holds every option to the same
registration before a command runs. Every failure ends in ``ModeratorTree.on_error``: one reply, and a traceback in
the log only for a bug."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

import discord
from discord import app_commands

from arbiter.core.errors import ArbiterError
from arbiter.core.limits import MAX_TOPIC_LENGTH
from arbiter.core.models import SETTING_BOUNDS
from arbiter.discord_bot.options import BadOption, check_options, given_options, shown
from arbiter.discord_bot.render import memory_text, status_text
from arbiter.storage.errors import StorageError

if TYPE_CHECKING:
    from arbiter.service import ArbiterService

__all__ = ("ModeratorCommands", "ModeratorTree", "NotAllowed")

_log = logging.getLogger(__name__)

TierName = Literal["aizuchi", "remark", "long"]
_TIERS: tuple[TierName, ...] = ("aizuchi", "remark", "long")

if TYPE_CHECKING:  # to a type checker, a Range is the type it bounds
    Capacity = int
    Cost = int
    Length = int
    Turns = int
    Tokens = int
    Seconds = float
    Topic = str
else:

    def _bounded(kind: type, setting: str) -> Any:
        bound = SETTING_BOUNDS[setting]
        return app_commands.Range[kind, kind(bound.low), kind(bound.high)]

    Capacity = _bounded(int, "capacity")
    Cost = _bounded(int, "cost")
    Length = _bounded(int, "max_length")
    Turns = _bounded(int, "idle_cap")
    Tokens = _bounded(int, "daily_token_budget")
    Seconds = _bounded(float, "recovery_s")
    Topic = app_commands.Range[str, None, MAX_TOPIC_LENGTH]

NOT_SET_UP = "aizuchi is not set up in this channel: `/aizuchi enable` turns it on."


class NotAllowed(app_commands.CheckFailure):
    """Refused before the command ran; the message says why."""


class ModeratorTree(app_commands.CommandTree[discord.Client]):
    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        # Here, before discord.py reads the options: it would pass a value outside the choices or the range on to
        # the command, and end its task without any answer on a number option that float() cannot read. Before the
        # moderator check too, as Discord's client checks values before the bot sees them: a refusal changes
        # nothing and says only what the client shows anyone.
        command = interaction.command
        if interaction.type is discord.InteractionType.application_command and isinstance(
            command, app_commands.Command
        ):
            check_options(command, given_options(interaction.data))
        return True

    async def on_error(self, interaction: discord.Interaction, error: app_commands.AppCommandError) -> None:
        original = getattr(error, "original", error)
        where = f"/{interaction.command.qualified_name}" if interaction.command else "/aizuchi"
        if isinstance(error, NotAllowed):
            message = str(error)
        elif isinstance(error, BadOption):
            _log.info("%s refused an option: %s", where, error)
            message = f"Not changed: {error}."
        elif isinstance(error, app_commands.TransformerError):
            option = next((name for name, value in interaction.namespace if value is error.value), "an option")
            message = f"Not changed: {option} cannot be {shown(error.value)}."
        elif isinstance(error, app_commands.CommandNotFound | app_commands.CommandSignatureMismatch):
            # Discord's copy of the commands is not this arbiter's (it registers them again when it starts).
            _log.warning("a slash command that is not this arbiter's: %s", error)
            message = "Not changed: that is not one of the /aizuchi commands of this arbiter."
        elif isinstance(original, ArbiterError):
            # The service refused (a value it does not take, a channel without the fleet, a database that failed):
            # its message says why, and it changed nothing.
            _log.log(logging.WARNING if isinstance(original, StorageError) else logging.INFO, "%s: %s", where, original)
            message = NOT_SET_UP if original.code == "unknown_channel" else f"Not changed: {original.message}"
        elif isinstance(original, discord.HTTPException):
            # Discord refused the answer, not the arbiter the command: what the command did is done.
            _log.warning("could not answer a slash command: %s", original)
            message = "Discord did not take my answer just now; `/aizuchi status` shows whether anything changed."
        else:
            _log.exception("slash command failed", exc_info=error)
            message = "Something went wrong on the arbiter's side; nothing was changed. Try again in a moment."
        if interaction.response.is_done():
            return
        try:
            await interaction.response.send_message(message, ephemeral=True)
        except discord.HTTPException as failure:
            # Too late (Discord allows 3 s) or refused: nothing more can be said to this moderator. Raising here
            # would only end as "Task exception was never retrieved" in discord.py's dispatch task.
            _log.warning("could not tell a moderator that %s failed (%s: %s)", where, type(failure).__name__, failure)


class ModeratorCommands(app_commands.Group):
    def __init__(self, service: ArbiterService, *, moderator_role: str | None = None) -> None:
        super().__init__(
            name="aizuchi",
            description="Tune the aizuchi persona fleet in this channel",
            guild_only=True,
            # A hint for Discord's client (admins may change it); the real check is interaction_check.
            default_permissions=discord.Permissions(manage_channels=True),
        )
        self._service = service
        self._role = moderator_role

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        if interaction.guild is None:
            raise NotAllowed("aizuchi commands work in server channels only.")
        if interaction.permissions.manage_channels:
            return True
        roles = getattr(interaction.user, "roles", [])
        if self._role is not None and any(role.name == self._role for role in roles):
            return True
        who = "Manage Channels" + (f" or the {self._role} role" if self._role else "")
        raise NotAllowed(f"Only moderators can use /aizuchi here: it needs {who}.")

    # --- plumbing ---------------------------------------------------------------------------------------

    @staticmethod
    def _channel(interaction: discord.Interaction) -> str:
        assert interaction.channel_id is not None
        return str(interaction.channel_id)

    async def _reply(self, interaction: discord.Interaction, text: str) -> None:
        await interaction.response.send_message(text, ephemeral=True)

    async def _change(self, interaction: discord.Interaction, changes: dict[str, Any], done: str) -> None:
        await self._service.update_settings(self._channel(interaction), changes)
        await self._reply(interaction, done)

    # --- the commands -----------------------------------------------------------------------------------
    # The service's refusals (ArbiterError: a value it does not take, a channel without the fleet) are answered by
    # ModeratorTree.on_error, the same way for every command.

    @app_commands.command(description="The pool, the tiers, the personas and today's token use here")
    async def status(self, interaction: discord.Interaction) -> None:
        channel_id = self._channel(interaction)
        status = await self._service.status(channel_id)
        settings = await self._service.settings(channel_id)
        usage = await self._service.usage_today(channel_id)
        await self._reply(interaction, status_text(status, settings, self._service.registry.views(), usage))

    @app_commands.command(description="Turn the fleet on in this channel")
    async def enable(self, interaction: discord.Interaction) -> None:
        await self._service.ensure_channel(self._channel(interaction), {"enabled": True})
        await self._reply(interaction, "aizuchi is on in this channel.")

    @app_commands.command(description="Turn the fleet off in this channel")
    async def disable(self, interaction: discord.Interaction) -> None:
        await self._change(interaction, {"enabled": False}, "aizuchi is off in this channel.")

    @app_commands.command(description="Stop every persona speaking here until resumed")
    async def pause(self, interaction: discord.Interaction) -> None:
        await self._change(interaction, {"paused": True}, "Paused: the personas stay quiet until `/aizuchi resume`.")

    @app_commands.command(description="Let the personas speak again")
    async def resume(self, interaction: discord.Interaction) -> None:
        await self._change(interaction, {"paused": False}, "Resumed.")

    @app_commands.command(description="The pool's size")
    @app_commands.describe(value="how much the pool holds when full (default 100)")
    async def capacity(self, interaction: discord.Interaction, value: Capacity) -> None:
        await self._change(interaction, {"capacity": value}, f"The pool now holds {value}.")

    @app_commands.command(description="How long a spend takes to come back")
    @app_commands.describe(seconds="seconds until a spend is refunded", tier="one tier (default: all three)")
    async def recovery(self, interaction: discord.Interaction, seconds: Seconds, tier: TierName | None = None) -> None:
        tiers = [tier] if tier else list(_TIERS)
        changes = {"tiers": {name: {"recovery_s": seconds} for name in tiers}}
        await self._change(interaction, changes, f"Recovery of {', '.join(tiers)}: {seconds:g} s.")

    @app_commands.command(description="A tier's cost and maximum length")
    @app_commands.describe(tier="which tier", cost="what it costs from the pool", length="its maximum length")
    async def tier(
        self, interaction: discord.Interaction, tier: TierName, cost: Cost | None = None, length: Length | None = None
    ) -> None:
        rule = {key: value for key, value in (("cost", cost), ("max_length", length)) if value is not None}
        if not rule:
            await self._reply(interaction, "Give a cost, a length or both.")
            return
        said = ", ".join(f"{'length' if key == 'max_length' else key} {value}" for key, value in rule.items())
        await self._change(interaction, {"tiers": {tier: rule}}, f"{tier}: {said}.")

    @app_commands.command(name="idle-cap", description="Bot turns in a row before the bots wait for a human")
    @app_commands.describe(turns="how many bot messages may follow a human message")
    async def idle_cap(self, interaction: discord.Interaction, turns: Turns) -> None:
        await self._change(interaction, {"idle_cap": turns}, f"The bots now stop after {turns} turns without a human.")

    @app_commands.command(description="Today's token budget for this channel")
    @app_commands.describe(tokens="tokens per day (leave empty for no budget)")
    async def budget(self, interaction: discord.Interaction, tokens: Tokens | None = None) -> None:
        done = "No daily token budget." if tokens is None else f"Daily token budget: {tokens:,}."
        await self._change(interaction, {"daily_token_budget": tokens}, done)

    @app_commands.command(description="A topic the personas keep in mind")
    @app_commands.describe(text="the topic (leave empty to clear it)")
    async def topic(self, interaction: discord.Interaction, text: Topic | None = None) -> None:
        await self._change(interaction, {"topic": text or ""}, f"Topic: {text}." if text else "Topic cleared.")

    @app_commands.command(description="Enable, disable, mute or unmute one persona here")
    @app_commands.describe(persona="which persona", action="what to do")
    async def persona(
        self, interaction: discord.Interaction, persona: str, action: Literal["enable", "disable", "mute", "unmute"]
    ) -> None:
        known = {info.id: info.display_name for info in self._service.registry.views().personas}
        if persona not in known:
            names = ", ".join(sorted(known)) or "none"
            await self._reply(interaction, f"No persona {persona!r} here (known: {names}).")
            return
        changes = {
            "enable": {"enabled": True},
            "disable": {"enabled": False},
            "mute": {"muted": True},
            "unmute": {"muted": False},
        }[action]
        await self._service.set_persona(self._channel(interaction), persona, **changes)
        await self._reply(interaction, f"{known[persona]}: {action}d.")

    @app_commands.command(description="What each persona noted about this conversation; reset to forget")
    @app_commands.describe(persona="one persona (default: all)", reset="forget the notes instead of showing them")
    async def memory(self, interaction: discord.Interaction, persona: str | None = None, reset: bool = False) -> None:
        channel_id = self._channel(interaction)
        personas = self._service.registry.views()
        known = {info.id: info.display_name for info in personas.personas}
        if persona is not None and persona not in known:
            names = ", ".join(sorted(known)) or "none"
            await self._reply(interaction, f"No persona {persona!r} here (known: {names}).")
            return
        if not reset:
            await self._reply(interaction, memory_text(await self._service.memories(channel_id, persona), personas))
            return
        forgotten = await self._service.reset_memory(channel_id, persona)
        if forgotten:
            await self._reply(interaction, f"Forgot the notes of {', '.join(known.get(p, p) for p in forgotten)}.")
        else:
            await self._reply(interaction, "There were no notes to forget.")

    @memory.autocomplete("persona")
    @persona.autocomplete("persona")
    async def _persona_names(self, interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        infos = self._service.registry.views().personas
        matches = [i for i in infos if current.casefold() in (i.id + " " + i.display_name).casefold()]
        return [app_commands.Choice(name=f"{i.display_name} ({i.id})", value=i.id) for i in matches[:25]]

    @app_commands.command(name="clear-history", description="Forget this channel's conversation")
    @app_commands.describe(confirm="type this channel's name to confirm")
    async def clear_history(self, interaction: discord.Interaction, confirm: str) -> None:
        name = getattr(interaction.channel, "name", None)
        if not name or confirm.strip().lstrip("#") != name:
            await self._reply(interaction, f"Not cleared: to confirm, type the channel's name ({name}) exactly.")
            return
        deleted = await self._service.clear_history(self._channel(interaction))
        await self._reply(interaction, f"Cleared {deleted} messages, and what the personas noted about them.")
