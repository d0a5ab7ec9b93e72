"""A restart loses no history, no setting and no pending refund.

In process with the fake clock: the arbiter is closed mid-conversation and opened again on the same database;
everything reads back the same and the refunds still arrive exactly when they were due. As a real process:
``aizuchi arbiter`` is killed with SIGKILL while requests are in flight, and everything it acknowledged
is there when it starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import aiohttp

from tests.support.arbiters import Api, arbiter_process, serve

if TYPE_CHECKING:
    from pathlib import Path

    from tests.support.clock import FakeClock

CHANNEL = "ramen-club"
SETTINGS: dict[str, Any] = {
    "capacity": 200,
    "claim_ttl_s": 20.0,
    "idle_cap": 50,
    "topic": "weekend plans",
    "tiers": {
        "aizuchi": {"cost": 5, "recovery_s": 6.0},
        "remark": {"cost": 60, "recovery_s": 7.0},
        "long": {"cost": 80, "recovery_s": 11.0},
    },
}
# Changed after the channel was created, so the test sees saved changes and not just the initial settings.
CHANGES: dict[str, Any] = {"capacity": 210, "topic": "where to eat ramen", "tiers": {"remark": {"max_length": 150}}}


async def snapshot(api: Api) -> dict[str, Any]:
    """Everything a client can read about the channel."""
    return {
        "history": await api.history(CHANNEL),
        "settings": await api.settings(CHANNEL),
        "status": await api.status(CHANNEL),
        "hana": await api.status(CHANNEL, "hana"),
        "kai": await api.status(CHANNEL, "kai"),
        "channels": await api.call("GET", "/v1/channels"),
    }


async def converse(api: Api, clock: FakeClock) -> tuple[str, list[tuple[float, int]]]:
    """A short conversation that leaves refunds pending and a claim held.

    Returns the held claim's id and the refunds it should leave, worked out from the settings above.
    """
    t0 = clock.value
    await api.create_channel(CHANNEL, **SETTINGS)
    await api.call("PATCH", f"/v1/channels/{CHANNEL}/settings", body=CHANGES)
    await api.call("PUT", f"/v1/channels/{CHANNEL}/personas/mio", body={"muted": True})
    await api.say(CHANNEL, "alice", "who wants ramen this weekend?", platform_message_id="d-1")

    clock.value = t0 + 1
    claim = await api.claim(CHANNEL, "hana", "remark")
    spoken = await api.speak(CHANNEL, "hana", claim["claim"]["claim_id"], "いいね!", tier="aizuchi")
    assert spoken["granted"] and spoken["refunded"] == 55, spoken
    await api.call("POST", f"/v1/channels/{CHANNEL}/usage", "hana", {"prompt_tokens": 120, "completion_tokens": 30})

    clock.value = t0 + 2
    assert (await api.consume(CHANNEL, "kai", "remark", "I know a place near the station."))["granted"]

    clock.value = t0 + 3
    passed = await api.claim(CHANNEL, "kai", "long")
    await api.release(CHANNEL, "kai", passed["claim"]["claim_id"])

    clock.value = t0 + 4
    await api.say(CHANNEL, "bob", "sounds good to me", platform_message_id="d-2")

    # The nod before the claim: while another persona holds a claim, its message is on its way.
    clock.value = t0 + 4.5
    assert (await api.consume(CHANNEL, "kai", "aizuchi", "yeah!"))["granted"]

    clock.value = t0 + 5
    held = await api.claim(CHANNEL, "hana", "long")
    assert held["granted"], held

    refunds = [(t0 + 1 + 6, 5), (t0 + 2 + 7, 60), (t0 + 4.5 + 6, 5), (t0 + 5 + 20, 80)]
    return held["claim"]["claim_id"], refunds


async def expect_refunds(api: Api, clock: FakeClock, refunds: list[tuple[float, int]], level: int) -> int:
    """Move the clock to each refund's time: the level must not rise a moment before it, and rise by the refund's
    amount at it. Returns the level after the last one."""
    for at, amount in refunds:
        clock.value = at - 0.001
        assert (await api.status(CHANNEL))["level"] == level, f"the refund due at {at} came early"
        clock.value = at
        level += amount
        assert (await api.status(CHANNEL))["level"] == level, f"the refund due at {at} did not come"
    return level


async def test_restart_keeps_history_settings_level_and_refunds(database_url: str, clock: FakeClock) -> None:
    async with serve(database_url, clock=clock) as served:
        claim_id, refunds = await converse(served.api, clock)
        before = await snapshot(served.api)

    # Worked out independently of the arbiter, so a snapshot that was wrong before the restart fails too.
    capacity = CHANGES["capacity"]
    assert [(r["at"], r["amount"]) for r in before["status"]["refunds"]] == refunds
    assert before["status"]["level"] == capacity - sum(amount for _, amount in refunds)
    assert before["status"]["tokens_today"] == 150
    assert [m["text"] for m in before["history"]] == [
        "who wants ramen this weekend?",
        "いいね!",
        "I know a place near the station.",
        "sounds good to me",
        "yeah!",
    ]
    assert before["settings"]["topic"] == CHANGES["topic"]
    assert before["settings"]["personas"]["mio"]["muted"] is True
    assert before["hana"]["claim"]["claim_id"] == claim_id

    async with serve(database_url, clock=clock) as served:
        assert await snapshot(served.api) == before
        level = await expect_refunds(served.api, clock, refunds[:2], before["status"]["level"])
        halfway = await snapshot(served.api)

    # Once more in the middle of the schedule: what is left of it survives too.
    async with serve(database_url, clock=clock) as served:
        assert await snapshot(served.api) == halfway
        assert halfway["hana"]["claim"]["claim_id"] == claim_id
        await expect_refunds(served.api, clock, refunds[2:], level)
        after = await snapshot(served.api)
    assert after["status"]["level"] == capacity
    assert after["status"]["refunds"] == []
    assert after["hana"]["claim"] is None  # the held claim lapsed at its expiry
    assert after["history"] == before["history"]
    assert after["settings"] == before["settings"]


async def test_restart_keeps_the_floors_tries_and_the_latest_nod(database_url: str, clock: FakeClock) -> None:
    """``Priority.tried`` (kept in the priority's JSON) and ``recent_said`` (a column) survive a restart: after
    it, kai's next pass is its second, and the latest message is still a nod."""
    async with serve(database_url, clock=clock) as served:
        api = served.api
        await api.create_channel(CHANNEL)
        await api.say(CHANNEL, "alice", "kai, ramen or soba?", mentions=["kai"])
        first = await api.claim(CHANNEL, "kai", "remark")
        await api.release(CHANNEL, "kai", first["claim"]["claim_id"])  # one try: the floor stays kai's
        assert (await api.consume(CHANNEL, "kai", "aizuchi", "hmm..."))["granted"]  # a nod answers nothing
        before = await snapshot(api)
    assert before["status"]["priority"] == ["kai"]

    async with serve(database_url, clock=clock) as served:
        api = served.api
        assert await snapshot(api) == before
        assert (await api.claim(CHANNEL, "hana", "aizuchi"))["reason"] == "priority"
        assert (await api.consume(CHANNEL, "kai", "aizuchi", "hm."))["reason"] == "nodded"  # a nod to a nod
        second = await api.claim(CHANNEL, "kai", "remark")
        await api.release(CHANNEL, "kai", second["claim"]["claim_id"])  # the second try gives the floor up
        assert (await api.status(CHANNEL))["priority"] == []
        assert (await api.claim(CHANNEL, "hana", "aizuchi"))["reason"] == "nodded"  # kai's nod is still the latest
        assert (await api.claim(CHANNEL, "hana", "remark"))["granted"]


# --- a real process, killed ------------------------------------------------------------------------------


async def test_sigkill_loses_nothing_acknowledged(tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'arbiter.db'}"
    # Real time: refunds an hour away and claims that last ten minutes keep the pool still during the test.
    # Remarks as cheap as nods: the personas chatter in remarks (a nod to a nod would be refused), two hundred of
    # them before the pool runs dry.
    settings = {
        **SETTINGS,
        "capacity": 1_000,
        "claim_ttl_s": 600.0,
        "idle_cap": 1_000,
        "tiers": {
            tier: {**rule, "recovery_s": 3_600.0, **({"cost": 5} if tier == "remark" else {})}
            for tier, rule in SETTINGS["tiers"].items()
        },
    }
    acknowledged: list[dict[str, Any]] = []
    async with arbiter_process(database_url, tmp_path, name="doomed") as doomed, aiohttp.ClientSession() as session:
        api = Api(session, {}, doomed.url)
        await api.create_channel(CHANNEL, **settings)
        await api.call("PATCH", f"/v1/channels/{CHANNEL}/settings", body={**CHANGES, "capacity": 1_200})
        await api.say(CHANNEL, "alice", "who wants ramen this weekend?")
        claim = await api.claim(CHANNEL, "hana", "remark")
        await api.speak(CHANNEL, "hana", claim["claim"]["claim_id"], "いいね!")
        await api.call("POST", f"/v1/channels/{CHANNEL}/usage", "kai", {"prompt_tokens": 100, "completion_tokens": 20})
        held = (await api.claim(CHANNEL, "mio", "long"))["claim"]
        before = await snapshot(api)

        # Personas keep talking; the process dies while some of their requests are in flight.
        enough = asyncio.Event()

        async def chatter(persona: str) -> None:
            for n in range(1_000):
                answer = await api.consume(CHANNEL, persona, "remark", f"{persona} remarks #{n}")
                acknowledged.append(answer)
                if len(acknowledged) >= 30:
                    enough.set()

        workers = [asyncio.create_task(chatter(persona)) for persona in ("hana", "kai")]
        await asyncio.wait_for(enough.wait(), timeout=30)
        await asyncio.to_thread(doomed.kill)
        for worker in workers:
            with contextlib.suppress(aiohttp.ClientError):
                await worker

    async with arbiter_process(database_url, tmp_path, name="reborn") as reborn, aiohttp.ClientSession() as session:
        api = Api(session, {}, reborn.url)
        after = await snapshot(api)
        mio = await api.status(CHANNEL, "mio")

    assert after["settings"] == before["settings"]
    history = after["history"]
    assert history[: len(before["history"])] == before["history"]
    assert [m["seq"] for m in history] == list(range(1, len(history) + 1))
    for answer in acknowledged:
        assert answer["granted"], answer
        assert history[answer["message"]["seq"] - 1] == answer["message"]
    # The ledger and the history were written together: whatever was committed is in both, and nothing else.
    status = after["status"]
    spent = sum(m["cost"] for m in history) + held["cost"]
    assert status["level"] == status["capacity"] - spent
    # Status lists the next ten refunds (those within a tenth of a second merged); in real time the spends may
    # spread over more than ten such slots, and then the list holds only part of what is pending.
    listed = sum(refund["amount"] for refund in status["refunds"])
    assert listed == spent if len(status["refunds"]) < 10 else listed < spent
    assert mio["claim"] == held
    assert status["tokens_today"] == before["status"]["tokens_today"] == 120
