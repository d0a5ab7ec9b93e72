"""The event stream the personas of a process share (``bots.follower``), against a real arbiter: every persona in
every channel it follows hears each message once and in order - those said after it arrived, and the recent ones
before as context - however the personas come and go and however often the connection drops; and each persona
asks its own status on it.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arbiter import contract as wire
from bots.errors import ArbiterRejected
from bots.follower import StreamFollower
from tests.support.eventually import eventually

if TYPE_CHECKING:
    from tests.support.fleet import Live

RECENT = 3  # messages of context a listener asks for when it arrives


@dataclass
class Listener:
    """A persona's share of the stream in one channel, as a ``ChannelWorker`` takes it: context on arrival, then
    each message after the last it saw (the ones it saw already, coming again with another's replay, skipped)."""

    channel: str
    arrived: bool = False
    seen: list[int] = field(default_factory=list)  # every message seq it took, in order
    arrival_point: int | None = None  # the last seq it had when its replay ended
    refused: list[str] = field(default_factory=list)

    def subscription(self) -> wire.Subscribe:
        if self.arrived or self.seen:
            return wire.Subscribe(channel=self.channel, after=self.seen[-1] if self.seen else 0)
        return wire.Subscribe(channel=self.channel, recent=RECENT)

    def on_frame(self, frame: wire.ArbiterEvent) -> None:
        if isinstance(frame, wire.MessageEvent) and (not self.seen or frame.message.seq > self.seen[-1]):
            self.seen.append(frame.message.seq)
        elif isinstance(frame, wire.LevelEvent) and not self.arrived:
            self.arrived = True
            self.arrival_point = self.seen[-1] if self.seen else 0

    def on_refused(self, detail: str) -> None:
        self.refused.append(detail)


@dataclass(frozen=True)
class Step:
    kind: str  # "say" (some messages in a channel), "join" (a persona starts following a channel), "drop"
    channel: int
    persona: int
    count: int


STEPS = st.lists(
    st.builds(
        Step,
        kind=st.sampled_from(["say", "say", "join", "drop"]),
        channel=st.integers(0, 1),
        persona=st.integers(0, 2),
        count=st.integers(1, 6),
    ),
    min_size=1,
    max_size=10,
)
PERSONAS = ("aoi", "ben", "cho")
_examples = itertools.count(1)


@settings(
    max_examples=15,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=STEPS)
async def test_each_persona_hears_each_message_once_in_order_across_joins_and_drops(
    live: Live, steps: list[Step]
) -> None:
    example = next(_examples)
    channels = [f"follow{example}-{index}" for index in range(2)]
    for channel in channels:
        await live.channel(channel)
    follower = StreamFollower(
        live.client(PERSONAS[0]), name="test", tokens=[live.tokens[p] for p in PERSONAS[1:]], reconnect_s=0.01
    )
    listeners: dict[tuple[str, str], Listener] = {}
    said: dict[str, list[int]] = {channel: [] for channel in channels}
    try:
        for step in steps:
            channel, persona = channels[step.channel], PERSONAS[step.persona]
            if step.kind == "say":
                for n in range(step.count):
                    said[channel].append(await live.say(channel, f"line {n}"))
            elif step.kind == "join" and (channel, persona) not in listeners:
                listeners[(channel, persona)] = listener = Listener(channel)
                follower.follow(channel, persona, listener)
                await eventually(lambda listener=listener: listener.arrived, what=f"{persona} arrives in {channel}")
            elif step.kind == "drop":
                live.arbiter.hub.close_all()  # the arbiter ends every feed: the follower subscribes them again
        for (channel, persona), listener in listeners.items():
            total = said[channel]
            await eventually(
                lambda listener=listener, total=total: not total or listener.seen[-1:] == total[-1:],
                what=f"{persona} hears the last message of {channel}",
            )
            assert listener.refused == []
            # Context: the last few before it arrived; then every message after its arrival, once and in order.
            assert listener.arrival_point is not None
            before = [seq for seq in total if seq <= listener.arrival_point]
            after = [seq for seq in total if seq > listener.arrival_point]
            assert listener.seen == before[-RECENT:] + after, (persona, channel, listener.seen, total)
    finally:
        await follower.close()


async def test_each_persona_asks_its_own_status_on_the_one_stream(live: Live) -> None:
    await live.service.set_persona("lounge", "ben", muted=True)
    follower = StreamFollower(live.client("aoi"), name="test", tokens=[live.tokens["ben"]], reconnect_s=0.01)
    try:
        listeners = {persona: Listener("lounge") for persona in ("aoi", "ben")}
        for persona, listener in listeners.items():
            follower.follow("lounge", persona, listener)
        await eventually(lambda: all(listener.arrived for listener in listeners.values()), what="both arrive")
        aoi, ben = await asyncio.gather(
            follower.status("lounge", "aoi", within=5), follower.status("lounge", "ben", within=5)
        )
        assert aoi is not None and ben is not None
        assert (aoi.you, ben.you) == (
            wire.PersonaView(enabled=True, muted=False, display_name="aoi"),
            wire.PersonaView(enabled=True, muted=True, display_name="ben"),
        )
        read = await live.service.status("lounge", "ben")
        assert ben.model_dump(exclude={"now"}) == read.model_dump(exclude={"now"})
        assert ("aoi", "GET", "/v1/events") in live.log.entries
        assert not any(entry[1:] == ("GET", "status") for entry in live.log.entries)
    finally:
        await follower.close()
    # Once the stream is closed no status comes on it: a persona then reads it over HTTP, without waiting.
    assert await asyncio.wait_for(follower.status("lounge", "aoi", within=5), 0.5) is None


async def test_the_events_of_a_channel_not_followed_are_dropped_unparsed(live: Live) -> None:
    # Both channels are subscribed on the stream, as when a channel was just left and its unsubscribing has not
    # arrived yet (or another process's personas follow it): the frames of the one not followed are not parsed.
    for channel in ("kept", "other"):
        await live.channel(channel)
    async with live.client("aoi").stream() as stream:
        await stream.subscribe([wire.Subscribe(channel=channel) for channel in ("kept", "other")])
        frames: list[wire.StreamFrame] = []

        async def read() -> None:
            async for frame in stream.frames(lambda channel: channel == "kept"):
                frames.append(frame)
                if isinstance(frame, wire.MessageEvent) and frame.message.text == "last":
                    return

        reading = asyncio.create_task(read())
        # Each channel's level frame ends its (empty) replay: then both are live.
        await eventually(lambda: any(isinstance(f, wire.LevelEvent) for f in frames), what="kept is live")
        await eventually(lambda: stream.skipped >= 1, what="other's level frame dropped")
        await live.say("other", "not wanted")
        await live.say("kept", "last")
        await asyncio.wait_for(reading, 5)
        # The reader stopped at kept's last message; other's may come after it on the stream: read on for it.
        reading = asyncio.create_task(read())
        await eventually(lambda: stream.skipped >= 2, what="other's message dropped too")
        reading.cancel()
        assert {frame.channel_id for frame in frames} == {"kept"}


async def test_a_personas_calls_go_on_the_stream_while_it_is_open_and_over_http_when_not(live: Live) -> None:
    await live.channel("lounge")
    follower = StreamFollower(live.client("aoi"), name="test", tokens=[live.tokens["ben"]], reconnect_s=0.01)
    ben = live.client("ben")
    ben.carry_calls_on(follower, "ben")
    remark = wire.ClaimRequest(tier=wire.Tier.REMARK)

    # Before the stream is open: over HTTP.
    first = await ben.claim("lounge", remark)
    assert first.claim is not None
    await ben.release("lounge", first.claim.claim_id)
    assert live.log.of("ben") == [("POST", "claims"), ("DELETE", "claims")]

    listener = Listener("lounge")
    follower.follow("lounge", "ben", listener)
    await eventually(lambda: listener.arrived, what="ben arrives")
    try:
        claimed = await ben.claim("lounge", remark)
        assert claimed.granted and claimed.claim is not None and claimed.claim.persona == "ben"
        spoken = await ben.speak("lounge", claimed.claim.claim_id, wire.SpeakRequest(text="Said on the stream."))
        # A refusal is raised as the HTTP answer's would be: the claim is spent.
        with pytest.raises(ArbiterRejected) as again:
            await ben.speak("lounge", claimed.claim.claim_id, wire.SpeakRequest(text="Again."))
        assert live.log.of("ben") == [("POST", "claims"), ("DELETE", "claims")]  # nothing more over HTTP
    finally:
        await follower.close()
    [message] = await live.history("lounge")
    assert (message.seq, message.author_id, message.text) == (spoken.message.seq, "ben", "Said on the stream.")
    with pytest.raises(ArbiterRejected) as over_http:
        await ben.speak("lounge", claimed.claim.claim_id, wire.SpeakRequest(text="Again."))
    assert (again.value.status, again.value.code) == (over_http.value.status, over_http.value.code)
    assert live.log.of("ben")[-1] == ("POST", "claims/speak")  # closed: over HTTP again
