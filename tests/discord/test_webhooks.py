"""One-application mode on the local Discord: only the arbiter's bot is on the server, and the personas post through
a webhook of its channel under their own names and avatars. The arbiter's bot, the webhook personas' REST client and
the runtimes are the production ones (``WebhookPersonas``, ``WebhookPlatform``); only Discord is local.

What must hold as with persona bots: the arbiter's history attributes each post to its persona (so no persona
answers its own or another's post as a person's, and the bots stop by rule), nobody is pinged, a nod is a text
message (a webhook cannot react), and the webhook is made once per channel, then found again after a restart."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import discord
import pytest

from aizuchi.errors import SetupError
from aizuchi.run import run_all, run_bots
from arbiter.contract import AuthorKind, Tier
from arbiter.discord_bot import ArbiterBot
from arbiter.settings import ArbiterSettings
from bots.platforms.webhook import WEBHOOK_NAME, ChannelHooks, WebhookPlatform
from bots.runtime import PersonaRuntime
from bots.settings import Environment
from bots.webhook_client import WebhookPersonas
from tests.discord.conftest import CREW_ROLE, build_world
from tests.discord.fleet import eager, scripted
from tests.discord.test_own_emojis import SEED_THAT_NODS, listener
from tests.discord.test_run import ENDPOINTS, bots_settings, following, running_task
from tests.support.eventually import eventually
from tests.support.fake_discord import (
    FAST_READY,
    MAX_CHANNEL_WEBHOOKS,
    FakeWebhook,
    Perm,
    WebhookAuthor,
    running,
)
from tests.support.fleet import FAST

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence
    from pathlib import Path

    from arbiter.contract import MessageView
    from bots.persona import Persona
    from tests.discord.conftest import World
    from tests.support.fake_discord import FakeDiscord, FakeMessage
    from tests.support.fleet import Live, RecordingProvider

HANA_AVATAR = "https://example.test/avatars/hana.png"
CREATE = ("POST", "/channels/{channel_id}/webhooks")
REACTIONS = ("PUT", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me")


@dataclass
class WebhookFleet:
    world: World
    live: Live
    runtimes: dict[str, PersonaRuntime] = field(default_factory=dict)
    providers: dict[str, RecordingProvider] = field(default_factory=dict)

    @property
    def channel_id(self) -> str:
        return str(self.world.lounge.id)

    def webhook_posts(self) -> list[FakeMessage]:
        return [m for m in self.world.lounge.messages if m.webhook_id is not None]

    async def history(self) -> list[MessageView]:
        return await self.live.history(self.channel_id)

    async def settled(self) -> None:
        """Every persona idle and holding no claim, and every message it was granted posted and linked."""
        await self.live.settled(self.channel_id)

        async def linked() -> bool:
            return all(m.platform_message_id for m in await self.history() if m.author_kind is AuthorKind.PERSONA)

        await eventually(linked, what="every persona message linked to its Discord message")


def manage_webhooks(fake: FakeDiscord, world: World) -> None:
    """Give the arbiter's bot Manage Webhooks, as a server owner does for one-application mode."""
    role = fake.add_role(world.guild, "webhooks", permissions=Perm.MANAGE_WEBHOOKS)
    member = world.guild.members[world.arbiter.id]
    fake.set_roles(world.arbiter, world.guild, [*member.roles, role])


