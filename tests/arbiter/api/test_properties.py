"""A Hypothesis state machine sends random request sequences to a real arbiter (HTTP API, service, SQLite).

It keeps its own model of every grant (what was spent, when it comes back, which message it bought) and of
the history, and after every step checks the arbiter against it:

- 0 <= level <= capacity, and the level is exactly capacity minus what the model says is still out;
- history seqs strictly increase, and the history is exactly the messages the model expects: every grant
  is either in the history (its message is there, at its cost) or refunded (released, the difference of a
  downgrade, retracted, or a claim that lapsed);
- a refusal changes nothing, and a grant was affordable when it was made;
- the floor and the nods follow the rules the model keeps too: who has the floor (a human's message addresses
  personas; an answer, a second pass or the end of the window takes it away; status shows it), and one nod per
  message (none to a nod, none while another persona is about to speak, no other turn while a nod claimed a
  moment ago is on its way). Every grant must be allowed by them, every "priority" or "nodded" refusal must be
  one they give, and a refusal for a reason checked after them (too long, stale, insufficient) means they
  allowed the turn.

The model does not predict whether the other reasons refuse a turn (idle cap, budget, a pause); it checks that
whatever the arbiter answered is consistent. Each example runs on a fresh SQLite database and its own event
loop, with a fake clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from arbiter.core.rules import NOD_FIRST_S
from arbiter.server import open_arbiter
from tests.conftest import auth, make_settings
from tests.support.clock import FakeClock

CHANNEL = "room"
CH = f"/v1/channels/{CHANNEL}"
PERSONAS = ("hana", "kai", "mio")
TIERS = ("aizuchi", "remark", "long")
RANK = {tier: rank for rank, tier in enumerate(TIERS)}
REASONS = {
    "insufficient", "paused", "muted", "not_enabled", "too_long", "stale", "idle_cap", "budget", "priority", "nodded"
}  # fmt: skip
# The reasons the model predicts, and those checked after them: a refusal for one of these was let through by
# the floor and the nod rules. (The rest are checked before them, so say nothing about them.)
MODELLED = {"priority", "nodded"}
CHECKED_AFTER = {"too_long", "stale", "insufficient"}
TEXTS = (
    "うん",
    "right!",
    "I see, that makes sense.",
    "That reminds me of the summer we spent by the sea, when the trains stopped for the typhoon.",
    "そういえば、去年の夏に海へ行ったとき、台風で電車が止まってしまって、駅で一晩過ごしたんだよね。",
    ("Let me tell you the whole story. " * 7).strip(),
)
HUMAN_TEXTS = ("hi all", "kai, what do you think?", "Mio? Hana?", "brb", "そうなんだ")
PLATFORM_IDS = ("d-1", "d-2", "p-1", "p-2")  # the p- ones are also what personas link their posts to


@dataclasses.dataclass
class Grant:
    """One granted spend as the model sees it. ``refund_at`` <= now means its cost is back in the pool."""

    id: str
    persona: str
    tier: str
    cost: int
    refund_at: float
    state: str  # held, spoken, released, retracted
    claimed: bool  # made by a claim (else by a one-step consume)
    created_at: float = 0.0
    seq: int | None = None
    text: str | None = None

    def out(self, now: float) -> bool:
        return self.refund_at > now


@dataclasses.dataclass
class Floor:
    """The personas a human addressed: the others wait until each has answered or passed twice, or ``until``."""

    personas: set[str]
    until: float
    tried: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class Expected:
    """A message the history must show."""

    author_id: str
    author_kind: str
    text: str
    tier: str | None
    cost: int
    platform_message_id: str | None = None


class ArbiterMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.loop = asyncio.Runner()
        self.folder = tempfile.TemporaryDirectory()
        self.stack = AsyncExitStack()
        try:
            self.client: TestClient[Any, Any] = self.loop.run(self._open(Path(self.folder.name) / "arbiter.db"))
            view = self.expect("PUT", CH, "admin", {})
        except BaseException:
            self.teardown()  # Hypothesis only tears down machines that were built
            raise
        self.capacity: int = view["capacity"]
        self.tiers: dict[str, dict[str, Any]] = {t: dict(view["tiers"][t]) for t in TIERS}
        self.claim_ttl_s: float = view["claim_ttl_s"]
        self.priority_window_s: float = view["priority_window_s"]
        assert view["human_hold_s"] == 0  # the model has no human hold
        self.floor: Floor | None = None
        self.grants: list[Grant] = []
        self.messages: dict[int, Expected] = {}
        self.platform_ids: dict[str, int] = {}
        self.last_seq = 0
        self.tokens = 0

    async def _open(self, path: Path) -> TestClient[Any, Any]:
        arbiter = await self.stack.enter_async_context(
            open_arbiter(make_settings(f"sqlite:///{path}"), clock=self.clock)
        )
        return await self.stack.enter_async_context(TestClient(TestServer(arbiter.app)))

    def teardown(self) -> None:
        try:
            self.loop.run(self.stack.aclose())
        finally:
            self.loop.close()
            self.folder.cleanup()

    # --- plumbing -------------------------------------------------------------------------------------------

    def http(self, method: str, path: str, who: str, body: Any = None) -> tuple[int, Any]:
        async def send() -> tuple[int, Any]:
            response = await self.client.request(method, path, headers=auth(who), json=body)
            return response.status, (await response.json() if response.status != 204 else None)

        return self.loop.run(send())

    def expect(self, method: str, path: str, who: str, body: Any = None, status: int = 200) -> Any:
        got, answer = self.http(method, path, who, body)
        assert got == status, (method, path, body, got, answer)
        return answer

    def status(self) -> Any:
        return self.expect("GET", f"{CH}/status", "admin")

    @property
    def now(self) -> float:
        return self.clock.value

    def model_level(self) -> int:
        return max(0, self.capacity - sum(g.cost for g in self.grants if g.out(self.now)))

    def live_claim(self, persona: str) -> Grant | None:
        return next((g for g in self.grants if g.persona == persona and g.state == "held" and g.out(self.now)), None)

    def available(self, replacing: Grant | None = None) -> int:
        """What the pool could give a spend that would replace ``replacing`` (a persona's live claim)."""
        out = sum(g.cost for g in self.grants if g.out(self.now) and g is not replacing)
        return max(0, self.capacity - out)

    # --- the floor and the nods, as the model sees them -------------------------------------------------

    def floor_now(self) -> Floor | None:
        return self.floor if self.floor is not None and self.now < self.floor.until else None

    def expected(self, persona: str, tier: str, *, claimed: bool) -> str | None:
        """The refusal the floor and the nod rules give ``persona``'s turn in ``tier`` now, or None. ``claimed``:
        speech on a live claim, which the claim's grant already let past the others' claims."""
        floor = self.floor_now()
        if floor is not None and persona not in floor.personas:
            return "priority"
        others = [g for g in self.grants if g.state == "held" and g.out(self.now) and g.persona != persona]
        if tier == "aizuchi":
            if self.latest_is_nod():
                return "nodded"  # a nod to a nod
            if not claimed and others:
                return "nodded"  # someone else is about to speak (or nod)
        elif (
            not claimed
            and floor is None
            and any(g.tier == "aizuchi" and self.now < g.created_at + NOD_FIRST_S for g in others)
        ):
            return "nodded"  # a nod claimed a moment ago goes first (an addressed persona's answer does not wait)
        return None

    def judged(self, verdict: dict[str, Any], expected: str | None) -> None:
        """The floor and the nod rules agree with the arbiter's answer."""
        if verdict["granted"]:
            assert expected is None, (verdict, expected, self.floor, self.latest_is_nod())
        elif verdict["reason"] in MODELLED:
            assert verdict["reason"] == expected, (verdict, expected, self.floor, self.latest_is_nod())
        elif verdict["reason"] in CHECKED_AFTER:
            assert expected is None, (verdict, expected, self.floor, self.latest_is_nod())

    def latest_is_nod(self) -> bool:
        """Whether the newest message still in the history is a nod (one taken back leaves the one before it)."""
        return bool(self.messages) and self.messages[max(self.messages)].tier == "aizuchi"

    def spoke(self, persona: str, tier: str, seq: int) -> None:
        """A persona's message: anything but a nod answers what the persona was asked (``self.messages`` already
        shows the message itself)."""
        if tier != "aizuchi" and self.floor is not None and persona in self.floor.personas:
            self.floor.personas.discard(persona)
            if not self.floor.personas:
                self.floor = None

    def passed(self, persona: str) -> None:
        """A released claim: an addressed persona's first pass is a try, its second gives the floor up."""
        floor = self.floor_now()
        if floor is None or persona not in floor.personas:
            return
        if persona not in floor.tried:
            floor.tried.add(persona)
            return
        floor.personas.discard(persona)
        floor.tried.discard(persona)
        if not floor.personas:
            self.floor = None

    def refused(self, verdict: dict[str, Any], level_before: int, *, cost: int, available: int) -> None:
        """A refusal has a known reason, changes nothing, and says "insufficient" only when that is true."""
        assert verdict["granted"] is False, verdict
        assert verdict["reason"] in REASONS, verdict
        event(f"refused: {verdict['reason']}")
        assert verdict["level"] == level_before == self.model_level(), verdict
        if verdict["reason"] == "insufficient":
            assert available < cost, (verdict, available, cost)

    def record(self, grant: Grant, message: dict[str, Any]) -> None:
        event(f"granted: {'claim+speak' if grant.claimed else 'consume'}")
        self.last_seq += 1
        assert message["seq"] == self.last_seq, message
        assert (message["author_id"], message["tier"], message["cost"]) == (grant.persona, grant.tier, grant.cost)
        grant.seq = message["seq"]
        grant.text = message["text"]
        self.messages[message["seq"]] = Expected(grant.persona, "persona", message["text"], grant.tier, grant.cost)
        self.spoke(grant.persona, grant.tier, message["seq"])

    # --- rules ----------------------------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([0.001, 0.5, 1.0, 2.5, 4.999, 5.0, 10.0, 30.0, 31.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @precondition(lambda self: any(g.out(self.now) for g in self.grants))
    @rule()
    def wait_for_every_refund(self) -> None:
        """Once every refund time has passed, everything that was spent has come back: nothing leaks."""
        self.clock.advance(max(g.refund_at for g in self.grants) - self.now)
        assert self.model_level() == self.capacity
        assert self.status()["level"] == self.capacity

    def do_claim(self, persona: str, tier: str) -> Grant | None:
        before = self.model_level()
        previous = self.live_claim(persona)
        # A new claim replaces the persona's live one, so that one's cost counts as available.
        available = self.available(replacing=previous)
        cost = self.tiers[tier]["cost"]
        expected = self.expected(persona, tier, claimed=False)
        verdict = self.expect("POST", f"{CH}/claims", persona, {"tier": tier})
        self.judged(verdict, expected)
        if not verdict["granted"]:
            self.refused(verdict, before, cost=cost, available=available)
            return None
        claim = verdict["claim"]
        assert (claim["persona"], claim["tier"], claim["cost"], claim["state"]) == (persona, tier, cost, "held")
        assert claim["expires_at"] == self.now + self.claim_ttl_s
        assert available >= cost, "granted a claim the pool could not afford"
        event("granted: claim")
        if previous is not None:
            previous.state, previous.refund_at = "released", self.now
        grant = Grant(
            claim["claim_id"],
            persona,
            tier,
            cost,
            self.now + self.claim_ttl_s,
            "held",
            claimed=True,
            created_at=self.now,
        )
        self.grants.append(grant)
        assert verdict["level"] == self.model_level(), verdict
        return grant

    def do_speak(self, grant: Grant, tier: str, text: str) -> None:
        before = self.model_level()
        live = grant.out(self.now)
        cost = min(self.tiers[tier]["cost"], grant.cost)
        # A lapsed claim is judged afresh, as a one-step consume would be.
        expected = self.expected(grant.persona, tier, claimed=live)
        verdict = self.expect("POST", f"{CH}/claims/{grant.id}/speak", grant.persona, {"text": text, "tier": tier})
        self.judged(verdict, expected)
        if not verdict["granted"]:
            # A live claim already holds its cost, so only a lapsed one can be short of it.
            self.refused(verdict, before, cost=cost, available=cost if live else before)
            return
        if not live:
            # A lapsed claim holds nothing: the turn is judged afresh and paid again, with nothing to refund.
            assert before >= cost, "granted speech on a lapsed claim the pool could not afford"
            event("granted: speech on a lapsed claim")
        assert verdict["refunded"] == (grant.cost - cost if live else 0)
        grant.tier, grant.cost, grant.state = tier, cost, "spoken"
        grant.refund_at = self.now + self.tiers[tier]["recovery_s"]
        self.record(grant, verdict["message"])
        assert verdict["level"] == self.model_level(), verdict

    def do_release(self, grant: Grant) -> None:
        released = self.expect("DELETE", f"{CH}/claims/{grant.id}", grant.persona)
        assert released["granted"] is True
        assert released["claim"]["state"] == "released"
        if grant.state == "held":  # releasing again changes nothing
            event("pass" if self.floor_now() is None else "pass with a floor")
            self.passed(grant.persona)
        grant.state, grant.refund_at = "released", min(grant.refund_at, self.now)
        assert released["level"] == self.model_level()

    @rule(persona=st.sampled_from(PERSONAS), tier=st.sampled_from(TIERS))
    def claim(self, persona: str, tier: str) -> None:
        self.do_claim(persona, tier)

    @rule(
        data=st.data(),
        persona=st.sampled_from(PERSONAS),
        tier=st.sampled_from(TIERS),
        then=st.sampled_from(["speak", "speak", "release"]),
        think_s=st.sampled_from([0.0, 0.0, 2.0, 31.0]),  # how long the LLM call took; 31 s outlives a claim
    )
    def turn(self, data: st.DataObject, persona: str, tier: str, then: str, think_s: float) -> None:
        """What a persona does: claim, think, then speak in that tier or a cheaper one, or pass."""
        grant = self.do_claim(persona, tier)
        if grant is None:
            return
        self.clock.advance(think_s)
        if then == "release":
            self.do_release(grant)
            return
        spoken = data.draw(st.sampled_from(TIERS[: RANK[tier] + 1]))
        self.do_speak(grant, spoken, data.draw(st.sampled_from(TEXTS)))

    @precondition(lambda self: any(g.state == "held" for g in self.grants))
    @rule(data=st.data(), text=st.sampled_from(TEXTS))
    def speak(self, data: st.DataObject, text: str) -> None:
        grant = data.draw(st.sampled_from([g for g in self.grants if g.state == "held"]))
        self.do_speak(grant, data.draw(st.sampled_from(TIERS[: RANK[grant.tier] + 1])), text)

    @precondition(lambda self: any(g.state == "held" and g.tier != "long" for g in self.grants))
    @rule(data=st.data())
    def speak_above_the_claim(self, data: st.DataObject) -> None:
        grant = data.draw(st.sampled_from([g for g in self.grants if g.state == "held" and g.tier != "long"]))
        dearer = TIERS[RANK[grant.tier] + 1]
        error = self.expect("POST", f"{CH}/claims/{grant.id}/speak", grant.persona, {"text": "hi", "tier": dearer}, 422)
        assert error["error"]["field"] == "tier"

    @precondition(lambda self: any(g.claimed and g.state != "held" for g in self.grants))
    @rule(data=st.data())
    def speak_on_a_closed_claim(self, data: st.DataObject) -> None:
        grant = data.draw(st.sampled_from([g for g in self.grants if g.claimed and g.state != "held"]))
        replay = grant.state == "spoken" and data.draw(st.booleans())
        text = grant.text if replay and grant.text is not None else "a second thought"
        got, answer = self.http("POST", f"{CH}/claims/{grant.id}/speak", grant.persona, {"text": text})
        if replay and grant.seq in self.messages:
            # A repeated speak (its answer was lost) gets the same message again, not a second one.
            assert got == 200, answer
            assert answer["message"]["seq"] == grant.seq
            assert answer["level"] == self.model_level()
        else:
            assert got == 409, answer

    @precondition(lambda self: any(g.claimed and g.state in {"held", "released"} for g in self.grants))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        self.do_release(
            data.draw(st.sampled_from([g for g in self.grants if g.claimed and g.state in {"held", "released"}]))
        )

    @rule(
        persona=st.sampled_from(PERSONAS),
        text=st.sampled_from(TEXTS),
        choice=st.one_of(st.sampled_from(TIERS), st.integers(min_value=1, max_value=120)),
    )
    def consume(self, persona: str, text: str, choice: str | int) -> None:
        before = self.model_level()
        body: dict[str, Any] = {"text": text}
        if isinstance(choice, str):
            tier, cost = choice, self.tiers[choice]["cost"]
            body["tier"] = choice
        else:
            covered = [t for t in TIERS if self.tiers[t]["cost"] <= choice]
            if choice > self.capacity or not covered:
                error = self.expect("POST", f"{CH}/consume", persona, {"text": text, "amount": choice}, 422)
                assert error["error"]["field"] == "amount"
                return
            tier, cost = covered[-1], choice  # the dearest tier the amount covers
            body["amount"] = choice
        expected = self.expected(persona, tier, claimed=False)
        verdict = self.expect("POST", f"{CH}/consume", persona, body)
        self.judged(verdict, expected)
        if not verdict["granted"]:
            self.refused(verdict, before, cost=cost, available=before)
            return
        assert before >= cost, "granted a spend the pool could not afford"
        refund_at = self.now + self.tiers[tier]["recovery_s"]
        grant = Grant(
            f"consume-{self.last_seq + 1}", persona, tier, cost, refund_at, "spoken", claimed=False, created_at=self.now
        )
        self.grants.append(grant)
        self.record(grant, verdict["message"])
        assert verdict["level"] == self.model_level(), verdict

    @rule(
        text=st.sampled_from(HUMAN_TEXTS),
        platform_id=st.one_of(st.none(), st.sampled_from(PLATFORM_IDS)),
        mentions=st.lists(st.sampled_from(PERSONAS), max_size=2, unique=True),
    )
    def observe(self, text: str, platform_id: str | None, mentions: list[str]) -> None:
        body = {"author_id": "u1", "author_name": "Yuki", "text": text, "platform_message_id": platform_id}
        answer = self.expect("POST", f"{CH}/messages", "admin", {**body, "mentions": mentions})
        if platform_id in self.platform_ids:
            assert answer == {"seq": self.platform_ids[platform_id], "created": False}
            return
        self.last_seq += 1
        assert answer == {"seq": self.last_seq, "created": True}
        self.messages[self.last_seq] = Expected("u1", "human", text, None, 0, platform_id)
        if platform_id is not None:
            self.platform_ids[platform_id] = self.last_seq
        # Whom it addresses (mentions, or a persona's name in the text) is the history's to say; what that does to
        # the floor is the model's. Those asked join those still waiting to answer, with their tries back, and the
        # floor lasts a window from the latest question; a message that asks nobody leaves the floor as it was.
        page = self.expect("GET", f"{CH}/history?after={self.last_seq - 1}&limit=1", "admin")
        addressed = set(page["messages"][0]["addressed"])
        assert set(mentions) <= addressed
        floor = self.floor_now()
        if addressed and floor is None:
            floor = Floor(addressed, self.now + self.priority_window_s)
        elif addressed and floor is not None:
            event("a question while the floor was taken")
            floor.personas |= addressed
            floor.tried -= addressed
            floor.until = max(floor.until, self.now + self.priority_window_s)
        self.floor = floor

    @precondition(lambda self: any(g.state in {"spoken", "retracted"} for g in self.grants))
    @rule(data=st.data())
    def retract(self, data: st.DataObject) -> None:
        grant = data.draw(st.sampled_from([g for g in self.grants if g.state in {"spoken", "retracted"}]))
        assert grant.seq is not None
        path = f"{CH}/messages/{grant.seq}/retract"
        if grant.state == "retracted":  # again: never a second refund
            got, answer = self.http("POST", path, grant.persona)
            assert got in {200, 409}, answer
            if got == 200:
                assert answer["refunded"] == 0, answer
            return
        if self.messages[grant.seq].platform_message_id is not None:
            self.expect("POST", path, grant.persona, status=409)  # it was posted: it cannot be taken back
            return
        # What was still out comes back: all of its cost (the level may show less of it, when the pool was shrunk
        # below what is out).
        outstanding = grant.cost if grant.out(self.now) else 0
        answer = self.expect("POST", path, grant.persona)
        grant.state, grant.refund_at = "retracted", min(grant.refund_at, self.now)
        del self.messages[grant.seq]
        assert answer == {"seq": grant.seq, "refunded": outstanding, "level": self.model_level()}

    @precondition(lambda self: any(g.state == "spoken" for g in self.grants))
    @rule(data=st.data(), platform_id=st.sampled_from(PLATFORM_IDS))
    def link(self, data: st.DataObject, platform_id: str) -> None:
        grant = data.draw(st.sampled_from([g for g in self.grants if g.state == "spoken"]))
        assert grant.seq is not None
        expected = self.messages[grant.seq]
        path = f"{CH}/messages/{grant.seq}/platform-id"
        got, answer = self.http("PUT", path, grant.persona, {"platform_message_id": platform_id})
        if expected.platform_message_id == platform_id:
            assert got == 200, answer  # linking again to the same id is a no-op
        elif expected.platform_message_id is not None:
            assert got in {409, 422}, answer  # already linked to another id (and maybe that id is taken too)
        elif platform_id in self.platform_ids:
            assert got == 422, answer  # the id belongs to another message
            assert answer["error"]["field"] == "platform_message_id"
        else:
            assert got == 200, answer
            assert (answer["seq"], answer["platform_message_id"]) == (grant.seq, platform_id)
            expected.platform_message_id = platform_id
            self.platform_ids[platform_id] = grant.seq

    @rule(persona=st.sampled_from(PERSONAS), prompt=st.integers(0, 3_000), completion=st.integers(0, 500))
    def usage(self, persona: str, prompt: int, completion: int) -> None:
        answer = self.expect("POST", f"{CH}/usage", persona, {"prompt_tokens": prompt, "completion_tokens": completion})
        self.tokens += prompt + completion
        assert answer["tokens_today"] == self.tokens

    @rule(
        capacity=st.sampled_from([None, None, 40, 100, 150, 300]),
        tier=st.sampled_from(TIERS),
        cost=st.sampled_from([None, 1, 5, 30, 60, 80, 120]),
        recovery_s=st.one_of(st.none(), st.sampled_from([0.0, 1.0, 5.0, 12.5])),
        claim_ttl_s=st.one_of(st.none(), st.sampled_from([1.0, 10.0, 30.0])),
        paused=st.sampled_from([None, None, None, False, False, True]),  # a paused channel refuses everything
        budget=st.sampled_from(["keep", "keep", None, 20_000, 500_000]),
        idle_cap=st.one_of(st.none(), st.sampled_from([2, 12, 1_000])),
    )
    def change_settings(
        self,
        *,
        capacity: int | None,
        tier: str,
        cost: int | None,
        recovery_s: float | None,
        claim_ttl_s: float | None,
        paused: bool | None,
        budget: str | int | None,
        idle_cap: int | None,
    ) -> None:
        patch: dict[str, Any] = {}
        tiers = {t: dict(rule) for t, rule in self.tiers.items()}
        if capacity is not None:
            patch["capacity"] = capacity
        tier_patch = {k: v for k, v in (("cost", cost), ("recovery_s", recovery_s)) if v is not None}
        if tier_patch:
            patch["tiers"] = {tier: tier_patch}
            tiers[tier].update(tier_patch)
        for name, value in (("claim_ttl_s", claim_ttl_s), ("paused", paused), ("idle_cap", idle_cap)):
            if value is not None:
                patch[name] = value
        if budget != "keep":
            patch["daily_token_budget"] = budget
        new_capacity = capacity if capacity is not None else self.capacity
        costs = [tiers[t]["cost"] for t in TIERS]
        # The cross-field rules: tiers cost no less as they grow, and none costs more than the pool holds.
        valid = costs == sorted(costs) and costs[-1] <= new_capacity
        before = self.status()
        got, view = self.http("PATCH", f"{CH}/settings", "admin", patch)
        if not valid:
            assert got == 422, (patch, view)
            assert view["error"]["field"], view
            after = self.status()
            assert {k: v for k, v in after.items() if k != "now"} == {k: v for k, v in before.items() if k != "now"}
            return
        assert got == 200, (patch, view)
        for name, value in patch.items():
            if name != "tiers":
                assert view[name] == value, (name, view)
        self.capacity = new_capacity
        self.tiers = {t: dict(tiers[t]) for t in TIERS}
        assert view["tiers"] == self.tiers
        if claim_ttl_s is not None:
            self.claim_ttl_s = claim_ttl_s

    @rule(capacity=st.sampled_from([10, 40, 100, 250]))
    def rescale_the_pool(self, capacity: int) -> None:
        """A valid change of every cost at once; a pool shrunk below what is out stays at level 0 until refunds."""
        costs = {"aizuchi": max(1, capacity // 20), "remark": capacity * 6 // 10, "long": capacity * 8 // 10}
        patch = {"capacity": capacity, "tiers": {tier: {"cost": cost} for tier, cost in costs.items()}}
        view = self.expect("PATCH", f"{CH}/settings", "admin", patch)
        assert view["capacity"] == capacity
        assert {tier: view["tiers"][tier]["cost"] for tier in TIERS} == costs
        if self.available() < self.capacity - capacity:
            event("pool shrunk below what is out")
        self.capacity = capacity
        for tier, cost in costs.items():
            self.tiers[tier]["cost"] = cost

    # --- invariants -----------------------------------------------------------------------------------------

    @invariant()
    def level_is_within_the_pool_and_matches_the_grants(self) -> None:
        status = self.status()
        assert 0 <= status["level"] <= status["capacity"], status
        assert status["capacity"] == self.capacity
        assert status["level"] == self.model_level(), (status, self.grants)
        assert status["last_seq"] == self.last_seq
        assert status["tokens_today"] == self.tokens
        floor = self.floor_now()
        assert status["priority"] == (sorted(floor.personas) if floor is not None else []), (status, self.floor)

    @invariant()
    def history_is_exactly_the_unretracted_messages_in_order(self) -> None:
        seen: list[dict[str, Any]] = []
        after = 0
        while True:
            page = self.expect("GET", f"{CH}/history?after={after}&limit=200", "admin")
            seen += page["messages"]
            after = page["next_after"]
            if not page["has_more"]:
                break
        seqs = [m["seq"] for m in seen]
        assert all(a < b for a, b in itertools.pairwise(seqs)), seqs
        actual = {
            m["seq"]: Expected(
                m["author_id"], m["author_kind"], m["text"], m["tier"], m["cost"], m["platform_message_id"]
            )
            for m in seen
        }
        assert actual == self.messages
        # Every grant is in the history or refunded: spoken ones by their message, the rest by the level above.
        for grant in self.grants:
            if grant.state == "spoken":
                assert grant.seq in actual and actual[grant.seq].cost == grant.cost, grant


def test_random_request_sequences_keep_the_invariants() -> None:
    run_state_machine_as_test(
        ArbiterMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=40,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
