"""``stay_connected``: a discord.py client against the local Discord, kept on it through what Discord means to be
retried, and ended with the reason by what it does not - nor by a server on which every new session fails before it
is ready (after a bounded number of tries, backing off between them: the readiness watch, tested pure first)."""

from __future__ import annotations

import asyncio
import logging
import random
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

# Imported before discord.py is, so that discord.py's audioop import happens with its warning silenced.
from tests.support.fake_discord import FAST_READY, FakeDiscord  # isort: skip

import discord

from aizuchi.connection import Account, Backoff, stay_connected
from aizuchi.errors import FleetStopped
from aizuchi.readiness import Cause, Kind, ReadinessWatch, Verdict, give_up_message, unreadable
from aizuchi.settings import DiscordReconnects
from tests.support.clock import FakeClock
from tests.support.eventually import eventually

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.support.fake_discord import FakeBot, FakeChannel

ACCOUNT = Account("the test bot", "TEST_DISCORD_TOKEN")


def client() -> discord.Client:
    return discord.Client(intents=discord.Intents.none() | discord.Intents(guilds=True), guild_ready_timeout=FAST_READY)


async def connected(bot: discord.Client, token: str) -> asyncio.Task[None]:
    quick = Backoff(first_s=0.05, max_s=0.2)
    task = asyncio.create_task(stay_connected(bot, token, ACCOUNT, backoff=quick, rng=random.Random(1)))
    # Not wait_until_ready(): it may only be called once the client has logged in.
    await eventually(bot.is_ready, what="the client is ready")
    return task


async def test_discord_failing_at_login_is_tried_again_on_a_fresh_session(fake: FakeDiscord) -> None:
    account = fake.add_bot("tester")
    fake.fail_next("GET", "/users/@me", 503, times=2)  # discord.py itself does not retry a 503
    bot = client()

    task = await connected(bot, account.token)
    await bot.close()
    await asyncio.wait_for(task, 5)

    assert len(fake.requests_to("GET", "/users/@me")) == 3
    assert task.result() is None  # closed: it returns, nothing to report


async def test_a_refused_token_ends_it_naming_the_variable(fake: FakeDiscord) -> None:
    bot = client()

    with pytest.raises(FleetStopped) as stopped:
        await asyncio.wait_for(stay_connected(bot, "no-such-token", ACCOUNT), 5)
    await bot.close()

    assert stopped.value.message.startswith("Discord refused the test bot's token (TEST_DISCORD_TOKEN)")


async def test_a_4xx_while_logging_in_is_final_and_says_what_discord_answered(fake: FakeDiscord) -> None:
    account = fake.add_bot("tester")
    fake.fail_next("GET", "/users/@me", 403)
    bot = client()

    with pytest.raises(FleetStopped) as stopped:
        await asyncio.wait_for(stay_connected(bot, account.token, ACCOUNT), 5)
    await bot.close()

    assert stopped.value.message == "the test bot could not start on Discord: Discord answered 403 Missing Permissions"


async def test_an_event_it_cannot_parse_costs_a_new_session_and_the_old_socket_is_closed(fake: FakeDiscord) -> None:
    account = fake.add_bot("tester")
    guild = fake.add_guild("g")
    channel = fake.add_channel(guild, "c")
    fake.join(account, guild)
    bot = client()
    task = await connected(bot, account.token)
    sessions = len(fake.sessions)

    payload = channel.payload()
    del payload["position"]
    await fake.send_raw(account, "CHANNEL_UPDATE", payload)
    await fake.wait_until(lambda: len(fake.sessions) > sessions and fake.connected(account))
    live = [s for s in fake.sessions if s.connection is not None and not s.connection.closed]
    await bot.close()
    await asyncio.wait_for(task, 5)

    assert len(live) == 1  # the socket the failure left open was closed, not leaked
    assert bot.get_channel(channel.id) is not None  # and the new session's READY filled the cache again


