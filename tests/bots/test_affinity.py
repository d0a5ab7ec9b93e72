"""Channel affinity over several arbiter processes: the URL list as the setting gives it, the channel's process
(stable, even), failing over and coming back; then two real arbiter processes on one PostgreSQL database, a
client of both: each channel's calls reach its process, and when one process stops its channels move to the
other, the multiplexed stream reconnects there, and no message is missed."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

import aiohttp
import pytest
from pydantic import ValidationError

from arbiter import contract as wire
from arbiter.contract import Tier
from bots.affinity import Affinity, ChannelShare, home, parse_arbiter_urls
from bots.arbiter_client import ArbiterClient, MultiplexedStream
from bots.settings import BotsSettings
from tests.conftest import PERSONA_TOKENS
from tests.support.arbiters import Api, arbiter_process

if TYPE_CHECKING:
    from pathlib import Path

# --- persona processes splitting the channels --------------------------------------------------------------


def test_shares_split_every_channel_between_them_each_to_one() -> None:
    channels = [f"{n}" for n in range(10**17, 10**17 + 3000)]  # Discord-like snowflakes
    shares = [ChannelShare.parse(f"{number}/3") for number in (1, 2, 3)]
    held = [[c for c in channels if share.holds(c)] for share in shares]
    assert sorted(c for part in held for c in part) == sorted(channels)  # each channel in exactly one share
    assert all(900 < len(part) < 1100 for part in held)  # and evenly
    # Share N of M holds what arbiter process N of M serves: a persona process and its arbiter see the same channels.
    assert all(home(c, 3) == 1 for c in held[1])
    assert all(ChannelShare.parse("1/1").holds(c) for c in channels[:10])


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("2", "not a share: write it as NUMBER/COUNT"),
        ("0/2", "share number in '0/2' must be 1 to 2"),
        ("3/2", "share number in '3/2' must be 1 to 2"),
        ("1/0", "count of shares in '1/0' must be 1 to 1024"),
        ("a/b", "not a share"),
    ],
)
def test_a_wrong_share_is_refused_saying_what_is_wrong(value: str, said: str) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        ChannelShare.parse(value)
    with pytest.raises(ValidationError, match=re.escape(said)):
        BotsSettings(_env_file=None, channel_share=value)  # type: ignore[call-arg]


def test_the_share_setting_reads_as_written() -> None:
    assert BotsSettings(_env_file=None, channel_share=" 2 / 3 ").channel_share == "2/3"  # type: ignore[call-arg]
    assert BotsSettings(_env_file=None).channel_share is None  # type: ignore[call-arg]


# --- the URL list ---------------------------------------------------------------------------------------------


def test_one_url_is_read_as_before() -> None:
    assert parse_arbiter_urls("http://127.0.0.1:8340") == ("http://127.0.0.1:8340",)
    assert parse_arbiter_urls(" https://arbiter.example/api/ ") == ("https://arbiter.example/api",)


def test_several_urls_are_split_on_commas() -> None:
    value = "http://10.0.0.1:8340, http://10.0.0.2:8340/ ,http://10.0.0.3:8340"
    assert parse_arbiter_urls(value) == ("http://10.0.0.1:8340", "http://10.0.0.2:8340", "http://10.0.0.3:8340")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("", "the URL is empty"),
        ("http://a:1,,http://b:2", "entry 2 of 3 is empty"),
        ("http://a:1,", "entry 2 of 2 is empty"),
        ("127.0.0.1:8340", "the URL is not an http:// or https:// URL"),
        ("http://a:1,ws://b:2", "entry 2 of 2 is not an http:// or https:// URL"),
        ("http://a:99999", "the URL is not an http:// or https:// URL with a host (and a valid port"),
        ("http://:8340", "the URL is not an http:// or https:// URL with a host"),
        ("http://a:1/?x=1", "the URL has a query or a fragment"),
        ("http://a:1,http://a:1/", "entry 2 of 2 is listed twice"),
    ],
)
def test_a_malformed_list_says_which_entry_and_why(value: str, says: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(says)):
        parse_arbiter_urls(value)


def test_the_setting_is_checked_at_load_without_repeating_the_value() -> None:
    secret = "http://user:hunter2@a:1,ftp://user:hunter2@b"
    with pytest.raises(ValidationError) as raised:
        BotsSettings(_env_file=None, arbiter_url=secret)
    assert "entry 2 of 2 is not an http:// or https:// URL" in str(raised.value)
    assert "hunter2" not in str(raised.value)
    settings = BotsSettings(_env_file=None, arbiter_url="http://a:1/, http://b:2")
    assert settings.arbiter_url == "http://a:1,http://b:2"


# --- the channel's process ----------------------------------------------------------------------------------


def test_a_channels_process_is_stable_and_the_channels_spread_evenly() -> None:
    # Fixed values: every persona process, and every version of this code, must send a channel to the same one.
    assert [home(channel, 2) for channel in ("lobby", "lounge", "1234567890123456789")] == [0, 0, 1]
    assert [home(channel, 3) for channel in ("lobby", "lounge", "1234567890123456789")] == [1, 1, 2]
    for count in (2, 3, 5):
        shares = [0] * count
        for index in range(3000):
            shares[home(f"channel-{index}", count)] += 1
        assert all(abs(share - 3000 / count) < 3000 / count * 0.1 for share in shares), shares


def test_the_order_starts_at_the_channels_process_and_goes_round() -> None:
    urls = ("http://a", "http://b", "http://c")
    affinity = Affinity(urls, own=2)
    channel = next(f"room-{index}" for index in range(100) if home(f"room-{index}", 3) == 1)
    assert affinity.order(channel) == ["http://b", "http://c", "http://a"]
    assert affinity.order(None) == ["http://c", "http://a", "http://b"]
    assert Affinity(["http://only"]).order(channel) == ["http://only"]


def test_an_unreachable_process_goes_last_until_it_is_tried_again() -> None:
    now = [100.0]
    urls = ("http://a", "http://b", "http://c")
    affinity = Affinity(urls, retry_after_s=5.0, clock=lambda: now[0])
    channel = next(f"room-{index}" for index in range(100) if home(f"room-{index}", 3) == 0)

    affinity.unreachable("http://a")
    assert affinity.order(channel) == ["http://b", "http://c", "http://a"]
    now[0] += 4.9
    assert affinity.order(channel)[0] == "http://b"
    now[0] += 0.2  # its time is up: tried first again
    assert affinity.order(channel) == ["http://a", "http://b", "http://c"]

    affinity.unreachable("http://a")
    affinity.unreachable("http://b")
    assert affinity.order(channel) == ["http://c", "http://a", "http://b"]  # all down: still every one, in turn
    affinity.reachable("http://a")  # it answered (as the last resort): first again at once
    assert affinity.order(channel) == ["http://a", "http://c", "http://b"]


# --- two real arbiter processes -----------------------------------------------------------------------------


CHANNELS = [f"room-{index}" for index in range(6)]


async def _prefix(session: aiohttp.ClientSession, url: str) -> str:
    """The claim-id prefix of the arbiter process at ``url`` (each process draws its own at start-up)."""
    alone = ArbiterClient(session, url, PERSONA_TOKENS["kai"])
    claimed = await alone.claim(CHANNELS[0], wire.ClaimRequest(tier=Tier.AIZUCHI))
    assert claimed.claim is not None
    await alone.release(CHANNELS[0], claimed.claim.claim_id)
    return claimed.claim.claim_id[:12]


async def _turn(admin: Api, client: ArbiterClient, channel: str, text: str) -> tuple[str, list[int]]:
    """A person speaks, then the persona nods (claim, speak): the claim's id (it names the process that granted
    it) and the two messages' seqs."""
    human = (await admin.say(channel, "yuki", text))["seq"]
    claimed = await client.claim(channel, wire.ClaimRequest(tier=Tier.AIZUCHI))
    assert claimed.granted and claimed.claim is not None
    spoken = await client.speak(channel, claimed.claim.claim_id, wire.SpeakRequest(text="Mm."))
    assert spoken.granted and spoken.message is not None
    return claimed.claim.claim_id, [human, spoken.message.seq]


