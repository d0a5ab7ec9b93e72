"""Gateway trouble: a bot's connection to Discord drops and resumes, or its session ends and it identifies again.
No turn is lost and none is taken twice: every question gets one answer, on Discord and in the history."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from arbiter.contract import AuthorKind
from bots.discord_client import PersonaClient
from tests.discord.fleet import discord_fleet
from tests.support.eventually import eventually
from tests.support.fake_discord import Op
from tests.support.fleet import make_persona

if TYPE_CHECKING:
    from tests.discord.conftest import World
    from tests.discord.fleet import DiscordFleet
    from tests.support.fake_discord import FakeDiscord, FakeMessage
    from tests.support.fleet import Live


class NoWaitPersonaClient(PersonaClient):
    """discord.py waits 5 s before identifying again after a lost session (Discord's identify rate limit); the
    local Discord has no such limit."""

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        return None


async def ask(fleet: DiscordFleet, text: str) -> FakeMessage:
    world = fleet.world
    return await world.fake.human_says(world.lounge, world.member, text, mentions=[world.personas["hana"]])


async def answered(fleet: DiscordFleet, count: int) -> None:
    await eventually(lambda: len(fleet.posted_by("hana")) >= count, what=f"{count} answers from hana")
    await fleet.settled()


async def assert_one_answer_each(fleet: DiscordFleet, questions: list[FakeMessage]) -> None:
    """Question, answer, question, answer - on Discord and in the arbiter's history alike."""
    answers = fleet.posted_by("hana")
    assert len(answers) == len(questions)
    expected = [m.id for pair in zip(questions, answers, strict=True) for m in pair]
    assert [m.id for m in fleet.world.lounge.messages] == expected
    history = await fleet.history()
    assert [m.platform_message_id for m in history] == [str(i) for i in expected]
    assert [m.author_kind for m in history] == [AuthorKind.HUMAN, AuthorKind.PERSONA] * len(questions)
    assert sum(fleet.runtimes["hana"].stats.posted.values()) == len(questions)


@pytest.mark.parametrize("code", [None, 4000], ids=["connection-lost", "closed-4000"])
async def test_a_persona_whose_connection_drops_mid_turn_resumes_without_losing_or_doubling_a_turn(
    fake: FakeDiscord, world: World, live: Live, code: int | None
) -> None:
    hana = world.personas["hana"]
    async with discord_fleet(world, live, [make_persona("hana")]) as fleet:
        fleet.providers["hana"].hold()
        first = await ask(fleet, "what did you have for lunch?")
        await eventually(lambda: fleet.providers["hana"].waiting == 1, what="hana generating")
        await fake.drop(hana, code=code)
        fleet.providers["hana"].open()  # she posts while her gateway connection is down or coming back
        await answered(fleet, 1)
        await fake.wait_until(lambda: fake.gateway_ops(hana, Op.RESUME) and fake.connected(hana), what="resumed")
        second = await ask(fleet, "and for dinner?")
        await answered(fleet, 2)

        await assert_one_answer_each(fleet, [first, second])
    assert len(fake.gateway_ops(hana, Op.IDENTIFY)) == 1
    assert len(fake.gateway_ops(hana, Op.RESUME)) == 1


async def test_a_persona_whose_session_ends_identifies_again_and_answers_once(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    hana = world.personas["hana"]
    async with discord_fleet(world, live, [make_persona("hana")], client_type=NoWaitPersonaClient) as fleet:
        first = await ask(fleet, "how are you?")
        await answered(fleet, 1)

        await fake.invalidate(hana)
        await fake.wait_until(lambda: len(fake.gateway_ops(hana, Op.IDENTIFY)) == 2 and fake.connected(hana))
        # A new session means a new READY: the persona registers again, and keeps the one worker it had.
        await eventually(lambda: live.log.of("hana").count(("PUT", "/v1/personas/hana")) == 2, what="ready again")
        second = await ask(fleet, "still with us?")
        await answered(fleet, 2)

        await assert_one_answer_each(fleet, [first, second])
        assert fleet.runtimes["hana"].channels == [str(world.lounge.id)]


async def test_a_question_asked_while_the_arbiters_connection_is_down_is_answered_once(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    async with discord_fleet(world, live, [make_persona("hana")]) as fleet:
        await fake.drop(world.arbiter)
        # The arbiter hears of it when it resumes (Discord replays what it missed), and only then does hana.
        question = await ask(fleet, "anyone home?")
        await fake.wait_connected(world.arbiter)
        await answered(fleet, 1)

        await assert_one_answer_each(fleet, [question])
    assert len(fake.gateway_ops(world.arbiter, Op.RESUME)) == 1
