"""``aizuchi run`` and ``aizuchi bots`` in Discord mode, called in process against the local Discord: the real
composition (settings, persona files, provider profiles, tokens from the environment) brings the fleet up, the
fleet converses with a person, and stopping it closes every client and gives back what the personas held.

The clients here start as in production (discord.py's own 2 s wait for the guilds before ``on_ready``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from aizuchi.errors import FleetStopped
from aizuchi.run import run_all, run_arbiter, run_bots
from aizuchi.settings import DiscordEndpoints
from arbiter.contract import AuthorKind
from arbiter.settings import ArbiterSettings
from bots.settings import BotsSettings, Environment
from tests.conftest import ADMIN_TOKEN
from tests.discord.conftest import CREW_ROLE, arbiter_bot, build_world
from tests.support.arbiters import Api
from tests.support.eventually import eventually
from tests.support.fake_discord import running
from tests.support.fleet import live_arbiter
from tests.support.llm_server import FAKE_KEY, FAKE_KEY_ENV, FakeLLMServer, decision_reply, delayed
from tests.support.room import PERSONAS_DIR, ROOM_PERSONAS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Coroutine
    from pathlib import Path

    from tests.discord.conftest import World
    from tests.support.fake_discord import FakeDiscord, FakeMessage

TOKENS = {persona_id: f"{persona_id}-run-token-0123456789abcdef" for persona_id in ROOM_PERSONAS}


@pytest.fixture
def world(fake: FakeDiscord) -> World:
    """The shipped English personas (rin, theo, juno), each with a bot account."""
    return build_world(fake, ROOM_PERSONAS)


def tokens_of(world: World, **more: str) -> Environment:
    """The variables as the user sets them: each persona's Discord token in the variable its file names."""
    return Environment({**{f"{pid.upper()}_DISCORD_TOKEN": bot.token for pid, bot in world.personas.items()}, **more})


# The fake already points discord.py at itself; these leave that as it is.
ENDPOINTS = DiscordEndpoints(_env_file=None)


@pytest.fixture(autouse=True)
def _logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="bots.discord_client")


def bots_settings(tmp_path: Path, **overrides: Any) -> BotsSettings:
    values: dict[str, Any] = {
        "personas_dir": PERSONAS_DIR,
        "personas": list(ROOM_PERSONAS),
        "profiles_file": tmp_path / "no-profiles.toml",  # the built-in profiles: scripted, offline
        "AIZUCHI_PERSONA_TOKENS": TOKENS,  # persona_tokens, by the name it is read from
        **overrides,
    }
    return BotsSettings(_env_file=None, **values)