# --- bounded reconnects: the readiness watch, pure --------------------------------------------------------

READY_LACKS_SHARD = Cause("READY", "lacked 'shard' (KeyError)", Kind.UNREADABLE)
CLOSED_4000 = Cause("session", "was closed by the server with code 4000 before it was ready", Kind.CLOSED)


@dataclass
class Tries:
    """Sessions as the watch sees them, on a fake clock with seeded chance: each IDENTIFY after the back-off the
    last failure was given, READY read, then the session ends (or is ready) half a second later."""

    watch: ReadinessWatch
    clock: FakeClock = field(default_factory=FakeClock)
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    owed_s: float = 0.0

    def fail(self, shard: int | None = 0, cause: Cause = CLOSED_4000) -> Verdict | None:
        self.clock.advance(self.owed_s)
        self.watch.identifying(shard, self.clock())
        self.watch.connected(shard)
        self.clock.advance(0.5)
        verdict = self.watch.failed(shard, self.clock(), cause, self.rng)
        self.owed_s = 0.0 if verdict is None else verdict.delay_s
        return verdict

    def ready(self, shard: int | None = 0) -> None:
        self.clock.advance(self.owed_s)
        self.watch.identifying(shard, self.clock())
        self.watch.connected(shard)
        self.clock.advance(0.5)
        self.watch.ready(shard)
        self.owed_s = 0.0


def retried(verdict: Verdict | None) -> bool:
    return verdict is not None and not verdict.give_up


def gave_up(verdict: Verdict | None) -> bool:
    return verdict is not None and verdict.give_up


def test_the_watch_backs_off_exponentially_and_gives_up_after_its_tries() -> None:
    tries = Tries(ReadinessWatch(tries=5, within_s=120.0, backoff_s=1.0))

    verdicts = [tries.fail() for _ in range(5)]

    assert all(v is not None for v in verdicts)
    *again, last = [v for v in verdicts if v is not None]
    assert [v.give_up for v in again] == [False] * 4
    assert [v.tries for v in again] == [1, 2, 3, 4]
    for verdict, nominal in zip(again, (1.0, 2.0, 4.0, 8.0), strict=True):
        assert 0.8 * nominal <= verdict.delay_s <= 1.2 * nominal  # jittered, so bots cut off together spread out
    assert last.give_up
    assert (last.tries, last.delay_s, last.causes) == (5, 0.0, (CLOSED_4000,) * 5)
    # From the first IDENTIFY: five sessions of half a second, and the four back-offs between them.
    assert last.elapsed_s == pytest.approx(5 * 0.5 + sum(v.delay_s for v in again))


def test_the_back_off_stops_doubling_at_a_minute() -> None:
    tries = Tries(ReadinessWatch(tries=100, within_s=86_400.0, backoff_s=1.0), rng=random.Random(3))

    delays = [v.delay_s for v in (tries.fail() for _ in range(12)) if v is not None]

    assert max(delays) <= 1.2 * 60.0
    assert delays[-1] >= 0.8 * 60.0


def test_the_watch_gives_up_once_the_time_is_up_however_few_the_tries() -> None:
    tries = Tries(ReadinessWatch(tries=5, within_s=10.0, backoff_s=4.0))

    first, second, third = (tries.fail() for _ in range(3))

    assert retried(first)
    assert retried(second)  # 0.5 + ~4 + 0.5 s
    assert gave_up(third)  # and ~8 s more: past 10 s, at its third try
    assert third is not None and third.tries == 3
    assert third.elapsed_s >= 10.0


def test_becoming_ready_or_resuming_starts_the_count_over() -> None:
    tries = Tries(ReadinessWatch(tries=2, within_s=120.0))

    assert retried(tries.fail())
    tries.ready()
    assert retried(tries.fail())  # the first of a new count
    tries.watch.resumed(0)
    assert retried(tries.fail())
    verdict = tries.fail()

    assert gave_up(verdict)
    assert verdict is not None and verdict.tries == 2


