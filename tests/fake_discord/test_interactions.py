"""Slash commands end to end: ``tree.sync`` registers them, ``invoke`` runs them as a person would, and the bot's
answer (callback, followups, edits) comes back; the member's permissions travel in the interaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import discord
import pytest
from discord import app_commands

from tests.support.fake_discord import InteractionNotAnswered, InvalidInvocation, RecordingClient, running

if TYPE_CHECKING:
    from tests.fake_discord.conftest import World
    from tests.support.fake_discord import FakeBot, FakeDiscord

CONTENT = discord.Intents.default() | discord.Intents(message_content=True)


class CommandBot(RecordingClient):
    """A small moderator-command bot made only of discord.py's documented pieces."""

    def __init__(self, guild_id: int) -> None:
        super().__init__(intents=CONTENT)
        self.tree = app_commands.CommandTree(self)
        self.tree.on_error = self.refuse  # type: ignore[method-assign]
        self.guild_object = discord.Object(guild_id)
        self.invocations: list[discord.Interaction] = []
        self.tree.add_command(self.fleet_group(), guild=self.guild_object)
        self.tree.add_command(self.topic_command(), guild=self.guild_object)
        self.tree.add_command(self.greet_command(), guild=self.guild_object)

    async def setup_hook(self) -> None:
        await self.tree.sync(guild=self.guild_object)

    async def refuse(self, interaction: discord.Interaction, error: app_commands.AppCommandError) -> None:
        self.invocations.append(interaction)
        if isinstance(error, app_commands.MissingPermissions):
            await interaction.response.send_message("not allowed", ephemeral=True)
            return
        if isinstance(error, app_commands.CommandNotFound):
            await interaction.response.send_message(f"no command {error.name}", ephemeral=True)
            return
        raise error

    def fleet_group(self) -> app_commands.Group:
        fleet = app_commands.Group(name="fleet", description="Run the fleet")

        @fleet.command(name="pause", description="Pause the bots")
        @app_commands.checks.has_permissions(manage_channels=True)
        async def pause(interaction: discord.Interaction) -> None:
            self.invocations.append(interaction)
            await interaction.response.send_message("paused", ephemeral=True)

        @fleet.command(name="capacity", description="Set the pool's capacity")
        async def capacity(interaction: discord.Interaction, value: app_commands.Range[int, 1, 1000]) -> None:
            self.invocations.append(interaction)
            await interaction.response.send_message(f"capacity {value}")

        @fleet.command(name="tier", description="Pick a tier")
        async def tier(interaction: discord.Interaction, name: Literal["aizuchi", "remark", "long"]) -> None:
            self.invocations.append(interaction)
            await interaction.response.send_message(f"tier {name}", ephemeral=True)

        @fleet.command(name="mute", description="Mute a persona")
        async def mute(interaction: discord.Interaction, persona: discord.Member) -> None:
            self.invocations.append(interaction)
            await interaction.response.send_message(f"muted {persona.display_name} (bot={persona.bot})")

        @fleet.command(name="report", description="A slow report")
        async def report(interaction: discord.Interaction) -> None:
            self.invocations.append(interaction)
            await interaction.response.defer(ephemeral=True, thinking=True)
            await interaction.followup.send("report ready", ephemeral=True)
            await interaction.followup.send("and a footnote", ephemeral=True)

        @fleet.command(name="silent", description="Never answers")
        async def silent(interaction: discord.Interaction) -> None:
            self.invocations.append(interaction)

        return fleet

    def topic_command(self) -> app_commands.Command[Any, Any, Any]:
        @app_commands.command(name="topic", description="Set the topic")
        @app_commands.default_permissions(manage_channels=True)
        async def topic(interaction: discord.Interaction, text: str) -> None:
            self.invocations.append(interaction)
            await interaction.response.send_message(f"topic: {text}")
            await interaction.edit_original_response(content=f"topic set: {text}")

        return topic

    def greet_command(self) -> app_commands.Command[Any, Any, Any]:
        @app_commands.command(name="greet", description="Greet a persona")
        async def greet(interaction: discord.Interaction, name: str) -> None:
            await interaction.response.send_message(f"hello {name}")

        @greet.autocomplete("name")
        async def names(interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
            return [app_commands.Choice(name=n, value=n) for n in ("hana", "haru", "kai") if n.startswith(current)]

        return greet


@pytest.fixture
def arbiter(fake: FakeDiscord, world: World) -> FakeBot:
    return fake.add_bot("arbiter")


async def test_a_synced_group_is_registered_for_the_guild(fake: FakeDiscord, world: World, arbiter: FakeBot) -> None:
    async with running(CommandBot(world.guild.id), arbiter.token):
        pass

    [put] = fake.requests_to("PUT", "/applications/{application_id}/guilds/{guild_id}/commands")
    assert put.path == f"/applications/{arbiter.application_id}/guilds/{world.guild.id}/commands"
    assert put.status == 200
    registered = {c["name"]: c for c in fake.registered(arbiter, world.guild)}
    assert sorted(registered) == ["fleet", "greet", "topic"]
    assert {o["name"]: o["type"] for o in registered["fleet"]["options"]}["pause"] == 1
    assert registered["topic"]["default_member_permissions"] == str(discord.Permissions(manage_channels=True).value)
    assert fake.registered(arbiter) == []  # nothing global


@pytest.mark.parametrize(("who", "expected"), [("mod", ("paused", True)), ("member", ("not allowed", False))])
async def test_the_members_permissions_reach_the_bots_check(
    fake: FakeDiscord, world: World, arbiter: FakeBot, who: str, expected: tuple[str, bool]
) -> None:
    answer, manage_channels = expected
    bot = CommandBot(world.guild.id)
    user = world.mod if who == "mod" else world.member

    async with running(bot, arbiter.token):
        result = await fake.invoke(user, world.lounge, "fleet pause")

    assert (result.callback_type, result.content, result.ephemeral) == (4, answer, True)
    [interaction] = bot.invocations
    assert interaction.user.id == user.id
    assert interaction.permissions.manage_channels is manage_channels
    assert interaction.permissions.value == fake.permissions(user, world.lounge)
    assert interaction.app_permissions.value == fake.permissions(arbiter, world.lounge)
    [callback] = fake.requests_to("POST", "/interactions/{interaction_id}/{token}/callback")
    assert callback.bot is arbiter
    assert callback.json["data"]["flags"] == 64
    assert world.lounge.messages == []  # ephemeral answers never reach the channel


async def test_a_public_answer_is_a_channel_message_other_bots_see(
    fake: FakeDiscord, world: World, arbiter: FakeBot
) -> None:
    listener = RecordingClient(intents=CONTENT)

    async with running(CommandBot(world.guild.id), arbiter.token), running(listener, fake.add_bot("hana").token):
        result = await fake.invoke(world.mod, world.lounge, "fleet capacity", {"value": 300})
        await fake.wait_until(lambda: listener.messages)

    assert (result.content, result.ephemeral) == ("capacity 300", False)
    assert result.payload["data"]["options"] == [
        {"type": 1, "name": "capacity", "options": [{"name": "value", "type": 4, "value": 300}]}
    ]
    [message] = world.lounge.messages
    assert (message.author, message.type, message.content) == (arbiter, 20, "capacity 300")
    [seen] = listener.messages
    assert seen.content == "capacity 300"
    assert seen.interaction_metadata is not None
    assert seen.interaction_metadata.user.id == world.mod.id


@pytest.mark.parametrize(
    ("command", "options"),
    [
        pytest.param("fleet capacity", {"value": 0}, id="below-min"),
        pytest.param("fleet capacity", {"value": 1001}, id="above-max"),
        pytest.param("fleet capacity", {"value": "many"}, id="wrong-type"),
        pytest.param("fleet capacity", {"value": True}, id="bool-is-not-int"),
        pytest.param("fleet capacity", {}, id="missing-required"),
        pytest.param("fleet capacity", {"value": 3, "extra": 1}, id="unknown-option"),
        pytest.param("fleet tier", {"name": "loud"}, id="not-a-choice"),
        pytest.param("fleet", {}, id="group-alone"),
        pytest.param("fleet nope", {}, id="unknown-subcommand"),
        pytest.param("nope", {}, id="unknown-command"),
    ],
)
async def test_what_the_discord_client_would_not_submit_is_refused(
    fake: FakeDiscord, world: World, arbiter: FakeBot, command: str, options: dict[str, Any]
) -> None:
    bot = CommandBot(world.guild.id)

    async with running(bot, arbiter.token):
        with pytest.raises(InvalidInvocation):
            await fake.invoke(world.mod, world.lounge, command, options)

    assert bot.invocations == []
    assert fake.interactions == {}


async def test_an_unvalidated_value_reaches_the_bot_as_sent(fake: FakeDiscord, world: World, arbiter: FakeBot) -> None:
    async with running(CommandBot(world.guild.id), arbiter.token):
        result = await fake.invoke(world.mod, world.lounge, "fleet capacity", {"value": 5000}, validate=False)

    assert result.content == "capacity 5000"


async def test_an_unvalidated_subcommand_reaches_the_bot_as_sent(
    fake: FakeDiscord, world: World, arbiter: FakeBot
) -> None:
    async with running(CommandBot(world.guild.id), arbiter.token):
        result = await fake.invoke(world.mod, world.lounge, "fleet explode", {"loudly": True}, validate=False)

    assert result.payload["data"]["options"] == [
        {"type": 1, "name": "explode", "options": [{"name": "loudly", "type": 5, "value": True}]}
    ]
    assert result.content == "no command explode"


async def test_a_member_option_arrives_resolved(fake: FakeDiscord, world: World, arbiter: FakeBot) -> None:
    hana = fake.add_bot("hana")

    async with running(CommandBot(world.guild.id), arbiter.token):
        result = await fake.invoke(world.mod, world.lounge, "fleet mute", {"persona": hana})

    assert result.content == "muted hana (bot=True)"
    assert list(result.payload["data"]["resolved"]["members"]) == [str(hana.id)]


async def test_a_deferred_answer_is_completed_by_followups(fake: FakeDiscord, world: World, arbiter: FakeBot) -> None:
    async with running(CommandBot(world.guild.id), arbiter.token):
        result = await fake.invoke(world.mod, world.lounge, "fleet report")
        await result.settled()
        await result.wait_for(2)

    assert result.callback_type == 5
    assert not result.thinking
    # The first followup after a deferral replaces the "thinking" message; the next is a new message.
    assert result.texts == ["report ready", "and a footnote"]
    assert result.ephemeral
    assert [m.ephemeral for m in result.followups] == [True]
    assert world.lounge.messages == []


async def test_an_edited_answer_is_followed(fake: FakeDiscord, world: World, arbiter: FakeBot) -> None:
    async with running(CommandBot(world.guild.id), arbiter.token):
        result = await fake.invoke(world.mod, world.lounge, "topic", {"text": "tea"})
        await fake.wait_for_request("PATCH", "/webhooks/{application_id}/{token}/messages/@original")

    assert result.content == "topic set: tea"
    assert result.message is not None
    assert result.message.edits == ["topic: tea"]
    assert [m.content for m in world.lounge.messages] == ["topic set: tea"]


async def test_default_member_permissions_keep_a_member_from_the_command(
    fake: FakeDiscord, world: World, arbiter: FakeBot
) -> None:
    bot = CommandBot(world.guild.id)

    async with running(bot, arbiter.token):
        with pytest.raises(InvalidInvocation, match="default member permissions"):
            await fake.invoke(world.member, world.lounge, "topic", {"text": "tea"})
        assert bot.invocations == []
        # As if a server admin had opened the command to everyone in the integration settings.
        opened = await fake.invoke(
            world.member, world.lounge, "topic", {"text": "tea"}, enforce_default_permissions=False
        )

    assert opened.content is not None
    assert opened.content.startswith("topic")


async def test_an_unanswered_interaction_is_reported(fake: FakeDiscord, world: World, arbiter: FakeBot) -> None:
    async with running(CommandBot(world.guild.id), arbiter.token):
        with pytest.raises(InteractionNotAnswered):
            await fake.invoke(world.mod, world.lounge, "fleet silent", within=0.2)


async def test_autocomplete_returns_the_bots_choices(fake: FakeDiscord, world: World, arbiter: FakeBot) -> None:
    async with running(CommandBot(world.guild.id), arbiter.token):
        choices = await fake.autocomplete(world.member, world.lounge, "greet", {"name": "ha"}, focused="name")

    assert [c["value"] for c in choices] == ["hana", "haru"]


async def test_a_second_answer_to_the_same_interaction_is_refused(
    fake: FakeDiscord, world: World, arbiter: FakeBot
) -> None:
    async with running(CommandBot(world.guild.id), arbiter.token):
        result = await fake.invoke(world.mod, world.lounge, "fleet pause")

    url = f"{fake.api_base}/interactions/{result.id}/{result.token}/callback"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json={"type": 4, "data": {"content": "again"}}) as r,
    ):
        body = await r.json()

    assert (r.status, body["code"]) == (400, 40060)
    assert result.content == "paused"


async def test_a_global_command_is_found_and_invoked(fake: FakeDiscord, world: World, arbiter: FakeBot) -> None:
    client = RecordingClient(intents=CONTENT)
    tree = app_commands.CommandTree(client)

    @tree.command(name="ping", description="Are you there?")
    async def ping(interaction: discord.Interaction) -> None:
        await interaction.response.send_message("pong")

    async with running(client, arbiter.token):
        await tree.sync()
        result = await fake.invoke(world.member, world.lounge, "ping")

    assert [c["name"] for c in fake.registered(arbiter)] == ["ping"]
    assert result.content == "pong"
    assert "guild_id" not in result.payload["data"]