@contextlib.asynccontextmanager
async def webhook_fleet(
    world: World, live: Live, personas: Sequence[Persona], *, seed: int = 0, channel: dict[str, object] | None = None
) -> AsyncIterator[WebhookFleet]:
    """Enable the lounge, start the arbiter's bot, and the personas posting through webhooks with its token; wait
    until every persona follows the lounge. On the way out the runtimes close first, then the client."""
    await live.channel(str(world.lounge.id), **(channel or {}))
    bot = ArbiterBot(live.service, guilds=[world.guild.id], guild_ready_timeout=FAST_READY)
    fleet = WebhookFleet(world, live)
    client = discord.Client(intents=discord.Intents.none())
    hooks = ChannelHooks(client)
    for index, persona in enumerate(personas):
        provider = scripted(persona, seed=seed + index)
        runtime = PersonaRuntime(
            persona,
            provider,
            live.client(persona.id),
            WebhookPlatform(persona, hooks),
            config=FAST,
            rng=random.Random(seed + index),
        )
        live.runtimes.append(runtime)
        fleet.runtimes[persona.id], fleet.providers[persona.id] = runtime, provider
    through = WebhookPersonas(list(fleet.runtimes.values()), client, hooks, refresh_s=0.2)
    async with running(bot, world.arbiter.token):
        task = asyncio.create_task(through.run(world.arbiter.token))
        try:
            for runtime in fleet.runtimes.values():

                def joined(runtime: PersonaRuntime = runtime) -> bool:
                    if task.done():
                        task.result()  # what stopped it
                    return fleet.channel_id in runtime.channels

                await eventually(joined, what=f"{runtime.persona.id} joins")
                await runtime.join(fleet.channel_id).ready()
            yield fleet
        finally:
            for runtime in fleet.runtimes.values():
                await runtime.close()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await through.close()