def test_a_session_lost_after_it_was_ready_is_not_a_failed_try() -> None:
    """A network drop, or one event discord.py could not read: it reconnects, nothing is counted."""
    tries = Tries(ReadinessWatch(tries=1, within_s=120.0))
    tries.ready()

    assert tries.watch.failed(0, tries.clock(), READY_LACKS_SHARD, tries.rng) is None


def test_a_failure_with_no_identify_under_way_is_not_a_try() -> None:
    """The RESUME after a failed session refused, or a server that cannot be reached: discord.py retries those by
    itself, and they spend no session start."""
    tries = Tries(ReadinessWatch(tries=2, within_s=120.0))
    assert tries.watch.failed(0, tries.clock(), CLOSED_4000, tries.rng) is None  # before any IDENTIFY

    assert retried(tries.fail())
    assert tries.watch.failed(0, tries.clock(), CLOSED_4000, tries.rng) is None  # that session's RESUME, refused
    verdict = tries.fail()

    assert gave_up(verdict)
    assert verdict is not None and verdict.tries == 2


def test_a_late_ready_for_a_session_that_already_failed_does_not_count() -> None:
    """discord.py announces a shard ready on a timer after its READY, even when the socket closed meanwhile."""
    tries = Tries(ReadinessWatch(tries=2, within_s=120.0))
    assert retried(tries.fail())
    tries.watch.ready(0)  # the first session's timer
    tries.watch.identifying(0, tries.clock())
    tries.watch.ready(0)  # still the first session's: the second has not read its READY yet
    tries.watch.connected(0)

    assert gave_up(tries.watch.failed(0, tries.clock(), CLOSED_4000, tries.rng))


def test_each_shard_counts_its_own_failed_sessions() -> None:
    tries = Tries(ReadinessWatch(tries=2, within_s=120.0))
    assert retried(tries.fail(shard=0))
    tries.ready(shard=1)  # another shard being ready says nothing about shard 0

    assert gave_up(tries.fail(shard=0))
    assert retried(tries.fail(shard=1))  # counted from its own start
    assert tries.watch.identifying_shards() == []


@pytest.mark.parametrize(
    ("causes", "server", "says"),
    [
        (
            (READY_LACKS_SHARD,) * 5,
            "127.0.0.1:3001",
            "the arbiter's bot could not get a working session from the server at 127.0.0.1:3001 after 5 tries in"
            " 41 s: every READY lacked 'shard' (KeyError) - is this a Discord-compatible server discord.py 2.7.1"
            " supports?",
        ),
        (
            (READY_LACKS_SHARD, CLOSED_4000),
            None,
            "the arbiter's bot could not get a working session from Discord after 2 tries in 41 s: the last session"
            " was closed by the server with code 4000 before it was ready - Discord may be having trouble"
            " (https://discordstatus.com): start it again later",
        ),
        (
            (READY_LACKS_SHARD,),
            None,
            "the arbiter's bot could not get a working session from Discord after 1 try in 41 s: its READY lacked"
            " 'shard' (KeyError) - discord.py 2.7.1 cannot read what Discord sends now: update aizuchi",
        ),
    ],
    ids=["every-time-elsewhere", "mixed-on-discord", "one-try"],
)
def test_the_line_names_the_bot_the_tries_and_what_failed(
    causes: tuple[Cause, ...], server: str | None, says: str
) -> None:
    verdict = Verdict(give_up=True, tries=len(causes), elapsed_s=41.2, delay_s=0.0, causes=causes)

    assert give_up_message("the arbiter's bot", verdict, server=server, library="2.7.1") == says


def test_a_short_time_is_said_to_the_tenth_of_a_second() -> None:
    verdict = Verdict(give_up=True, tries=3, elapsed_s=0.42, delay_s=0.0, causes=(CLOSED_4000,) * 3)

    assert " after 3 tries in 0.4 s: every session was closed" in give_up_message(
        "rin's bot", verdict, server="127.0.0.1:9", library="2.7.1"
    )


