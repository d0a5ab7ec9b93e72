"""``/aizuchi``: the moderators' slash commands, run by people in the local Discord against the arbiter's bot.

Each command's effect is read back from the arbiter (its settings, its history), compared as a whole with what
it was before, so a command that changed something else as well would fail too. The arbiter runs on the fake
clock (tests.conftest's ``arbiter``): the status's refund countdown and today's token use are exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import re
import sqlite3
from typing import TYPE_CHECKING, Any

import discord
import pytest
from discord import app_commands

from arbiter.contract import Tier
from arbiter.core.models import SETTING_BOUNDS, SETTINGS
from arbiter.discord_bot.commands import NOT_SET_UP
from tests.discord.conftest import arbiter_bot
from tests.support.fake_discord import InteractionNotAnswered, InvalidInvocation, running

if TYPE_CHECKING:
    from arbiter.discord_bot import ArbiterBot
    from arbiter.server import Arbiter
    from tests.discord.conftest import World
    from tests.support.clock import FakeClock
    from tests.support.fake_discord import FakeUser, InteractionResult

pytestmark = pytest.mark.usefixtures("bot")


def flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"tiers.remark.cost": 60, ...}: nested settings as one level of dotted paths."""
    if not isinstance(value, dict):
        return {prefix: value}
    found: dict[str, Any] = {}
    for key, inner in value.items():
        found.update(flat(inner, f"{prefix}.{key}" if prefix else str(key)))
    return found


async def settings_of(arbiter: Arbiter, world: World) -> dict[str, Any]:
    return flat((await arbiter.service.settings(str(world.lounge.id))).model_dump(mode="json"))


