"""What the service adds for a catch-up after a restart: messages recorded late keep the time they were said,
within bounds, and ``intake_mark`` says where reading the platform back starts. On SQLite and PostgreSQL, with
the fake clock."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from arbiter.contract import AuthorKind, Tier
from arbiter.server import open_arbiter
from arbiter.service import IntakeMark
from tests.conftest import make_settings

if TYPE_CHECKING:
    from arbiter.server import Arbiter
    from arbiter.service import ArbiterService
    from tests.conftest import OpenArbiter
    from tests.support.clock import FakeClock

CHANNEL = "1400000000000000000"


@pytest.fixture
async def service(open_test_arbiter: OpenArbiter, database_url: str) -> ArbiterService:
    arbiter: Arbiter = await open_test_arbiter(database_url)
    await arbiter.service.ensure_channel(CHANNEL)
    return arbiter.service


async def hear(service: ArbiterService, platform_id: str | None, *, at: float | None = None, text: str = "hi") -> int:
    result = await service.record_message(
        CHANNEL, author_id="u1", author_name="Yui", text=text, platform_message_id=platform_id, at=at
    )
    return result.seq


async def times(service: ArbiterService) -> list[float]:
    return [m.at for m in (await service.history(CHANNEL, limit=100)).messages]


# --- late messages ----------------------------------------------------------------------------------------------


async def test_a_late_message_keeps_its_time_within_the_history_and_now(
    service: ArbiterService, clock: FakeClock
) -> None:
    t0 = clock()
    clock.advance(100)
    await hear(service, "10", at=t0 + 10)  # said 90 s ago: kept
    await hear(service, "11", at=t0 + 5)  # said before the newest message: no earlier than it
    await hear(service, "12", at=t0 + 500)  # in the future (a clock ahead of ours): now
    await hear(service, "13")  # live: now

    assert await times(service) == [t0 + 10, t0 + 10, t0 + 100, t0 + 100]


async def test_recording_late_is_idempotent_too(service: ArbiterService, clock: FakeClock) -> None:
    first = await service.record_message(
        CHANNEL, author_id="u1", author_name="Yui", text="hi", platform_message_id="10", at=clock() - 30
    )
    again = await service.record_message(
        CHANNEL, author_id="u1", author_name="Yui", text="hi", platform_message_id="10", at=clock() - 30
    )

    assert (first.seq, first.created, again.seq, again.created) == (1, True, 1, False)


# --- where a catch-up starts --------------------------------------------------------------------------------------


async def test_the_mark_is_the_newest_recorded_snowflake_and_the_channels_creation(
    service: ArbiterService, clock: FakeClock
) -> None:
    created = clock()
    assert await service.intake_mark(CHANNEL) == IntakeMark(after=None, since=created)

    clock.advance(1)
    await hear(service, "100")
    await hear(service, "200")
    await hear(service, None)  # a message from elsewhere, with no platform id
    assert await service.intake_mark(CHANNEL) == IntakeMark(after="200", since=created)

    # A persona's nod given as an emoji reaction is linked under an id that is no message's.
    nod = await service.consume(CHANNEL, "hana", "👍", tier=Tier.AIZUCHI)
    assert nod.message is not None
    await service.link(CHANNEL, "hana", nod.message.seq, f"reaction-200-{nod.message.seq}")
    assert (await service.intake_mark(CHANNEL)).after == "200"

    # A message deleted on the platform was still said, and recorded.
    await hear(service, "300")
    await service.delete_message(CHANNEL, "300")
    assert (await service.intake_mark(CHANNEL)).after == "300"


async def test_the_mark_moves_when_the_fleet_is_enabled_again_or_the_history_cleared(
    service: ArbiterService, clock: FakeClock
) -> None:
    created = clock()
    await hear(service, "100")
    clock.advance(10)
    await service.update_settings(CHANNEL, {"topic": "films"})
    await service.update_settings(CHANNEL, {"enabled": False})
    assert (await service.intake_mark(CHANNEL)).since == created  # neither changes what may be read back

    clock.advance(10)
    await service.update_settings(CHANNEL, {"enabled": True})
    enabled = clock()
    await service.update_settings(CHANNEL, {"enabled": True})  # already on: nothing moves
    assert await service.intake_mark(CHANNEL) == IntakeMark(after="100", since=enabled)

    clock.advance(10)
    await service.clear_history(CHANNEL)
    assert await service.intake_mark(CHANNEL) == IntakeMark(after=None, since=clock())


async def test_the_mark_survives_a_restart(database_url: str, clock: FakeClock) -> None:
    settings = make_settings(database_url)
    async with open_arbiter(settings, clock=clock) as arbiter:
        await arbiter.service.ensure_channel(CHANNEL)
        await hear(arbiter.service, "100")
        clock.advance(5)
        await arbiter.service.clear_history(CHANNEL)
        await hear(arbiter.service, "200", at=clock() - 1)
        before = await arbiter.service.intake_mark(CHANNEL)

    async with open_arbiter(settings, clock=clock) as arbiter:
        after = await arbiter.service.intake_mark(CHANNEL)
        [message] = (await arbiter.service.history(CHANNEL)).messages

    assert before == after == IntakeMark(after="200", since=clock())
    assert (message.author_kind, message.at) == (AuthorKind.HUMAN, clock() - 1)


# --- the platform's order -------------------------------------------------------------------------------------------


async def order(service: ArbiterService) -> list[tuple[str, str | None]]:
    return [(m.text, m.platform_message_id) for m in (await service.history(CHANNEL, limit=100)).messages]


async def test_a_post_linked_after_a_message_said_before_it_moves_after_it(service: ArbiterService) -> None:
    await hear(service, "100", text="hi all")
    spoken = await service.consume(CHANNEL, "hana", "Hello!", tier=Tier.REMARK)
    assert spoken.message is not None and spoken.message.seq == 2
    # A person spoke while hana's post was on its way; the arbiter heard it before hana linked her post.
    await hear(service, "150", text="Hana, are you there?")

    moved = await service.link(CHANNEL, "hana", spoken.message.seq, "200")

    assert moved.seq == 4
    assert await order(service) == [("hi all", "100"), ("Hana, are you there?", "150"), ("Hello!", "200")]


async def test_a_message_heard_after_posts_the_platform_shows_after_it_goes_before_them(
    service: ArbiterService,
) -> None:
    await hear(service, "100", text="hi all")
    for text, posted in (("Hm.", "200"), ("Hello, all!", "210")):
        tier = Tier.AIZUCHI if posted == "200" else Tier.REMARK
        spoken = await service.consume(CHANNEL, "hana" if posted == "200" else "kai", text, tier=tier)
        assert spoken.message is not None
        await service.link(CHANNEL, spoken.message.author_id, spoken.message.seq, posted)
    # Said before both posts on the platform, heard after them: they move after it, in the platform's order.
    await hear(service, "150", text="anyone?")
    await hear(service, "300", text="ok")

    assert await order(service) == [
        ("hi all", "100"),
        ("anyone?", "150"),
        ("Hm.", "200"),
        ("Hello, all!", "210"),
        ("ok", "300"),
    ]
    status = await service.status(CHANNEL)
    assert (status.last_seq, status.bot_streak) == (7, 0)
