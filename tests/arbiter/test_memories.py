"""The personas' memories live in the database: they survive a restart, and several arbiter processes on one
PostgreSQL database share them and tell each other's streams about them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from tests.conftest import auth
from tests.support.arbiters import Api, arbiter_process, serve
from tests.support.events import read_until

if TYPE_CHECKING:
    from pathlib import Path

    from tests.support.clock import FakeClock

CHANNEL = "lobby"
STATE = {
    "topic": "the picnic",
    "open_questions": ["Yuki: who brings the tea?"],
    "agreed": ["Saturday, by the river"],
    "speakers": [{"name": "Yuki", "note": "organises it; bringing a blanket"}],
}


async def remember(api: Api, persona: str, state: dict[str, Any]) -> int:
    """Say something, then let ``persona`` pass with ``state`` as its notes; the seq they take in."""
    seq = (await api.say(CHANNEL, "yuki", "Picnic on Saturday? Who brings the tea?"))["seq"]
    claim = (await api.claim(CHANNEL, persona, "remark"))["claim"]
    body = {"memory": {"seq": seq, "state": state}}
    await api.call("DELETE", f"/v1/channels/{CHANNEL}/claims/{claim['claim_id']}", persona, body)
    return int(seq)


async def test_notes_spoken_with_survive_a_restart(database_url: str, clock: FakeClock) -> None:
    async with serve(database_url, clock=clock) as first:
        await first.api.create_channel(CHANNEL)
        seq = (await first.api.say(CHANNEL, "yuki", "Picnic on Saturday? Who brings the tea?"))["seq"]
        claim = (await first.api.claim(CHANNEL, "hana", "remark"))["claim"]
        body = {"text": "I'll bring the tea!", "memory": {"seq": seq, "state": STATE}}
        spoken = await first.api.call("POST", f"/v1/channels/{CHANNEL}/claims/{claim['claim_id']}/speak", "hana", body)
        assert spoken["granted"] is True
    async with serve(database_url, clock=clock) as again:
        [memory] = (await again.api.call("GET", f"/v1/channels/{CHANNEL}/memory", "hana"))["memories"]
    assert (memory["persona"], memory["seq"], memory["state"]) == ("hana", seq, STATE)


@pytest.mark.postgres
async def test_two_arbiter_processes_share_the_notes_and_tell_each_others_streams(
    postgres_url: str, tmp_path: Path
) -> None:
    async with (
        arbiter_process(postgres_url, tmp_path, name="a") as a,
        arbiter_process(postgres_url, tmp_path, name="b") as b,
        aiohttp.ClientSession() as session,
    ):
        via_a, via_b = Api(session, {}, a.url), Api(session, {}, b.url)
        await via_a.create_channel(CHANNEL)
        async with session.ws_connect(f"{b.url}/v1/channels/{CHANNEL}/events", headers=auth("kai")) as stream:
            await read_until(stream, lambda event: event["type"] == "level")  # live from here
            seq = await remember(via_a, "hana", STATE)
            events = await read_until(stream, lambda event: event["type"] == "memory")
        [memory] = (await via_b.call("GET", f"/v1/channels/{CHANNEL}/memory"))["memories"]
        assert (memory["persona"], memory["seq"], memory["state"]) == ("hana", seq, STATE)
        assert events[-1]["memory"] == memory  # the event another process heard is what it reads

        # Reset through the other process: gone for both.
        await via_b.call("DELETE", f"/v1/channels/{CHANNEL}/memory/hana")
        assert (await via_a.call("GET", f"/v1/channels/{CHANNEL}/memory"))["memories"] == []