async def _read_messages(stream: MultiplexedStream, seen: dict[str, list[int]], want: dict[str, int]) -> bool:
    """Add each message frame's seq to ``seen`` until every channel has reached ``want``; False if the stream
    ended first."""
    async for frame in stream:
        if isinstance(frame, wire.MessageEvent):
            seen[frame.channel_id].append(frame.message.seq)
        if all(seen[channel][-1:] == [last] for channel, last in want.items()):
            return True
    return False


async def _subscribe(stream: MultiplexedStream, after: dict[str, int]) -> None:
    """Follow every channel from its seq in ``after`` (the messages after it are replayed: none is missed while
    the subscription is on its way)."""
    await stream.subscribe([wire.Subscribe(channel=channel, after=seq) for channel, seq in after.items()])


@pytest.mark.postgres
async def test_each_channel_keeps_to_its_process_and_moves_when_that_one_stops(
    postgres_url: str, tmp_path: Path
) -> None:
    async with (
        arbiter_process(postgres_url, tmp_path, name="a") as a,
        arbiter_process(postgres_url, tmp_path, name="b") as b,
        aiohttp.ClientSession() as session,
    ):
        urls = [a.url, b.url]
        admin = Api(session, {}, a.url)
        for channel in CHANNELS:
            await admin.create_channel(channel, capacity=10_000)
        process_of = {channel: urls[home(channel, 2)] for channel in CHANNELS}
        assert set(process_of.values()) == set(urls)  # these names put some channels on each
        prefix = {url: await _prefix(session, url) for url in urls}
        # The stream on b, the process that will stop.
        client = ArbiterClient(session, ",".join(urls), PERSONA_TOKENS["hana"], timeout_s=5.0, own_process=1)
        seen: dict[str, list[int]] = {channel: [] for channel in CHANNELS}
        said: dict[str, list[int]] = {channel: [] for channel in CHANNELS}

        async with client.stream() as stream:
            await _subscribe(stream, {channel: 0 for channel in CHANNELS})
            for round_ in range(3):
                for channel in CHANNELS:
                    claim_id, seqs = await _turn(admin, client, channel, f"round {round_}")
                    assert claim_id.startswith(prefix[process_of[channel]]), channel
                    said[channel] += seqs
            assert await _read_messages(stream, seen, {channel: said[channel][-1] for channel in CHANNELS})

            await asyncio.to_thread(b.stop)
            # b's channels now go to a; a's stay there. Nothing is said twice or lost.
            for channel in CHANNELS:
                claim_id, seqs = await _turn(admin, client, channel, "after b stopped")
                assert claim_id.startswith(prefix[a.url]), channel
                said[channel] += seqs
            assert not await _read_messages(stream, seen, {channel: said[channel][-1] for channel in CHANNELS})

        # The stream ended with b; a new one goes to a, each channel resumed after the last message it was sent.
        async with client.stream() as stream:
            await _subscribe(stream, {channel: seen[channel][-1] for channel in CHANNELS})
            assert await _read_messages(stream, seen, {channel: said[channel][-1] for channel in CHANNELS})
        assert seen == said
        assert [m.seq for m in (await client.history(CHANNELS[0], limit=50)).messages] == said[CHANNELS[0]]