def test_a_missing_field_is_said_as_such_and_any_other_error_as_it_is() -> None:
    assert unreadable("READY", KeyError("shard")) == READY_LACKS_SHARD
    assert unreadable("GUILD_CREATE", ValueError("bad id")) == Cause(
        "GUILD_CREATE", "could not be read by discord.py (ValueError: bad id)", Kind.UNREADABLE
    )


# --- bounded reconnects: real discord.py clients against the local Discord --------------------------------

QUICKLY = DiscordReconnects(tries=3, within_s=20.0, backoff_s=0.02, _env_file=None)
ENDS = r"the test bot could not get a working session from the server at 127\.0\.0\.1:\d+ after 3 tries in \d+\.\d s: "


class Sharded(discord.AutoShardedClient):
    """The fleet's kind of client. discord.py waits 5 s before each IDENTIFY but the first (Discord's identify rate
    limit), which the local Discord does not have; ``guild_ready_timeout`` is long enough for a session closed right
    after READY to be closed before discord.py would call it ready."""

    def __init__(self) -> None:
        super().__init__(intents=discord.Intents.none() | discord.Intents(guilds=True), guild_ready_timeout=0.5)
        self.shards_ready: list[int] = []

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        return None

    async def on_shard_ready(self, shard_id: int) -> None:
        self.shards_ready.append(shard_id)


class Plain(discord.Client):
    def __init__(self) -> None:
        super().__init__(intents=discord.Intents.none() | discord.Intents(guilds=True), guild_ready_timeout=0.5)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        return None


def a_bot_in_a_server(fake: FakeDiscord) -> tuple[FakeBot, FakeChannel]:
    account = fake.add_bot("tester")
    guild = fake.add_guild("g")
    channel = fake.add_channel(guild, "c")
    fake.join(account, guild)
    return account, channel


async def stopped_with(bot: discord.Client, token: str) -> str:
    with pytest.raises(FleetStopped) as stopped:
        await asyncio.wait_for(stay_connected(bot, token, ACCOUNT, reconnects=QUICKLY, rng=random.Random(1)), 10)
    assert bot.is_closed()  # closed by giving up: nothing goes on trying behind the line
    return stopped.value.message


@pytest.mark.parametrize(
    ("client", "field", "says"),
    [
        (Sharded, "shard", "every READY lacked 'shard' (KeyError) - is this a Discord-compatible server discord.py"),
        (Plain, "user", "every READY lacked 'user' (KeyError) - is this a Discord-compatible server discord.py"),
    ],
    ids=["sharded", "plain"],
)
async def test_a_ready_it_cannot_read_on_every_session_ends_it_with_the_reason(
    fake: FakeDiscord, caplog: pytest.LogCaptureFixture, client: Callable[[], discord.Client], field: str, says: str
) -> None:
    account, _ = a_bot_in_a_server(fake)
    fake.ready_without(account, field)
    caplog.set_level(logging.WARNING, logger="aizuchi.connection")

    message = await stopped_with(client(), account.token)

    assert re.fullmatch(f"{ENDS}{re.escape(says)} {re.escape(discord.__version__)} supports\\?", message), message
    assert account.identified == 3
    assert not fake.connected(account)
    # One warning for each try but the last, which the line tells of.
    warned = [r for r in caplog.records if r.name == "aizuchi.connection" and r.levelno == logging.WARNING]
    assert len(warned) == 2


@pytest.mark.parametrize("code", [4000, 1011])
async def test_every_session_closed_before_it_is_ready_ends_it_with_the_code(fake: FakeDiscord, code: int) -> None:
    """discord.py retries these close codes by itself, forever: RESUME, refused, IDENTIFY, closed again."""
    account, _ = a_bot_in_a_server(fake)
    fake.close_after_ready(account, code)

    message = await stopped_with(Sharded(), account.token)

    assert re.fullmatch(
        f"{ENDS}every session was closed by the server with code {code} before it was ready - does the server accept"
        " this bot's sessions\\? Its log should say why",
        message,
    ), message
    assert account.identified == 3