async def test_personas_post_through_the_channel_webhook_under_their_names_and_are_attributed_to_them(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    manage_webhooks(fake, world)
    hana = eager("hana", avatar_url=HANA_AVATAR)
    kai = eager("kai")
    # The bots may take two turns in a row without a person: held by the arbiter only if it knows they are bots.
    async with webhook_fleet(world, live, [hana, kai], channel={"idle_cap": 2}) as fleet:
        asked = await fake.human_says(
            world.lounge, world.member, f"Hana, what do you think of the new tea place? {world.mod.mention}"
        )
        await eventually(lambda: [m for m in fleet.webhook_posts() if m.author.name == "Hana"], what="hana answers")
        await fleet.settled()
        history = await fleet.history()
        posts = fleet.webhook_posts()

    [hook] = fake.webhooks.values()
    assert (hook.channel, hook.name, hook.creator) == (world.lounge, WEBHOOK_NAME, world.arbiter)
    assert posts and all(m.webhook_id == hook.id and m.application_id == world.arbiter.id for m in posts)
    by_name = {"Hana": "hana", "Kai": "kai"}
    for post in posts:
        assert isinstance(post.author, WebhookAuthor)
        assert post.author.avatar_url == (HANA_AVATAR if post.author.name == "Hana" else None)
        assert post.allowed_mentions is not None and post.allowed_mentions["parse"] == []  # nobody pinged
        assert not post.live_mentions
    # The arbiter's history: the person's message, then each post as its persona's, linked to it.
    linked = {m.platform_message_id: m for m in history}
    assert linked[str(asked.id)].author_kind is AuthorKind.HUMAN
    for post in posts:
        line = linked[str(post.id)]
        said = (AuthorKind.PERSONA, by_name[post.author.name], post.content)
        assert (line.author_kind, line.author_id, line.text) == said
    assert [m.author_kind for m in history] == [AuthorKind.HUMAN] + [AuthorKind.PERSONA] * len(posts)
    # Taken for a person's, a post would have given the bots more turns: they stopped at the idle cap.
    assert len(posts) <= 2


async def test_a_reply_to_a_persona_s_webhook_post_speaks_to_that_persona(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    manage_webhooks(fake, world)
    async with webhook_fleet(world, live, [eager("hana"), eager("kai")], channel={"idle_cap": 1}) as fleet:
        await fake.human_says(world.lounge, world.member, "Kai, how was your week?")
        await eventually(lambda: [m for m in fleet.webhook_posts() if m.author.name == "Kai"], what="kai answers")
        await fleet.settled()
        [post] = [m for m in fleet.webhook_posts() if m.author.name == "Kai"]
        reply = await fake.human_says(world.lounge, world.member, "what do you mean by that?", reply_to=post)

        async def recorded() -> list[MessageView]:
            return [m for m in await fleet.history() if m.platform_message_id == str(reply.id)]

        [heard] = await eventually(recorded, what="the reply recorded")

    assert (heard.author_kind, heard.addressed) == (AuthorKind.HUMAN, ["kai"])
    assert not reply.live_mentions  # a webhook is no user: nobody pinged


async def test_the_webhook_is_made_once_per_channel_and_found_again_after_a_restart(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    manage_webhooks(fake, world)
    for turn in range(2):  # the personas start, post, stop, and start again on the same Discord
        async with webhook_fleet(world, live, [eager("hana"), eager("kai")]) as fleet:
            await fake.human_says(world.lounge, world.member, f"Hana, question number {turn + 1} for you?")
            await eventually(lambda n=turn: len(fleet.webhook_posts()) > n, what="a post through the webhook")
            await fleet.settled()

    [hook] = fake.webhooks.values()
    assert [r.status for r in fake.requests_to(*CREATE)] == [200]  # once, ever
    assert len(fake.requests_to("GET", "/channels/{channel_id}/webhooks")) == 2  # looked for once per start
    assert {m.webhook_id for m in world.lounge.messages if m.webhook_id} == {hook.id}


async def test_a_nod_goes_as_a_text_message(fake: FakeDiscord, world: World, live: Live) -> None:
    manage_webhooks(fake, world)
    mio = listener(emoji=False)  # she would nod with a reaction, as a bot of her own
    async with webhook_fleet(world, live, [mio], seed=SEED_THAT_NODS, channel={"idle_cap": 2}) as fleet:
        told = await fake.human_says(world.lounge, world.member, "I'm off to the mountains this weekend.")
        await eventually(fleet.webhook_posts, what="mio nods")
        await fleet.settled()
        lines = [m for m in await fleet.history() if m.author_kind is AuthorKind.PERSONA]
        asked = fleet.providers["mio"].decisions

    [nod] = lines
    # Her model is not told an emoji would be a reaction: here it would be a message.
    assert asked and all("a single emoji works too" in r.system for r in asked)
    assert all("shown as a reaction" not in r.system for r in asked)
    [posted] = fleet.webhook_posts()
    assert nod.tier is Tier.AIZUCHI
    assert (posted.author.name, posted.content, nod.platform_message_id) == ("Mio", nod.text, str(posted.id))
    assert told.reactions == {}
    assert fake.requests_to(*REACTIONS) == []


async def test_a_webhook_deleted_meanwhile_is_made_again_and_the_post_goes_through_it(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    manage_webhooks(fake, world)
    async with webhook_fleet(world, live, [eager("hana")], channel={"idle_cap": 1}) as fleet:
        await fake.human_says(world.lounge, world.member, "Hana, first question?")
        await eventually(fleet.webhook_posts, what="hana answers")
        await fleet.settled()
        [first] = fake.webhooks.values()
        fake.webhooks.clear()  # a moderator deletes it (Edit Channel > Integrations)
        await fake.human_says(world.lounge, world.member, "Hana, second question?")
        await eventually(lambda: len(fleet.webhook_posts()) == 2, what="hana answers again")
        await fleet.settled()
        history = await fleet.history()

    [second] = fake.webhooks.values()
    assert second.id != first.id
    assert [m.webhook_id for m in fleet.webhook_posts()] == [first.id, second.id]
    assert [r.status for r in fake.requests_to(*CREATE)] == [200, 200]
    assert [m.author_kind for m in history] == [AuthorKind.HUMAN, AuthorKind.PERSONA] * 2


def fifteen_others(fake: FakeDiscord, world: World) -> None:
    """Give the arbiter Manage Webhooks, and fill the lounge with another application's webhooks."""
    manage_webhooks(fake, world)
    other = fake.add_bot("feeds", permissions=Perm.MANAGE_WEBHOOKS)
    for index in range(MAX_CHANNEL_WEBHOOKS):
        hook_id = fake.snowflake()
        fake.webhooks[hook_id] = FakeWebhook(
            id=hook_id, token=f"t{index}", channel=world.lounge, name=f"feed {index}", creator=other
        )


@pytest.mark.parametrize(
    ("setup", "says"),
    [
        pytest.param(lambda fake, world: None, "lacks the Manage Webhooks permission", id="no-manage-webhooks"),
        pytest.param(fifteen_others, "has 15 webhooks, Discord's limit, none of them ours", id="fifteen-webhooks"),
    ],
)
async def test_without_a_webhook_the_personas_stay_quiet_and_say_why_once(
    *,
    fake: FakeDiscord,
    world: World,
    live: Live,
    caplog: pytest.LogCaptureFixture,
    setup: Callable[[FakeDiscord, World], None],
    says: str,
) -> None:
    setup(fake, world)
    before = dict(fake.webhooks)
    caplog.set_level(logging.WARNING, logger="bots.platforms.webhook")
    async with webhook_fleet(world, live, [eager("hana")]) as fleet:

        async def told_the_arbiter() -> str | None:
            return (await live.service.settings(fleet.channel_id)).personas["hana"].cannot_post

        why = await eventually(told_the_arbiter, what="hana tells the arbiter she cannot post")
        await fake.human_says(world.lounge, world.member, "Hana, are you there?")
        await eventually(fleet.history, what="the person's message recorded")
        await fleet.settled()
        asked = fleet.providers["hana"].decisions
        history = await fleet.history()

    [warning] = [r.getMessage() for r in caplog.records if r.name == "bots.platforms.webhook"]
    assert says in warning
    assert why is not None and says in why
    assert asked == []  # no model call for words that could not be posted
    assert [m.author_kind for m in history] == [AuthorKind.HUMAN]
    assert fake.webhooks == before


async def test_run_all_in_one_application_mode_answers_a_person_through_webhooks_beside_a_persona_bot(
    fake: FakeDiscord, tmp_path: Path, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Besides the arbiter's bot only rin has a bot of her own: theo and juno post through webhooks.
    world = build_world(fake, ("rin",))
    manage_webhooks(fake, world)
    caplog.set_level(logging.INFO, logger="bots.webhook_client")
    caplog.set_level(logging.INFO, logger="bots.discord_client")
    settings = ArbiterSettings(
        _env_file=None,
        database_url=sqlite_url,
        port=0,
        discord_token=world.arbiter.token,
        discord_guilds=[world.guild.id],
        moderator_role=CREW_ROLE,
    )
    bots = bots_settings(tmp_path, AIZUCHI_PERSONA_TOKENS={}, webhooks=True)
    env = Environment({"RIN_DISCORD_TOKEN": world.personas["rin"].token})
    async with running_task(run_all(settings, bots, env, ENDPOINTS)) as task:
        await fake.wait_until(lambda: fake.registered(world.arbiter, world.guild), what="commands")
        await fake.wait_connected(world.arbiter)
        await fake.invoke(world.deckhand, world.lounge, "aizuchi enable", enforce_default_permissions=False)
        # Rin's bot comes to a channel enabled after it started when someone speaks there.
        await fake.human_says(world.lounge, world.member, "hello everyone")
        await following(world, caplog, task)
        answers = {}
        for name in ("Theo", "Rin"):
            question = await fake.human_says(world.lounge, world.member, f"{name}, what are you building these days?")

            def answer(name: str = name, after: int = question.id) -> list[FakeMessage]:
                return [m for m in world.lounge.messages if m.id > after and m.author.name == name]

            answers[name] = (await eventually(answer, what=f"{name} answers"))[0]

    [hook] = fake.webhooks.values()
    assert answers["Theo"].webhook_id == hook.id
    assert (answers["Rin"].webhook_id, answers["Rin"].author) == (None, world.personas["rin"])
    assert not fake.connected(world.arbiter)
    assert not fake.connected(world.personas["rin"])


async def test_persona_bots_apart_from_the_arbiter_need_its_token_for_the_webhooks(tmp_path: Path) -> None:
    bots = bots_settings(tmp_path, webhooks=True)  # no persona token, and no ARBITER_DISCORD_TOKEN

    with pytest.raises(SetupError) as refused:
        await run_bots(bots, Environment({}), ENDPOINTS)

    assert refused.value.message == (
        "one-application mode (AIZUCHI_WEBHOOKS=true) posts through webhooks of the arbiter's bot: set "
        "ARBITER_DISCORD_TOKEN for the personas too"
    )