@contextlib.asynccontextmanager
async def running_task(work: Coroutine[Any, Any, None]) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``work`` in a task; on exit cancel it, as Ctrl-C does, and wait until it has stopped."""
    task = asyncio.create_task(work)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def following(
    world: World, caplog: pytest.LogCaptureFixture, task: asyncio.Task[None], personas: tuple[str, ...] = ROOM_PERSONAS
) -> None:
    """Until each of ``personas`` follows the lounge (each says so in the log)."""

    def done() -> bool:
        if task.done():
            task.result()  # raises what stopped it
        return all(f"persona={p} takes part in channel {world.lounge.id}" in caplog.messages for p in personas)

    await eventually(done, what="every persona follows the lounge")


async def answer_from(world: World, persona_id: str, after: FakeMessage) -> FakeMessage:
    account = world.personas[persona_id]

    def found() -> list[FakeMessage]:
        return [m for m in world.lounge.messages if m.author is account and m.id > after.id]

    await eventually(found, what=f"{persona_id} answers")
    return found()[0]


def assert_all_disconnected(fake: FakeDiscord, world: World) -> None:
    assert not fake.connected(world.arbiter)
    assert not any(fake.connected(bot) for bot in world.personas.values())


async def test_run_all_on_discord_brings_up_the_arbiter_bot_and_personas_that_answer_a_person(
    *,
    fake: FakeDiscord,
    world: World,
    tmp_path: Path,
    sqlite_url: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = ArbiterSettings(
        _env_file=None,
        database_url=sqlite_url,
        port=0,
        admin_token=ADMIN_TOKEN,
        discord_token=world.arbiter.token,
        discord_guilds=[world.guild.id],
        moderator_role=CREW_ROLE,
    )
    printed = ""
    bots = bots_settings(tmp_path, AIZUCHI_PERSONA_TOKENS={})
    async with running_task(run_all(settings, bots, tokens_of(world), ENDPOINTS)) as task:
        await fake.wait_until(lambda: fake.registered(world.arbiter, world.guild), what="commands")
        await fake.wait_connected(world.arbiter)
        enabled = await fake.invoke(world.deckhand, world.lounge, "aizuchi enable", enforce_default_permissions=False)
        # The personas come to a channel enabled after they started when someone speaks there.
        await fake.human_says(world.lounge, world.member, "hello everyone")
        await following(world, caplog, task)
        question = await fake.human_says(world.lounge, world.member, "Rin, what are you building these days?")
        answer = await answer_from(world, "rin", question)

        printed = capsys.readouterr().out
        url = re.search(r"arbiter listening on (http://\S+);", printed)
        assert url is not None, printed
        async with aiohttp.ClientSession() as session:
            api = Api(session, {}, url.group(1))
            history: list[dict[str, Any]] = []

            async def linked_answer() -> bool:
                # The post reaches Discord a moment before the arbiter links it to its grant.
                history[:] = await api.history(str(world.lounge.id))
                return any(m["platform_message_id"] == str(answer.id) for m in history)

            await eventually(linked_answer, what="rin's answer linked in the arbiter's history")

    assert enabled.content == "aizuchi is on in this channel."
    linked = {m["platform_message_id"]: m for m in history}
    assert linked[str(question.id)]["author_kind"] == AuthorKind.HUMAN
    assert (linked[str(answer.id)]["author_id"], linked[str(answer.id)]["text"]) == ("rin", answer.content)
    assert "the fleet is on Discord" in printed
    assert_all_disconnected(fake, world)


async def test_run_bots_puts_the_personas_on_discord_with_a_separately_running_arbiter(
    fake: FakeDiscord, world: World, tmp_path: Path, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        live_arbiter(extra_tokens=TOKENS) as live,
        running(arbiter_bot(live.arbiter, world), world.arbiter.token),
    ):
        await live.channel(str(world.lounge.id))
        bots = bots_settings(tmp_path, arbiter_url=live.url)
        async with running_task(run_bots(bots, tokens_of(world), ENDPOINTS)) as task:
            await following(world, caplog, task)
            question = await fake.human_says(world.lounge, world.member, "Juno, how was the trip?")
            answer = await answer_from(world, "juno", question)

            async def linked() -> bool:
                return any(m.platform_message_id == str(answer.id) for m in await live.history(str(world.lounge.id)))

            await eventually(linked, what="juno's answer linked in the arbiter's history")
        registered = {p.id: p.platform_user_id for p in live.service.registry.views().personas if p.id in TOKENS}

    assert registered == {pid: str(bot.id) for pid, bot in world.personas.items()}
    assert not any(fake.connected(bot) for bot in world.personas.values())


async def test_stopping_the_persona_bots_gives_back_the_claims_they_hold(
    *,
    fake: FakeDiscord,
    world: World,
    tmp_path: Path,
    sqlite_url: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # rin's model takes its time: she holds her claim while it thinks, and is stopped before it answers.
    profiles = tmp_path / "profiles.toml"
    async with (
        FakeLLMServer(delayed(30.0, decision_reply("tools", {"action": "remark", "text": "Let me think."}))) as llm,
        live_arbiter(extra_tokens=TOKENS) as live,
        running(arbiter_bot(live.arbiter, world), world.arbiter.token),
    ):
        profiles.write_text(
            f'[profiles.slow]\nprovider = "openai"\nmodel = "fake-model"\nbase_url = "{llm.openai_url}"\n'
            f'api_key_env = "{FAKE_KEY_ENV}"\nmax_retries = 0\ntimeout_s = 60\n'
        )
        lounge = str(world.lounge.id)
        await live.channel(lounge, tiers={tier: {"recovery_s": 60.0} for tier in ("aizuchi", "remark", "long")})
        bots = bots_settings(tmp_path, arbiter_url=live.url, profiles_file=profiles, profile="slow")
        env = tokens_of(world, **{FAKE_KEY_ENV: FAKE_KEY})
        async with running_task(run_bots(bots, env, ENDPOINTS, only=["rin"])) as task:
            await following(world, caplog, task, ("rin",))
            await fake.human_says(world.lounge, world.member, "Rin, a hard question for you")
            await eventually(lambda: llm.requests, what="rin asks her model")
            holding = await live.status(lounge)

        released = await live.status(lounge)
        history = await live.history(lounge)

    # Asked directly, she claims a remark or (now and then, as she likes) a long remark.
    [(tier, held)] = holding.claims_held.items()
    assert held == 1 and tier in ("remark", "long")
    assert holding.level == holding.capacity - holding.tiers[tier].cost
    assert (released.claims_held, released.level) == ({}, released.capacity)
    assert [m.author_kind for m in history] == [AuthorKind.HUMAN]
    assert not fake.connected(world.personas["rin"])
    assert len(llm.requests) == 1


@pytest.mark.parametrize(
    ("account", "says"),
    [
        pytest.param(
            "unknown", "Discord refused the arbiter's bot's token (ARBITER_DISCORD_TOKEN)", id="refused-token"
        ),
        pytest.param(
            "no-message-content",
            "Discord refused the arbiter's bot: switch on the Message Content intent",
            id="message-content-intent-off",
        ),
    ],
)
async def test_an_arbiter_bot_discord_turns_away_ends_the_arbiter_with_the_reason(
    *, fake: FakeDiscord, sqlite_url: str, account: str, says: str
) -> None:
    # The arbiter's bot must read what people say: without the Message Content intent Discord refuses it.
    token = "not-a-token" if account == "unknown" else fake.add_bot("strict", message_content=False).token
    settings = ArbiterSettings(_env_file=None, database_url=sqlite_url, port=0, discord_token=token)

    with pytest.raises(FleetStopped) as stopped:
        await asyncio.wait_for(run_arbiter(settings, ENDPOINTS), timeout=10)

    assert stopped.value.message.startswith(says)
    assert token not in stopped.value.message