async def test_every_identify_refused_ends_it_with_the_reason(fake: FakeDiscord) -> None:
    account, _ = a_bot_in_a_server(fake)
    fake.refuse_identify(account)

    message = await stopped_with(Sharded(), account.token)

    assert re.fullmatch(
        f"{ENDS}every session was refused by the server \\(INVALID_SESSION\\) - does the server accept this bot's"
        " sessions\\? Its log should say why",
        message,
    ), message


async def test_it_gives_up_when_the_time_is_up(fake: FakeDiscord) -> None:
    account, _ = a_bot_in_a_server(fake)
    fake.refuse_identify(account)
    slow = DiscordReconnects(tries=100, within_s=1.0, backoff_s=0.6, _env_file=None)
    bot = Sharded()

    with pytest.raises(FleetStopped) as stopped:
        await asyncio.wait_for(stay_connected(bot, account.token, ACCOUNT, reconnects=slow, rng=random.Random(1)), 10)

    # Tries at about 0, 0.5 and 1.9 s (the back-offs of this seed): the third fails past 1 s, long before 100 tries.
    # On a loaded machine the second may already end past 1 s, so two tries are as right as three.
    given_up = re.match(
        r"the test bot could not get a working session from .* after (\d+) tries in (\d+\.\d) s", stopped.value.message
    )
    assert given_up, stopped.value.message
    assert int(given_up[1]) in (2, 3)
    assert float(given_up[2]) >= 1.0


async def test_one_event_it_cannot_read_after_it_was_ready_only_costs_a_new_session(fake: FakeDiscord) -> None:
    account, channel = a_bot_in_a_server(fake)
    once = DiscordReconnects(tries=1, within_s=20.0, backoff_s=0.02, _env_file=None)
    bot = Sharded()
    task = asyncio.create_task(stay_connected(bot, account.token, ACCOUNT, reconnects=once, rng=random.Random(1)))
    await eventually(lambda: bot.shards_ready == [0], what="the client is ready")

    payload = channel.payload()
    del payload["position"]
    await fake.send_raw(account, "CHANNEL_UPDATE", payload)
    await eventually(lambda: bot.shards_ready == [0, 0], what="ready on a new session")

    assert account.identified == 2
    assert not task.done()  # even with tries=1: a session lost after it was ready is not a failed try
    await bot.close()
    await asyncio.wait_for(task, 5)
    assert task.result() is None


async def test_a_session_that_becomes_ready_again_starts_the_count_over(fake: FakeDiscord) -> None:
    account, _ = a_bot_in_a_server(fake)
    # Two failed sessions in a row end it; the back-off leaves time to mend the server between the two.
    twice = DiscordReconnects(tries=2, within_s=20.0, backoff_s=0.5, _env_file=None)
    bot = Sharded()
    fake.ready_without(account, "shard")
    task = asyncio.create_task(stay_connected(bot, account.token, ACCOUNT, reconnects=twice, rng=random.Random(1)))

    async def one_failed_session_then_a_good_one(round_: int) -> None:
        await fake.wait_until(lambda: account.identified == 2 * round_ - 1)
        fake.mend(account)
        await eventually(lambda: len(bot.shards_ready) == round_, what="ready")

    for round_ in (1, 2):
        await one_failed_session_then_a_good_one(round_)
        fake.ready_without(account, "shard")
        await fake.invalidate(account)  # the server ends the good one; not resumable: discord.py IDENTIFYs again

    with pytest.raises(FleetStopped, match="after 2 tries"):
        await asyncio.wait_for(task, 10)
    assert account.identified == 6  # 4 failed sessions in all, never 2 in a row until the last two
