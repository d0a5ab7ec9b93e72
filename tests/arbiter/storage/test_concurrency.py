"""Spends are atomic: concurrent requests on one channel never overdraw its pool, on SQLite and on PostgreSQL,
in one arbiter and across several arbiters (in process and as real processes) on one PostgreSQL database.

The clock is frozen (or, for real processes, refunds are an hour away), so nothing is refunded during a test:
every granted cost stays spent, and the pool's accounts can be checked exactly. The grants can then be put back
in the order they were made (each left a lower level than the one before), and every nod granted or refused
checked against the rule that gives each message one nod at most.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from arbiter.core.rules import NOD_FIRST_S
from tests.support.arbiters import Api, arbiter_process, crowd, serve

if TYPE_CHECKING:
    from pathlib import Path

    from tests.support.clock import FakeClock

CHANNEL = "crowded"
COSTS = {"aizuchi": 5, "remark": 60, "long": 80}
CHEAPER = {"aizuchi": "aizuchi", "remark": "aizuchi", "long": "remark"}
PERSONAS = crowd(50)
# Far below the ~9,700 that 200 requests ask for: most are refused and the pool ends near empty.
CAPACITY = 1_500


def channel_settings(capacity: int, *, recovery_s: float = 5.0, claim_ttl_s: float = 30.0) -> dict[str, Any]:
    # idle_cap at its maximum: the loop stop must not be what refuses here, only the pool.
    return {
        "capacity": capacity,
        "idle_cap": 1_000,
        "claim_ttl_s": claim_ttl_s,
        "tiers": {tier: {"cost": cost, "recovery_s": recovery_s} for tier, cost in COSTS.items()},
    }


@dataclass(frozen=True, slots=True)
class Request:
    kind: str  # "consume" or "claim"
    persona: str
    tier: str
    text: str = ""


@dataclass(frozen=True, slots=True)
class Outcome:
    request: Request
    body: dict[str, Any]

    @property
    def cost(self) -> int:
        """What a granted request spent."""
        cost: int = self.body["message" if self.request.kind == "consume" else "claim"]["cost"]
        return cost


def workload(seed: int) -> list[Request]:
    """200 requests in a seeded random order: each persona claims once (a second claim would replace the first
    and refund it) and consumes three times, in random tiers. The claims are for remarks and long turns, so that
    the pool is what refuses most: a nod's claim would hold every other turn back for a moment (NOD_FIRST_S),
    and the clock is frozen. (The nods asked for are mostly refused anyway: nobody nods while another persona
    holds a claim, and nothing settles one here.)"""
    rng = random.Random(seed)
    tiers = list(COSTS)
    requests: list[Request] = []
    for persona in PERSONAS:
        requests.append(Request("claim", persona, rng.choice(["remark", "long"])))
        requests += [Request("consume", persona, rng.choice(tiers), f"{persona} #{n}") for n in range(3)]
    rng.shuffle(requests)
    return requests


async def send(api: Api, request: Request) -> Outcome:
    if request.kind == "consume":
        return Outcome(request, await api.consume(CHANNEL, request.persona, request.tier, request.text))
    return Outcome(request, await api.claim(CHANNEL, request.persona, request.tier))


async def fire(apis: list[Api], requests: list[Request]) -> list[Outcome]:
    """All at once, spread round-robin over the arbiters."""
    return await asyncio.gather(*(send(api, r) for api, r in zip(itertools.cycle(apis), requests, strict=False)))


def check_no_overdraw(
    capacity: int,
    outcomes: list[Outcome],
    history: list[Any],
    status: dict[str, Any],
    *,
    claim_ttl_s: float = 30.0,
    frozen: bool = True,
) -> None:
    """The invariants of one burst of consumes and claims with nothing refunded meanwhile."""
    granted = [o for o in outcomes if o.body["granted"]]
    refused = [o for o in outcomes if not o.body["granted"]]
    assert granted and refused, "the workload should both grant and refuse"
    for outcome in granted:
        assert outcome.cost == COSTS[outcome.request.tier], outcome
    spent = sum(o.cost for o in granted)
    assert spent <= capacity
    # Refusals come from the pool, only when it really was short, or from the nod rules (checked below).
    for outcome in refused:
        assert outcome.body["reason"] in {"insufficient", "nodded"}, outcome
        if outcome.body["reason"] == "insufficient":
            assert outcome.body["level"] < COSTS[outcome.request.tier], outcome

    # Each grant reports the level it left. Taken in that order they must account for every cost exactly once:
    # a lost update (two grants spending from the same level) would show up as a repeated or skipped level.
    by_level = sorted(granted, key=lambda o: -o.body["level"])
    left = capacity
    for outcome in by_level:
        left -= outcome.cost
        assert outcome.body["level"] == left, outcome
    assert status["level"] == capacity - spent >= 0
    assert sum(refund["amount"] for refund in status["refunds"]) == spent

    # The history is exactly the granted consumes, once each, numbered 1..n in the order they were granted.
    consumes = sorted((o for o in granted if o.request.kind == "consume"), key=lambda o: o.body["message"]["seq"])
    assert [m["seq"] for m in history] == list(range(1, len(consumes) + 1))
    assert status["last_seq"] == len(consumes)
    assert Counter((m["author_id"], m["text"]) for m in history) == Counter(
        (o.request.persona, o.request.text) for o in consumes
    )
    for message, outcome in zip(history, consumes, strict=True):
        assert message == outcome.body["message"]
    levels = [o.body["level"] for o in consumes]
    assert levels == sorted(levels, reverse=True) and len(set(levels)) == len(levels)
    check_one_nod_per_message(capacity, outcomes, history, claim_ttl_s=claim_ttl_s, frozen=frozen)


def check_one_nod_per_message(
    capacity: int, outcomes: list[Outcome], history: list[Any], *, claim_ttl_s: float, frozen: bool
) -> None:
    """Replays the grants in the order they were made and checks every nod, granted or refused, against the rules:
    no nod to a nod, and none while another persona holds a claim (its message is on its way; no claim is settled
    in these bursts); and no other turn for a moment (NOD_FIRST_S) after another persona claimed a nod. A refusal
    was decided on the state left by the grant whose level it reports. ``frozen``: every request was answered at
    one moment of the clock (else, in real time, a refusal does not say when it was made); a grant does say it:
    a message its time, a claim its expiry, ``claim_ttl_s`` after it was granted."""
    assert not any(a["tier"] == b["tier"] == "aizuchi" for a, b in itertools.pairwise(history)), history
    assert any(o.request.tier == "aizuchi" for o in outcomes)
    latest_is_a_nod, holding, nods_claimed = False, frozenset[str](), ()
    # level -> (the latest message is a nod, who holds a claim, (persona, when) of each nod claimed)
    at_level: dict[int, tuple[bool, frozenset[str], tuple[tuple[str, float], ...]]] = {
        capacity: (latest_is_a_nod, holding, nods_claimed)
    }

    def may_nod(persona: str, level: int) -> bool:
        latest, holders, _ = at_level[level]
        return not latest and not holders - {persona}

    def nods_claimed_by_others(persona: str, level: int) -> list[float]:
        return [when for who, when in at_level[level][2] if who != persona]

    for outcome in sorted((o for o in outcomes if o.body["granted"]), key=lambda o: -o.body["level"]):
        request, before = outcome.request, outcome.body["level"] + outcome.cost
        if request.kind == "claim":
            when = outcome.body["claim"]["expires_at"] - claim_ttl_s
        else:
            when = outcome.body["message"]["at"]
        if request.tier == "aizuchi":
            assert may_nod(request.persona, before), outcome
        else:
            assert all(when >= nod + NOD_FIRST_S for nod in nods_claimed_by_others(request.persona, before)), outcome
        if request.kind == "claim":
            holding |= {request.persona}
            if request.tier == "aizuchi":
                nods_claimed = (*nods_claimed, (request.persona, when))
        else:
            latest_is_a_nod = request.tier == "aizuchi"
        at_level[outcome.body["level"]] = (latest_is_a_nod, holding, nods_claimed)
    for outcome in outcomes:
        if outcome.body["granted"]:
            continue
        request, level, reason = outcome.request, outcome.body["level"], outcome.body["reason"]
        if request.tier == "aizuchi":
            # "nodded" exactly when the rule says so (it is checked before the pool).
            assert (reason == "nodded") is not may_nod(request.persona, level), outcome
        elif reason == "nodded":
            assert nods_claimed_by_others(request.persona, level), outcome
            assert 0 < outcome.body["retry_after"] <= NOD_FIRST_S, outcome
        elif frozen:
            assert not nods_claimed_by_others(request.persona, level), outcome


async def read_back(api: Api) -> tuple[list[Any], dict[str, Any]]:
    history = await api.history(CHANNEL)
    status = await api.status(CHANNEL)
    return history, status


async def test_concurrent_consumes_and_claims_never_overdraw(database_url: str, clock: FakeClock) -> None:
    async with serve(database_url, clock=clock, extra_personas=PERSONAS) as served:
        await served.api.create_channel(CHANNEL, **channel_settings(CAPACITY))
        outcomes = await fire([served.api], workload(seed=1))
        history, status = await read_back(served.api)
    check_no_overdraw(CAPACITY, outcomes, history, status)


@pytest.mark.postgres
async def test_two_arbiters_in_process_on_one_postgres_never_overdraw(postgres_url: str, clock: FakeClock) -> None:
    async with (
        serve(postgres_url, clock=clock, extra_personas=PERSONAS) as a,
        serve(postgres_url, clock=clock, extra_personas=PERSONAS) as b,
    ):
        await a.api.create_channel(CHANNEL, **channel_settings(CAPACITY))
        outcomes = await fire([a.api, b.api], workload(seed=2))
        seen_by_a = await read_back(a.api)
        seen_by_b = await read_back(b.api)
    assert seen_by_a == seen_by_b
    check_no_overdraw(CAPACITY, outcomes, *seen_by_a)


@pytest.mark.postgres
async def test_two_arbiter_processes_on_one_postgres_never_overdraw(postgres_url: str, tmp_path: Path) -> None:
    # Real time here: refunds an hour away and claims that last ten minutes keep the pool still during the test.
    settings = channel_settings(CAPACITY, recovery_s=3_600, claim_ttl_s=600)
    async with (
        arbiter_process(postgres_url, tmp_path, name="first", personas=PERSONAS) as first,
        arbiter_process(postgres_url, tmp_path, name="second", personas=PERSONAS) as second,
        aiohttp.ClientSession() as session,
    ):
        apis = [Api(session, PERSONAS, first.url), Api(session, PERSONAS, second.url)]
        await apis[0].create_channel(CHANNEL, **settings)
        outcomes = await fire(apis, workload(seed=3))
        (history, status), (history_b, status_b) = [await read_back(api) for api in apis]
    assert history == history_b
    # The two processes read the clock at slightly different moments; everything else must agree.
    assert {**status, "now": 0} == {**status_b, "now": 0}
    check_no_overdraw(CAPACITY, outcomes, history, status, claim_ttl_s=600, frozen=False)


# --- speaking on claims -----------------------------------------------------------------------------------

HOLDERS = crowd(40, prefix="h")
RIVALS = crowd(20, prefix="r")


@dataclass(frozen=True, slots=True)
class Settle:
    """What happens to one claim: "speak", "cheaper" (speak a tier down), "release", or a race of two calls on
    it: "speak+release" or "speak+speak" (the same text twice, as a retry after a lost answer)."""

    persona: str
    claim: dict[str, Any]
    how: str

    @property
    def text(self) -> str:
        return f"{self.persona} finally speaks"


async def settle(api: Api, plan: Settle) -> list[tuple[int, Any]]:
    path = f"/v1/channels/{CHANNEL}/claims/{plan.claim['claim_id']}"
    speak: dict[str, Any] = {"text": plan.text}
    release: tuple[str, str, dict[str, Any] | None] = ("DELETE", path, None)
    ways: dict[str, list[tuple[str, str, dict[str, Any] | None]]] = {
        "speak": [("POST", f"{path}/speak", speak)],
        "cheaper": [("POST", f"{path}/speak", {**speak, "tier": CHEAPER[plan.claim["tier"]]})],
        "release": [release],
        "speak+release": [("POST", f"{path}/speak", speak), release],
        "speak+speak": [("POST", f"{path}/speak", speak), ("POST", f"{path}/speak", speak)],
    }
    calls = ways[plan.how]
    return await asyncio.gather(*(api.request(method, url, plan.persona, body) for method, url, body in calls))


async def test_concurrent_speaks_and_releases_settle_each_claim_once(database_url: str, clock: FakeClock) -> None:
    rng = random.Random(4)
    ways = ["speak", "cheaper", "release", "speak+release", "speak+speak"]
    # Remarks and long turns: a nod's claim is refused while another persona holds a claim (all of them race
    # here), and a claim spoken as a nod may find the latest message a nod. Speaking cheaper is a long turn
    # spoken as a remark, so that every plan's outcome is known.
    claim_tiers = {
        persona: "long" if ways[i % len(ways)] == "cheaper" else rng.choice(["remark", "long"])
        for i, persona in enumerate(HOLDERS)
    }
    # Room for every claim plus a little: the rivals' consumes compete for what speaking cheaper and
    # releasing give back.
    capacity = sum(COSTS[tier] for tier in claim_tiers.values()) + 100
    async with serve(database_url, clock=clock, extra_personas={**HOLDERS, **RIVALS}) as served:
        api = served.api
        await api.create_channel(CHANNEL, **channel_settings(capacity))
        claims = await asyncio.gather(*(api.claim(CHANNEL, p, tier) for p, tier in claim_tiers.items()))
        assert all(c["granted"] for c in claims)
        assert min(c["level"] for c in claims) == 100

        plans = [
            Settle(p, c["claim"], ways[i % len(ways)]) for i, (p, c) in enumerate(zip(HOLDERS, claims, strict=True))
        ]
        rivals = [
            Request("consume", persona, rng.choice(list(COSTS)), f"{persona} cuts in #{n}")
            for persona in RIVALS
            for n in range(3)
        ]
        settled, consumed = await asyncio.gather(
            asyncio.gather(*(settle(api, plan) for plan in plans)),
            asyncio.gather(*(send(api, r) for r in rivals)),
        )
        history, status = await read_back(api)

    spoken: dict[int, tuple[str, str, int]] = {}  # seq -> (author, text, cost)
    for plan, answers in zip(plans, settled, strict=True):
        codes = sorted(code for code, _ in answers)
        if plan.how == "speak+release":
            # One of the two wins; the other finds the claim closed.
            assert codes == [200, 409], (plan, answers)
        else:
            assert all(code == 200 for code in codes), (plan, answers)
        messages = {body["message"]["seq"]: body for code, body in answers if code == 200 and "message" in body}
        if plan.how == "release":
            assert not messages
            continue
        if plan.how == "speak+speak":
            assert len(messages) == 1, answers  # the retry got the first answer back, not a second message
        for seq, body in messages.items():
            assert body["granted"], body
            spoken[seq] = (plan.persona, plan.text, body["message"]["cost"])
        if plan.how == "cheaper":
            (body,) = messages.values()
            tier = CHEAPER[plan.claim["tier"]]
            assert body["message"]["tier"] == tier
            assert body["refunded"] == COSTS[plan.claim["tier"]] - COSTS[tier]
    for outcome in consumed:
        if outcome.body["granted"]:
            message = outcome.body["message"]
            spoken[message["seq"]] = (outcome.request.persona, outcome.request.text, message["cost"])
        elif outcome.request.tier == "aizuchi" and outcome.body["reason"] == "nodded":
            # The rivals' nods wait while a holder is about to speak, and never follow a nod.
            assert outcome.body["detail"], outcome
        else:
            assert outcome.body["reason"] == "insufficient", outcome
    assert not any(a["tier"] == b["tier"] == "aizuchi" for a, b in itertools.pairwise(history)), history

    assert [m["seq"] for m in history] == list(range(1, len(spoken) + 1))
    assert {m["seq"]: (m["author_id"], m["text"], m["cost"]) for m in history} == spoken
    # Released claims and the difference of cheaper speech came back; everything else is still spent.
    still_spent = sum(cost for _, _, cost in spoken.values())
    assert still_spent <= capacity
    assert status["level"] == capacity - still_spent
    assert sum(refund["amount"] for refund in status["refunds"]) == still_spent