def changed(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    return {path: value for path, value in after.items() if before.get(path) != value}


async def run(
    world: World, user: FakeUser, command: str, options: dict[str, Any] | None = None, **extra: Any
) -> InteractionResult:
    return await world.fake.invoke(user, world.lounge, f"aizuchi {command}", options or {}, **extra)


@pytest.fixture
async def lounge(arbiter: Arbiter, world: World) -> str:
    """The lounge with the fleet on (default settings)."""
    await arbiter.service.ensure_channel(str(world.lounge.id))
    return str(world.lounge.id)


# --- what each command does -------------------------------------------------------------------------------

ALL_RECOVERY = {f"tiers.{tier}.recovery_s": 2.5 for tier in ("aizuchi", "remark", "long")}


@pytest.mark.parametrize(
    ("command", "options", "prior", "effect", "reply"),
    [
        pytest.param("disable", {}, {}, {"enabled": False}, "off in this channel", id="disable"),
        pytest.param("enable", {}, {"enabled": False}, {"enabled": True}, "on in this channel", id="enable-again"),
        pytest.param("pause", {}, {}, {"paused": True}, "Paused", id="pause"),
        pytest.param("resume", {}, {"paused": True}, {"paused": False}, "Resumed", id="resume"),
        pytest.param("capacity", {"value": 150}, {}, {"capacity": 150}, "holds 150", id="capacity"),
        pytest.param("recovery", {"seconds": 2.5}, {}, ALL_RECOVERY, "2.5 s", id="recovery-all-tiers"),
        pytest.param(
            "recovery", {"seconds": 1, "tier": "long"}, {}, {"tiers.long.recovery_s": 1.0}, "long: 1 s", id="recovery"
        ),
        pytest.param(
            "tier",
            {"tier": "remark", "cost": 40, "length": 100},
            {},
            {"tiers.remark.cost": 40, "tiers.remark.max_length": 100},
            "remark: cost 40, length 100",
            id="tier-cost-and-length",
        ),
        pytest.param(
            "tier", {"tier": "aizuchi", "length": 30}, {}, {"tiers.aizuchi.max_length": 30}, "length 30", id="tier"
        ),
        pytest.param("idle-cap", {"turns": 5}, {}, {"idle_cap": 5}, "after 5 turns", id="idle-cap"),
        pytest.param("budget", {"tokens": 1000}, {}, {"daily_token_budget": 1000}, "1,000", id="budget"),
        pytest.param("budget", {}, {}, {"daily_token_budget": None}, "No daily token budget", id="no-budget"),
        pytest.param("topic", {"text": "ramen"}, {}, {"topic": "ramen"}, "Topic: ramen", id="topic"),
        pytest.param("topic", {}, {"topic": "soba"}, {"topic": ""}, "Topic cleared", id="clear-topic"),
    ],
)
async def test_a_moderator_changes_a_setting(
    *,
    arbiter: Arbiter,
    world: World,
    lounge: str,
    command: str,
    options: dict[str, Any],
    prior: dict[str, Any],
    effect: dict[str, Any],
    reply: str,
) -> None:
    if prior:
        await arbiter.service.update_settings(lounge, prior)
    before = await settings_of(arbiter, world)

    result = await run(world, world.mod, command, options)

    assert changed(before, await settings_of(arbiter, world)) == effect
    assert result.ephemeral
    assert result.content is not None and reply in result.content


@pytest.mark.parametrize(
    ("action", "prior", "effect"),
    [
        ("mute", {}, {"personas.kai.muted": True}),
        ("unmute", {"muted": True}, {"personas.kai.muted": False}),
        ("disable", {}, {"personas.kai.enabled": False}),
        ("enable", {"enabled": False}, {"personas.kai.enabled": True}),
    ],
)
async def test_a_moderator_sets_one_personas_part(
    *, arbiter: Arbiter, world: World, lounge: str, action: str, prior: dict[str, bool], effect: dict[str, bool]
) -> None:
    if prior:
        await arbiter.service.set_persona(lounge, "kai", **prior)
    before = await settings_of(arbiter, world)

    result = await run(world, world.mod, "persona", {"persona": "kai", "action": action})

    assert changed(before, await settings_of(arbiter, world)) == effect
    assert result.ephemeral and result.content == f"kai: {action}d."


async def test_enable_sets_the_fleet_up_in_a_new_channel(arbiter: Arbiter, world: World) -> None:
    assert (await arbiter.service.channels()).channels == []

    result = await run(world, world.mod, "enable")

    [channel] = (await arbiter.service.channels()).channels
    assert (channel.channel_id, channel.enabled) == (str(world.lounge.id), True)
    assert result.ephemeral and result.content == "aizuchi is on in this channel."


async def test_clear_history_forgets_the_channel_when_its_name_is_typed(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    for text in ("one", "two", "three"):
        await world.fake.human_says(world.lounge, world.member, text)
    await world.fake.wait_until(lambda: len(world.lounge.messages) == 3)
    await _recorded(arbiter, lounge, 3)

    refused = await run(world, world.mod, "clear-history", {"confirm": "lobby"})
    assert len((await arbiter.service.history(lounge)).messages) == 3
    cleared = await run(world, world.mod, "clear-history", {"confirm": "#lounge"})

    assert (await arbiter.service.history(lounge)).messages == []
    assert refused.ephemeral and refused.content == "Not cleared: to confirm, type the channel's name (lounge) exactly."
    assert cleared.ephemeral and cleared.content == "Cleared 3 messages, and what the personas noted about them."


async def _recorded(arbiter: Arbiter, channel_id: str, count: int) -> None:
    from tests.support.eventually import eventually

    async def enough() -> bool:
        return len((await arbiter.service.history(channel_id)).messages) >= count

    await eventually(enough, what=f"{count} messages recorded")


# --- the status -------------------------------------------------------------------------------------------


async def test_status_shows_the_pool_the_tiers_the_idle_cap_the_personas_and_the_tokens(
    arbiter: Arbiter, world: World, lounge: str, clock: FakeClock
) -> None:
    service = arbiter.service
    await service.register_persona("hana", "Hana")
    await service.register_persona("kai", "Kai")
    await service.update_settings(
        lounge,
        {"idle_cap": 4, "daily_token_budget": 50_000, "topic": "weekend plans", "tiers": {"long": {"recovery_s": 8}}},
    )
    await service.set_persona(lounge, "kai", muted=True)
    await service.set_persona(lounge, "mio", enabled=False)
    await service.record_message(lounge, author_id="bob", author_name="Bob", text="hi")
    await service.consume(lounge, "hana", "Hello Bob, good to see you here today.", tier=Tier.REMARK)
    await service.report_usage(lounge, "hana", 1_200, 34)
    # Of 2,000 prompt tokens, 1,500 read from the provider's cache (a tenth each) and 400 written (1.25 each):
    # 100 + 150 + 500 + 10 = 760 against the budget.
    await service.report_usage(lounge, "kai", 2_000, 10, cache_read_tokens=1_500, cache_write_tokens=400)
    clock.advance(2.0)

    result = await run(world, world.mod, "status")

    text = result.content or ""
    assert result.ephemeral
    # The gauge: 40 of 100 left, so 8 of 20 cells full; and the remark's 60 come back in 3 of its 5 seconds.
    assert f"`{'█' * 8}{'░' * 12}` 40 / 100" in text
    assert "+60 in 3.0 s" in text
    assert "aizuchi 5 (≤24 cols, back in 5 s)" in text
    assert "remark 60 (≤120 cols, back in 5 s)" in text
    assert "long 80 (≤240 cols, back in 8 s)" in text
    assert "1 of 4 bot turns" in text
    assert "Tokens today: 1,994 / 50,000" in text
    # Each persona's calls, the prompt cache's reads and writes shown apart.
    assert "- Hana: 1 call, 1,200 in, 34 out" in text
    assert "- Kai: 1 call, 2,000 in (cache: 1,500 read, 400 written), 10 out" in text
    assert "Personas: Hana (on), Kai (muted), mio (off)" in text
    assert "Topic: weekend plans" in text
    assert "running" in text


async def test_status_says_when_the_fleet_is_paused_and_without_a_budget(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    await arbiter.service.update_settings(lounge, {"paused": True, "daily_token_budget": None})

    text = (await run(world, world.mod, "status")).content or ""

    assert "paused" in text
    assert "Tokens today: 0 / no budget" in text
    assert f"`{'█' * 20}` 100 / 100" in text


async def test_status_names_a_persona_that_cannot_speak_and_why(arbiter: Arbiter, world: World, lounge: str) -> None:
    reason = "the API refused the key in ANTHROPIC_API_KEY (profile 'anthropic'): Anthropic API 401: invalid x-api-key"
    await arbiter.service.register_persona("hana", "Hana", cannot_speak=reason)

    text = (await run(world, world.mod, "status")).content or ""

    assert f"Cannot speak anywhere: Hana: {reason}" in text


async def test_status_in_a_channel_without_the_fleet_says_how_to_enable_it(arbiter: Arbiter, world: World) -> None:
    result = await run(world, world.mod, "status")

    assert result.ephemeral and result.content is not None and "`/aizuchi enable`" in result.content
    assert (await arbiter.service.channels()).channels == []


# --- the personas' notes -----------------------------------------------------------------------------------


async def _noted(arbiter: Arbiter, lounge: str, persona: str, topic: str, speakers: int = 1) -> None:
    from arbiter import contract as wire

    seq = (await arbiter.service.record_message(lounge, author_id="bob", author_name="Bob", text="Ramen?")).seq
    claimed = await arbiter.service.claim(lounge, persona, Tier.REMARK)
    assert claimed.claim is not None, claimed
    heard = [wire.SpeakerNote(name="Bob", note="wants ramen")]
    heard += [
        wire.SpeakerNote(name=f"Guest {n}", note="talks about noodles at length " * 8) for n in range(1, speakers)
    ]
    notes = wire.MemoryUpdate(seq=seq, state=wire.DialogueState(topic=topic, speakers=heard))
    await arbiter.service.release(lounge, persona, claimed.claim.claim_id, memory=notes)


async def test_memory_shows_each_personas_notes_and_reset_forgets_them(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    await arbiter.service.register_persona("hana", "Hana")
    empty = await run(world, world.mod, "memory")
    await _noted(arbiter, lounge, "hana", "dinner")
    await _noted(arbiter, lounge, "kai", "dessert")

    shown = await run(world, world.mod, "memory")
    one = await run(world, world.mod, "memory", {"persona": "kai"})
    reset = await run(world, world.mod, "memory", {"persona": "kai", "reset": True})
    after = await run(world, world.mod, "memory")
    unknown = await run(world, world.mod, "memory", {"persona": "nobody", "reset": True})

    assert empty.ephemeral and "No persona has notes on this channel yet" in (empty.content or "")
    text = shown.content or ""
    assert shown.ephemeral
    assert "**Hana** (up to message 1)" in text and "- topic: dinner" in text
    assert "**kai** (up to message 2)" in text and "- topic: dessert" in text
    assert "- Bob: wants ramen" in text
    assert "dinner" not in (one.content or "") and "dessert" in (one.content or "")
    assert reset.content == "Forgot the notes of kai."
    assert "dessert" not in (after.content or "") and "dinner" in (after.content or "")
    assert (unknown.content or "").startswith("No persona 'nobody' here")
    assert [m.persona for m in (await arbiter.service.memories(lounge)).memories] == ["hana"]


async def test_memory_in_a_long_conversation_fits_one_discord_message(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    for persona in ("hana", "kai", "mio"):
        await _noted(arbiter, lounge, persona, "noodles", speakers=5)

    text = (await run(world, world.mod, "memory")).content or ""

    assert len(text) <= 2000
    assert text.endswith("name one persona with `persona:`)")


# --- who may use the commands -----------------------------------------------------------------------------


def test_the_commands_are_registered_for_the_guild_with_a_moderators_default(world: World) -> None:
    [group] = world.fake.registered(world.arbiter, world.guild)

    assert group["name"] == "aizuchi"
    assert group["default_member_permissions"] == str(discord.Permissions(manage_channels=True).value)
    assert group.get("contexts") in (None, [0])  # server channels only, no DMs
    subcommands = sorted(option["name"] for option in group["options"])
    assert subcommands == sorted(
        [
            "status",
            "enable",
            "disable",
            "pause",
            "resume",
            "capacity",
            "recovery",
            "tier",
            "idle-cap",
            "budget",
            "topic",
            "persona",
            "memory",
            "clear-history",
        ]
    )
    assert world.fake.registered(world.arbiter) == []  # nothing global: guild commands show up at once


# Each number option and the setting it sets: Discord's client holds it to the bounds the setting is declared with.
BOUNDED = {
    ("capacity", "value"): "capacity",
    ("recovery", "seconds"): "recovery_s",
    ("tier", "cost"): "cost",
    ("tier", "length"): "max_length",
    ("idle-cap", "turns"): "idle_cap",
    ("budget", "tokens"): "daily_token_budget",
}


def test_each_number_is_registered_with_its_settings_declared_bounds(world: World) -> None:
    [group] = world.fake.registered(world.arbiter, world.guild)
    options = {(sub["name"], option["name"]): option for sub in group["options"] for option in sub.get("options", [])}

    numbers = {key: (o.get("min_value"), o.get("max_value")) for key, o in options.items() if o["type"] in (4, 10)}

    assert numbers == {key: (SETTING_BOUNDS[name].low, SETTING_BOUNDS[name].high) for key, name in BOUNDED.items()}
    [topic] = [declared for declared in SETTINGS if declared.name == "topic"]
    assert options["topic", "text"]["max_length"] == topic.setting.longest


@pytest.mark.parametrize("who", ["mod", "deckhand"])
async def test_a_moderator_by_permission_or_by_role_is_allowed(
    arbiter: Arbiter, world: World, lounge: str, who: str
) -> None:
    # The crew role grants no permission: Discord's client would hide the command unless an admin opened it.
    result = await run(world, getattr(world, who), "pause", enforce_default_permissions=False)

    assert (await arbiter.service.settings(lounge)).paused
    assert result.ephemeral and result.content is not None and result.content.startswith("Paused")


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("pause", {}),
        ("capacity", {"value": 10}),
        ("topic", {"text": "spam"}),
        ("persona", {"persona": "kai", "action": "mute"}),
        ("clear-history", {"confirm": "lounge"}),
        ("disable", {}),
        ("status", {}),
    ],
)
async def test_a_plain_member_is_refused_and_nothing_changes(
    arbiter: Arbiter, world: World, lounge: str, command: str, options: dict[str, Any]
) -> None:
    await world.fake.human_says(world.lounge, world.member, "I was here")
    await _recorded(arbiter, lounge, 1)
    before = await settings_of(arbiter, world)

    # As if a server admin had opened /aizuchi to everyone: the bot's own check must still refuse.
    result = await run(world, world.member, command, options, enforce_default_permissions=False)

    assert result.ephemeral
    assert result.content == "Only moderators can use /aizuchi here: it needs Manage Channels or the aizuchi crew role."
    assert await settings_of(arbiter, world) == before
    assert len((await arbiter.service.history(lounge)).messages) == 1


async def test_discords_client_hides_the_commands_from_plain_members(world: World, lounge: str) -> None:
    with pytest.raises(InvalidInvocation, match="default member permissions"):
        await run(world, world.member, "pause")


async def test_without_a_moderator_role_only_manage_channels_counts(
    arbiter: Arbiter, world: World, lounge: str, bot: ArbiterBot
) -> None:
    await bot.close()  # this test's arbiter bot is configured without a moderator role
    plain = arbiter_bot(arbiter, world, moderator_role=None)
    async with running(plain, world.arbiter.token):
        refused = await run(world, world.deckhand, "pause", enforce_default_permissions=False)
        allowed = await run(world, world.mod, "resume")

    assert refused.content == "Only moderators can use /aizuchi here: it needs Manage Channels."
    assert allowed.content == "Resumed."
    assert not (await arbiter.service.settings(lounge)).paused


# --- invalid values -----------------------------------------------------------------------------------------


def no_error_logged(caplog: pytest.LogCaptureFixture) -> bool:
    """Bad input is the moderator's to fix, not a bug: nothing at ERROR, no traceback."""
    return not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize(
    ("command", "options", "says"),
    [
        pytest.param("capacity", {"value": 70}, "long costs 80, more than the capacity 70", id="capacity-below-a-tier"),
        pytest.param(
            "tier", {"tier": "remark", "cost": 2}, "remark must cost at least as much as aizuchi", id="tier-order"
        ),
        pytest.param("tier", {"tier": "long"}, "Give a cost, a length or both.", id="tier-without-values"),
        pytest.param("persona", {"persona": "zed", "action": "mute"}, "No persona 'zed' here", id="unknown-persona"),
    ],
)
async def test_a_value_the_arbiter_refuses_is_refused_and_nothing_changes(
    *,
    arbiter: Arbiter,
    world: World,
    lounge: str,
    command: str,
    options: dict[str, Any],
    says: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = await settings_of(arbiter, world)

    result = await run(world, world.mod, command, options)

    assert result.ephemeral
    assert result.content is not None and says in result.content
    assert await settings_of(arbiter, world) == before
    assert no_error_logged(caplog)


WHOLE_CAPACITY = "value must be a whole number from 1 to 1,000,000"
SECONDS = "seconds must be a number from 0 to 3,600"
TIERS = "tier must be one of aizuchi, remark, long"


@pytest.mark.parametrize(
    ("command", "options", "reply"),
    [
        # Outside the choices.
        pytest.param("tier", {"tier": "huge", "cost": 70}, f"{TIERS} (got 'huge')", id="tier-choice"),
        pytest.param("recovery", {"seconds": 3, "tier": "xyz"}, f"{TIERS} (got 'xyz')", id="recovery-tier-choice"),
        pytest.param(
            "persona",
            {"persona": "kai", "action": "explode"},
            "action must be one of enable, disable, mute, unmute (got 'explode')",
            id="persona-action-choice",
        ),
        # Outside the range.
        pytest.param("capacity", {"value": -5}, f"{WHOLE_CAPACITY} (got -5)", id="capacity-negative"),
        pytest.param("capacity", {"value": 0}, f"{WHOLE_CAPACITY} (got 0)", id="capacity-zero"),
        pytest.param("capacity", {"value": 10**12}, f"{WHOLE_CAPACITY} (got 1000000000000)", id="capacity-huge"),
        pytest.param("recovery", {"seconds": -1}, f"{SECONDS} (got -1)", id="recovery-negative"),
        pytest.param("recovery", {"seconds": 4000.5, "tier": "remark"}, f"{SECONDS} (got 4000.5)", id="recovery-long"),
        pytest.param(
            "tier",
            {"tier": "remark", "cost": 0},
            "cost must be a whole number from 1 to 1,000,000 (got 0)",
            id="tier-cost-zero",
        ),
        pytest.param(
            "tier",
            {"tier": "long", "length": 5000},
            "length must be a whole number from 1 to 2,000 (got 5000)",
            id="tier-length-too-long",
        ),
        pytest.param(
            "idle-cap", {"turns": 0}, "turns must be a whole number from 1 to 1,000 (got 0)", id="idle-cap-zero"
        ),
        pytest.param(
            "budget",
            {"tokens": -5},
            "tokens must be a whole number from 0 to 10,000,000,000 (got -5)",
            id="budget-negative",
        ),
        pytest.param(
            "topic", {"text": "x" * 301}, f"text must be at most 300 characters long (got '{'x' * 38}…)", id="topic"
        ),
        # Not a finite number.
        pytest.param("recovery", {"seconds": float("nan")}, f"{SECONDS} (got nan)", id="recovery-nan"),
        pytest.param("recovery", {"seconds": float("inf")}, f"{SECONDS} (got inf)", id="recovery-inf"),
        pytest.param("recovery", {"seconds": "nan"}, f"{SECONDS} (got 'nan')", id="recovery-nan-as-text"),
        pytest.param("recovery", {"seconds": "-inf"}, f"{SECONDS} (got '-inf')", id="recovery-inf-as-text"),
        # Of the wrong type.
        pytest.param("capacity", {"value": "150"}, f"{WHOLE_CAPACITY} (got '150')", id="integer-as-text"),
        pytest.param("capacity", {"value": "lots"}, f"{WHOLE_CAPACITY} (got 'lots')", id="integer-as-a-word"),
        pytest.param("capacity", {"value": 150.5}, f"{WHOLE_CAPACITY} (got 150.5)", id="integer-as-a-fraction"),
        pytest.param("capacity", {"value": True}, f"{WHOLE_CAPACITY} (got True)", id="integer-as-a-boolean"),
        pytest.param("recovery", {"seconds": "lots"}, f"{SECONDS} (got 'lots')", id="number-as-a-word"),
        pytest.param("tier", {"tier": 1, "cost": 70}, f"{TIERS} (got 1)", id="choice-as-a-number"),
        pytest.param("topic", {"text": 42}, "text must be at most 300 characters long (got 42)", id="text-as-number"),
        pytest.param("memory", {"reset": "yes"}, "reset must be true or false (got 'yes')", id="boolean-as-text"),
        # Not the command's options.
        pytest.param(
            "tier",
            {"tier": "remark", "price": 5},
            "/aizuchi tier has no option 'price' (it takes tier, cost, length)",
            id="unknown-option",
        ),
        pytest.param("capacity", {}, "value is required: a whole number from 1 to 1,000,000", id="missing-option"),
    ],
)
async def test_a_value_the_registration_does_not_allow_gets_one_clear_reply_and_changes_nothing(
    *,
    arbiter: Arbiter,
    world: World,
    lounge: str,
    command: str,
    options: dict[str, Any],
    reply: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await arbiter.service.register_persona("kai", "kai")
    await _noted(arbiter, lounge, "kai", "dinner")
    before = await settings_of(arbiter, world), (await arbiter.service.memories(lounge)).memories

    # validate=False: what a server that does not enforce the registration (or an outdated client) lets through.
    result = await run(world, world.mod, command, options, validate=False)

    assert result.ephemeral
    assert result.content == f"Not changed: {reply}."
    assert (await settings_of(arbiter, world), (await arbiter.service.memories(lounge)).memories) == before
    assert no_error_logged(caplog)


async def test_a_subcommand_the_arbiter_does_not_have_gets_one_clear_reply(
    arbiter: Arbiter, world: World, lounge: str, caplog: pytest.LogCaptureFixture
) -> None:
    before = await settings_of(arbiter, world)

    result = await run(world, world.mod, "explode", {"loudly": True}, validate=False)

    assert result.ephemeral
    assert result.content == "Not changed: that is not one of the /aizuchi commands of this arbiter."
    assert await settings_of(arbiter, world) == before
    assert no_error_logged(caplog)


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("status", {}),
        ("disable", {}),
        ("pause", {}),
        ("resume", {}),
        ("capacity", {"value": 120}),
        ("recovery", {"seconds": 2}),
        ("tier", {"tier": "remark", "cost": 40}),
        ("idle-cap", {"turns": 4}),
        ("budget", {"tokens": 1000}),
        ("topic", {"text": "tea"}),
        ("persona", {"persona": "kai", "action": "mute"}),
        ("memory", {}),
        ("memory", {"reset": True}),
        ("clear-history", {"confirm": "lounge"}),
    ],
)
async def test_every_command_in_a_channel_without_the_fleet_says_how_to_enable_it(
    arbiter: Arbiter, world: World, command: str, options: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    result = await run(world, world.mod, command, options)

    assert result.ephemeral and result.content == NOT_SET_UP
    assert (await arbiter.service.channels()).channels == []
    assert no_error_logged(caplog)


async def test_the_persona_option_suggests_matching_personas(arbiter: Arbiter, world: World, lounge: str) -> None:
    await arbiter.service.register_persona("kai", "Kai", ["Kaito"])

    by_id = await world.fake.autocomplete(
        world.mod, world.lounge, "aizuchi persona", {"persona": "ka"}, focused="persona"
    )
    by_name = await world.fake.autocomplete(
        world.mod, world.lounge, "aizuchi persona", {"persona": "MI"}, focused="persona"
    )
    everyone = await world.fake.autocomplete(
        world.mod, world.lounge, "aizuchi persona", {"persona": ""}, focused="persona"
    )

    assert by_id == [{"name": "Kai (kai)", "value": "kai"}]
    assert by_name == [{"name": "mio (mio)", "value": "mio"}]
    assert [choice["value"] for choice in everyone] == ["hana", "kai", "mio"]


async def test_the_commands_answers_reach_no_one_else(world: World, lounge: str) -> None:
    results = [await run(world, world.mod, command) for command in ("status", "pause", "resume")]

    assert all(result.ephemeral for result in results)
    assert world.lounge.messages == []  # nothing posted in the channel for everyone
    assert not any(re.search(r"<@|@everyone|@here", result.content or "") for result in results)


@pytest.mark.on_sqlite  # a refusal of the database itself
async def test_a_refusal_of_the_database_is_said_with_its_message(
    arbiter: Arbiter, world: World, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A real refusal, from the database itself (as a full disk would): `enable` catches nothing of the service's.
    with contextlib.closing(sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), timeout=5)) as conn:
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON channels BEGIN SELECT RAISE(ABORT, 'disk on fire'); END")
        conn.commit()

    result = await run(world, world.mod, "enable")

    assert result.ephemeral
    assert result.content == "Not changed: database error: IntegrityError"
    assert (await arbiter.service.channels()).channels == []
    # The storage layer reports the database's failure; the command adds no traceback of its own.
    assert not [r for r in caplog.records if r.name.startswith("arbiter.discord_bot") and r.levelno >= logging.ERROR]


async def test_a_command_with_a_bug_gets_an_apology_and_one_traceback_in_the_log(
    world: World, lounge: str, bot: ArbiterBot, caplog: pytest.LogCaptureFixture
) -> None:
    @app_commands.command(name="broken", description="A command with a bug")
    async def broken(interaction: discord.Interaction) -> None:
        raise RuntimeError("a bug")

    guild = discord.Object(world.guild.id)
    bot.tree.add_command(broken, guild=guild)
    await bot.tree.sync(guild=guild)

    result = await world.fake.invoke(world.mod, world.lounge, "broken")

    assert result.ephemeral
    assert result.content == "Something went wrong on the arbiter's side; nothing was changed. Try again in a moment."
    [logged] = [record for record in caplog.records if record.exc_info]
    assert logged.message == "slash command failed" and logged.levelno == logging.ERROR


async def test_an_answer_discord_did_not_take_does_not_claim_nothing_changed(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    world.fake.fail_next("POST", "/interactions/{interaction_id}/{token}/callback", 404)

    result = await run(world, world.mod, "pause")

    # The pause was made before the answer failed: the second answer must not say that nothing changed.
    assert (await arbiter.service.settings(lounge)).paused
    assert result.ephemeral
    assert (
        result.content == "Discord did not take my answer just now; `/aizuchi status` shows whether anything changed."
    )


async def test_an_error_answer_discord_does_not_take_either_is_logged_not_left_in_a_task(
    arbiter: Arbiter, world: World, lounge: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Both the answer and the apology fail (the interaction expired): the error handler must not raise in turn,
    # or discord.py's dispatch task dies with an exception nobody retrieves.
    world.fake.fail_next("POST", "/interactions/{interaction_id}/{token}/callback", 404, times=2)

    with pytest.raises(InteractionNotAnswered):
        await run(world, world.mod, "pause", within=1.0)
    gc.collect()  # a task that died with its exception unread reports it when it is collected
    await asyncio.sleep(0)

    assert (await arbiter.service.settings(lounge)).paused
    assert any(
        r.getMessage().startswith("could not tell a moderator that /aizuchi pause failed") for r in caplog.records
    )
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
