"""Every endpoint of the HTTP API through the aiohttp test client: happy paths, response shapes, refusals.

Refusals are normal answers (HTTP 200, ``granted: false`` with a reason); errors are in test_bad_input.py.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pytest

from arbiter.api.routes import ENDPOINTS
from tests.arbiter.api.conftest import CHANNEL
from tests.conftest import auth

if TYPE_CHECKING:
    from tests.arbiter.api.conftest import Api
    from tests.support.clock import FakeClock

CH = f"/v1/channels/{CHANNEL}"
DEFAULT_TIERS = {
    "aizuchi": {"cost": 5, "max_length": 24, "recovery_s": 5.0},
    "remark": {"cost": 60, "max_length": 120, "recovery_s": 5.0},
    "long": {"cost": 80, "max_length": 240, "recovery_s": 5.0},
}

pytestmark = pytest.mark.usefixtures("lobby")


async def test_every_endpoint_has_a_test_here() -> None:
    # A new endpoint must get its happy path tested in this file: add it to COVERED with the test that covers it.
    assert {(e.method, e.path) for e in ENDPOINTS} == set(COVERED)


def _refused(verdict: dict[str, Any], reason: str) -> None:
    assert verdict["granted"] is False, verdict
    assert verdict["reason"] == reason, verdict
    assert isinstance(verdict["detail"], str) and verdict["detail"], verdict
    assert "retry_after" in verdict


# --- channels and settings (admin) ----------------------------------------------------------------------


async def test_create_channel_answers_with_the_default_settings(api: Api) -> None:
    view = await api.create_channel("den")
    assert view["channel_id"] == "den"
    assert view["capacity"] == 100
    assert {tier: {k: v for k, v in rule.items() if k != "affordable"} for tier, rule in view["tiers"].items()} == (
        DEFAULT_TIERS
    )
    assert view["enabled"] is True
    assert view["paused"] is False
    assert view["daily_token_budget"] == 500_000
    assert view["personas_enabled_by_default"] is True
    assert set(view["personas"]) == {"hana", "kai", "mio"}
    assert all(p["enabled"] and not p["muted"] for p in view["personas"].values())


async def test_create_channel_with_initial_settings(api: Api) -> None:
    view = await api.create_channel("den", capacity=200, topic="  cats  ", tiers={"long": {"cost": 150}})
    assert view["capacity"] == 200
    assert view["topic"] == "cats"
    assert view["tiers"]["long"]["cost"] == 150
    assert (await api.status("admin", "den"))["level"] == 200


async def test_create_channel_again_keeps_its_state(api: Api) -> None:
    await api.consume("hana", "hello everyone", tier="remark")
    before = await api.settings()
    again = await api.create_channel(CHANNEL)
    assert again == before
    assert await api.level() == 40
    assert await api.texts() == ["hello everyone"]


async def test_create_channel_again_with_settings_changes_them(api: Api) -> None:
    # PUT is create-or-update: settings sent for an existing channel are applied, not silently ignored.
    await api.consume("hana", "hello everyone", tier="remark")
    again = await api.create_channel(CHANNEL, capacity=150, topic="tea")
    assert (again["capacity"], again["topic"]) == (150, "tea")
    assert (await api.settings())["capacity"] == 150
    assert await api.level() == 90
    assert await api.texts() == ["hello everyone"]


async def test_retract_after_a_capacity_cut_still_reports_the_cost_given_back(api: Api) -> None:
    seq = (await api.consume("hana", "This post will fail.", tier="remark"))["message"]["seq"]
    await api.call("PATCH", f"{CH}/settings", "admin", json={"capacity": 60, "tiers": {"long": {"cost": 60}}})
    retracted = await api.call("POST", f"{CH}/messages/{seq}/retract", "hana")
    assert retracted == {"seq": seq, "refunded": 60, "level": 60}


async def test_list_channels_shows_each_channel_and_its_last_seq(api: Api) -> None:
    await api.create_channel("den", enabled=False)
    await api.observe("one")
    await api.observe("two")
    listed = await api.call("GET", "/v1/channels", "admin")
    assert sorted(listed["channels"], key=lambda c: c["channel_id"]) == [
        {"channel_id": "den", "enabled": False, "last_seq": 0},
        {"channel_id": CHANNEL, "enabled": True, "last_seq": 2},
    ]


async def test_get_settings_matches_what_create_answered(api: Api) -> None:
    created = await api.create_channel(CHANNEL)
    assert await api.settings() == created


async def test_patch_settings_changes_only_the_fields_given(api: Api) -> None:
    before = await api.settings()
    after = await api.patch(capacity=150, tiers={"long": {"cost": 100, "max_length": 300}}, topic=" travel ")
    assert after["capacity"] == 150
    assert after["tiers"]["long"] == {**before["tiers"]["long"], "cost": 100, "max_length": 300}
    assert after["topic"] == "travel"
    untouched = {k: v for k, v in after.items() if k not in {"capacity", "tiers", "topic"}}
    assert untouched == {k: v for k, v in before.items() if k not in {"capacity", "tiers", "topic"}}
    assert after["tiers"]["remark"] == before["tiers"]["remark"]
    assert await api.settings() == after
    status = await api.status()
    assert (status["capacity"], status["level"], status["topic"]) == (150, 150, "travel")


async def test_patch_settings_null_budget_means_no_budget(api: Api) -> None:
    view = await api.patch(daily_token_budget=None)
    assert view["daily_token_budget"] is None
    assert (await api.status())["daily_token_budget"] is None


async def test_paused_channel_refuses_with_reason_paused(api: Api) -> None:
    await api.patch(paused=True)
    verdict = await api.claim("hana", "aizuchi")
    _refused(verdict, "paused")
    assert verdict["retry_after"] is None  # waiting alone will not unpause the channel
    await api.patch(paused=False)
    assert (await api.claim("hana", "aizuchi"))["granted"] is True


async def test_disabled_channel_refuses_with_reason_not_enabled(api: Api) -> None:
    await api.patch(enabled=False)
    _refused(await api.consume("hana", "hi", tier="aizuchi"), "not_enabled")


async def test_disabled_persona_is_refused_and_sees_it_in_status(api: Api) -> None:
    view = await api.call("PUT", f"{CH}/personas/kai", "admin", json={"enabled": False})
    assert view["personas"]["kai"] == {"enabled": False, "muted": False, "display_name": "kai", "cannot_post": None}
    _refused(await api.claim("kai", "aizuchi"), "not_enabled")
    assert (await api.status("kai"))["you"]["enabled"] is False
    held = await api.claim("hana", "aizuchi")
    assert held["granted"] is True
    await api.release("hana", held["claim"]["claim_id"])  # so that no message of hana's is on its way
    await api.call("PUT", f"{CH}/personas/kai", "admin", json={"enabled": True})
    assert (await api.claim("kai", "aizuchi"))["granted"] is True


async def test_muted_persona_is_refused_until_unmuted(api: Api) -> None:
    view = await api.call("PUT", f"{CH}/personas/mio", "admin", json={"muted": True})
    assert view["personas"]["mio"]["muted"] is True
    assert view["personas"]["mio"]["enabled"] is True  # a patch leaves the other flag alone
    _refused(await api.consume("mio", "hmm", tier="aizuchi"), "muted")
    assert (await api.status("mio"))["you"]["muted"] is True
    await api.call("PUT", f"{CH}/personas/mio", "admin", json={"muted": False})
    assert (await api.consume("mio", "hmm", tier="aizuchi"))["granted"] is True


async def test_personas_off_by_default_need_enabling_one_by_one(api: Api) -> None:
    await api.patch(personas_enabled_by_default=False)
    _refused(await api.claim("hana", "aizuchi"), "not_enabled")
    await api.call("PUT", f"{CH}/personas/hana", "admin", json={"enabled": True})
    assert (await api.claim("hana", "aizuchi"))["granted"] is True
    _refused(await api.claim("kai", "aizuchi"), "not_enabled")


async def test_clear_history_empties_it_and_seq_keeps_counting(api: Api) -> None:
    await api.observe("one")
    await api.consume("hana", "two", tier="remark")
    await api.observe("three")
    assert await api.call("DELETE", f"{CH}/history", "admin", expect=204) is None
    page = await api.history()
    assert page["messages"] == []
    assert page["has_more"] is False
    status = await api.status()
    assert status["last_seq"] == 3
    assert status["level"] == 40  # the spend ledger is not history: the remark's cost is still held
    assert (await api.observe("four"))["seq"] == 4
    assert [m["seq"] for m in (await api.history())["messages"]] == [4]


# --- memories -------------------------------------------------------------------------------------------
# The details (bounds, the newest kept, restarts, several processes) are in test_memory.py and test_memories.py.


async def _pass_with_notes(api: Api, persona: str, topic: str) -> int:
    seq = int((await api.observe(f"what do you think, {persona}?"))["seq"])
    claim = (await api.claim(persona, "remark"))["claim"]
    state = {"topic": topic, "open_questions": [], "agreed": [], "speakers": []}
    await api.call("DELETE", f"{CH}/claims/{claim['claim_id']}", persona, json={"memory": {"seq": seq, "state": state}})
    return seq


async def test_memory_lists_the_notes_the_personas_kept(api: Api) -> None:
    seq = await _pass_with_notes(api, "hana", "tea")
    found = await api.call("GET", f"{CH}/memory", "admin")
    assert [(m["persona"], m["seq"], m["state"]["topic"]) for m in found["memories"]] == [("hana", seq, "tea")]


async def test_reset_memory_forgets_every_persona_s_notes(api: Api) -> None:
    await _pass_with_notes(api, "hana", "tea")
    await _pass_with_notes(api, "kai", "cake")
    assert await api.call("DELETE", f"{CH}/memory", "admin", expect=204) is None
    assert (await api.call("GET", f"{CH}/memory", "admin"))["memories"] == []


async def test_a_claim_asked_with_notes_brings_the_personas_own_when_granted(api: Api) -> None:
    seq = await _pass_with_notes(api, "hana", "tea")
    await _pass_with_notes(api, "kai", "cake")
    granted = await api.call("POST", f"{CH}/claims", "hana", json={"tier": "aizuchi", "notes": True})
    assert granted["granted"] is True
    assert (granted["memory"]["persona"], granted["memory"]["seq"], granted["memory"]["state"]["topic"]) == (
        "hana",
        seq,
        "tea",
    )
    # Not asked: none. Refused (a nod is on its way): none either. None kept yet: null.
    await api.call("DELETE", f"{CH}/claims/{granted['claim']['claim_id']}", "hana")
    plain = await api.call("POST", f"{CH}/claims", "kai", json={"tier": "aizuchi"})
    assert plain["granted"] is True and plain["memory"] is None
    refused = await api.call("POST", f"{CH}/claims", "hana", json={"tier": "aizuchi", "notes": True})
    assert refused["granted"] is False and refused["memory"] is None
    await api.call("DELETE", f"{CH}/claims/{plain['claim']['claim_id']}", "kai")
    fresh = await api.call("POST", f"{CH}/claims", "mio", json={"tier": "aizuchi", "notes": True})
    assert fresh["granted"] is True and fresh["memory"] is None


async def test_reset_memory_of_one_persona_keeps_the_others(api: Api) -> None:
    await _pass_with_notes(api, "hana", "tea")
    await _pass_with_notes(api, "kai", "cake")
    assert await api.call("DELETE", f"{CH}/memory/hana", "admin", expect=204) is None
    assert [m["persona"] for m in (await api.call("GET", f"{CH}/memory", "admin"))["memories"]] == ["kai"]


# --- status ---------------------------------------------------------------------------------------------


async def test_status_for_a_persona_has_every_field(api: Api, clock: FakeClock) -> None:
    status = await api.status("hana")
    assert status == {
        "channel_id": CHANNEL,
        "now": clock.value,
        "level": 100,
        "capacity": 100,
        "enabled": True,
        "paused": False,
        "topic": "",
        "tiers": {
            tier: {**rule, "affordable": True, "may_claim": True, "reason": None, "detail": None, "retry_after": None}
            for tier, rule in DEFAULT_TIERS.items()
        },
        "refunds": [],
        "bot_streak": 0,
        "idle_cap": 12,
        "priority": [],
        "priority_until": None,
        "tokens_today": 0,
        "daily_token_budget": 500_000,
        "last_seq": 0,
        "stale_tolerance": 1,
        "claims_held": {},
        "you": {"enabled": True, "muted": False, "display_name": "hana", "cannot_post": None},  # its id until named
        "claim": None,
    }


async def test_status_says_per_tier_what_the_caller_may_claim_as_a_claim_would_be_answered(api: Api) -> None:
    await api.claim("kai", "remark")  # the pool holds 40: a nod yes, a remark no, and not while kai is about to speak

    status = await api.status("hana")
    refused = await api.claim("hana", "remark")

    remark = status["tiers"]["remark"]
    assert (remark["may_claim"], remark["reason"]) == (False, refused["reason"])
    assert remark["detail"] == refused["detail"]
    assert (status["tiers"]["aizuchi"]["may_claim"], status["tiers"]["aizuchi"]["reason"]) == (False, "nodded")


async def test_status_shows_the_callers_own_claim_only(api: Api) -> None:
    granted = await api.claim("hana", "remark")
    assert (await api.status("hana"))["claim"] == granted["claim"]
    assert (await api.status("kai"))["claim"] is None


async def test_status_counts_the_live_claims_of_everyone_by_tier(api: Api, clock: FakeClock) -> None:
    await api.patch(capacity=300)
    assert (await api.claim("hana", "aizuchi"))["granted"] is True
    # Refused claims are not counted: one nod at a time, and a nod claimed a moment ago goes first.
    _refused(await api.claim("kai", "aizuchi"), "nodded")
    _refused(await api.claim("kai", "remark"), "nodded")
    clock.advance(3)
    assert (await api.claim("kai", "remark"))["granted"] is True
    spoken = (await api.claim("mio", "long"))["claim"]["claim_id"]
    await api.speak("mio", spoken, "hm")  # spoken: no longer held
    assert (await api.claim("mio", "remark"))["granted"] is True
    assert (await api.status("kai"))["claims_held"] == {"aizuchi": 1, "remark": 2}
    clock.advance(30)  # every claim lapses
    assert (await api.status("admin"))["claims_held"] == {}


async def test_status_for_the_admin_has_no_you_or_claim(api: Api) -> None:
    await api.claim("hana", "remark")
    status = await api.status("admin")
    assert status["you"] is None
    assert status["claim"] is None
    assert status["level"] == 40


async def test_status_marks_tiers_the_level_cannot_afford(api: Api) -> None:
    await api.consume("hana", "a long one", tier="long")
    tiers = (await api.status())["tiers"]
    assert {tier: rule["affordable"] for tier, rule in tiers.items()} == {
        "aizuchi": True,
        "remark": False,
        "long": False,
    }


# --- claim, speak, release ------------------------------------------------------------------------------


async def test_a_persona_that_cannot_post_says_so_and_hands_its_floor_back(api: Api) -> None:
    await api.observe("Hana, Kai: thoughts?", mentions=["hana", "kai"])
    assert (await api.status("mio"))["priority"] == ["hana", "kai"]

    why = "it lacks the Send Messages permission there"
    view = await api.call("PUT", f"{CH}/standing", "hana", json={"cannot_post": why})

    assert view == {"enabled": True, "muted": False, "display_name": "hana", "cannot_post": why}
    assert (await api.status("mio"))["priority"] == ["kai"]
    assert (await api.settings())["personas"]["hana"]["cannot_post"] == why
    assert (await api.status("hana"))["you"]["cannot_post"] == why
    back = await api.call("PUT", f"{CH}/standing", "hana", json={"cannot_post": None})
    assert back["cannot_post"] is None


async def test_claim_holds_the_tiers_cost(api: Api, clock: FakeClock) -> None:
    verdict = await api.claim("hana", "remark")
    assert verdict["granted"] is True
    assert verdict["level"] == 40
    assert verdict["capacity"] == 100
    assert verdict["reason"] is None
    claim = verdict["claim"]
    assert claim["persona"] == "hana"
    assert (claim["tier"], claim["cost"], claim["state"]) == ("remark", 60, "held")
    assert claim["expires_at"] == clock.value + 30.0
    assert await api.level() == 40


async def test_a_claim_brings_the_personas_own_last_lines_when_asked(api: Api, clock: FakeClock) -> None:
    await api.patch(capacity=1000)
    for text in ("One.", "Two.", "Three."):
        await api.consume("hana", text, tier="remark")
        await api.observe(f"{text} said Yuki")
    gone = (await api.consume("hana", "Four.", tier="remark"))["message"]["seq"]
    await api.call("POST", f"{CH}/messages/{gone}/retract", "hana")  # its post failed: never shown

    plain = await api.claim("kai", "aizuchi")
    clock.advance(31)
    asked = await api.claim("hana", "remark", own_lines=2)

    assert plain["own_lines"] is None
    assert [(m["author_id"], m["text"]) for m in asked["own_lines"]] == [("hana", "Two."), ("hana", "Three.")]


async def test_speak_in_the_claimed_tier(api: Api, clock: FakeClock) -> None:
    claim_id = (await api.claim("hana", "remark"))["claim"]["claim_id"]
    clock.advance(2)
    spoken = await api.speak("hana", claim_id, "I think we should go to the sea.")
    assert spoken["granted"] is True
    assert spoken["refunded"] == 0
    assert spoken["level"] == 40
    message = spoken["message"]
    assert message == {
        "seq": 1,
        "author_id": "hana",
        "author_kind": "persona",
        "author_name": "hana",
        "text": "I think we should go to the sea.",
        "at": clock.value,
        "tier": "remark",
        "cost": 60,
        "platform_message_id": None,
        "addressed": [],
        "images": [],
    }
    assert (await api.history())["messages"] == [message]
    assert (await api.status("hana"))["claim"] is None


async def test_speak_in_a_cheaper_tier_refunds_the_difference(api: Api) -> None:
    claim_id = (await api.claim("hana", "long"))["claim"]["claim_id"]
    assert await api.level() == 20
    spoken = await api.speak("hana", claim_id, "そうだね", tier="aizuchi")
    assert spoken["granted"] is True
    assert spoken["refunded"] == 75
    assert (spoken["message"]["tier"], spoken["message"]["cost"]) == ("aizuchi", 5)
    assert spoken["level"] == 95
    assert await api.level() == 95
    [message] = (await api.history())["messages"]
    assert (message["tier"], message["cost"], message["text"]) == ("aizuchi", 5, "そうだね")


async def test_speak_too_long_for_the_tier_is_refused_and_the_claim_stays(api: Api) -> None:
    claim_id = (await api.claim("hana", "aizuchi"))["claim"]["claim_id"]
    verdict = await api.speak("hana", claim_id, "this is far too long to be a nod at all")
    _refused(verdict, "too_long")
    assert verdict["message"] is None
    assert (await api.status("hana"))["claim"]["claim_id"] == claim_id
    assert await api.texts() == []
    assert (await api.speak("hana", claim_id, "right!"))["granted"] is True


async def test_speak_repeated_with_the_same_text_gets_the_same_answer(api: Api) -> None:
    claim_id = (await api.claim("hana", "remark"))["claim"]["claim_id"]
    first = await api.speak("hana", claim_id, "Shall we?")
    again = await api.speak("hana", claim_id, "Shall we?")
    assert again["granted"] is True
    assert again["message"] == first["message"]
    assert await api.texts() == ["Shall we?"]
    assert await api.level() == 40


async def test_release_refunds_the_claim_at_once(api: Api) -> None:
    claim_id = (await api.claim("hana", "long"))["claim"]["claim_id"]
    released = await api.release("hana", claim_id)
    assert released["granted"] is True
    assert released["level"] == 100
    assert (released["claim"]["claim_id"], released["claim"]["state"]) == (claim_id, "released")
    assert released["claim"]["expires_at"] is None
    assert await api.level() == 100
    assert (await api.status("hana"))["claim"] is None
    # Releasing again is harmless and refunds nothing more.
    assert (await api.release("hana", claim_id))["level"] == 100


async def test_a_new_claim_replaces_the_personas_previous_one(api: Api) -> None:
    first = (await api.claim("hana", "long"))["claim"]["claim_id"]
    second = await api.claim("hana", "aizuchi")
    assert second["granted"] is True
    assert second["level"] == 95
    assert (await api.status("hana"))["claim"]["claim_id"] == second["claim"]["claim_id"]
    await api.error("POST", f"{CH}/claims/{first}/speak", "hana", json={"text": "late"}, expect=409)


async def test_claim_lapses_after_its_ttl_and_the_level_recovers(api: Api, clock: FakeClock) -> None:
    claim_id = (await api.claim("hana", "long"))["claim"]["claim_id"]
    clock.advance(29.9)
    assert await api.level() == 20
    clock.advance(0.1)
    assert await api.level() == 100
    assert (await api.status("hana"))["claim"] is None
    # Speaking on a lapsed claim is judged afresh, like a one-step consume: it pays again, refunds nothing.
    spoken = await api.speak("hana", claim_id, "Sorry, I was thinking.")
    assert spoken["granted"] is True
    assert spoken["refunded"] == 0
    assert spoken["level"] == 20


async def test_refusal_is_http_200_with_reason_and_retry_hint(api: Api) -> None:
    await api.claim("hana", "long")
    verdict = await api.claim("kai", "remark")
    _refused(verdict, "insufficient")
    assert verdict["retry_after"] == 30.0  # hana's claim lapses then
    assert (verdict["level"], verdict["capacity"], verdict["claim"]) == (20, 100, None)
    assert await api.level() == 20


async def test_refused_persona_gets_the_floor_once_the_holder_releases(api: Api) -> None:
    held = (await api.claim("hana", "long"))["claim"]["claim_id"]
    _refused(await api.claim("kai", "remark"), "insufficient")
    await api.release("hana", held)
    assert (await api.claim("kai", "remark"))["granted"] is True


async def test_stale_reply_is_refused(api: Api) -> None:
    for text in ("first", "second", "third"):
        await api.observe(text)
    # Two substantive messages arrived after seq 1 and the tolerance is one.
    verdict = await api.claim("hana", "remark", based_on_seq=1)
    _refused(verdict, "stale")
    assert await api.level() == 100
    held = await api.claim("hana", "remark", based_on_seq=2)
    assert held["granted"] is True
    await api.release("hana", held["claim"]["claim_id"])  # nobody nods while hana is about to speak
    # A nod is for the latest message: one message since is enough to make it stale.
    _refused(await api.consume("kai", "yes", tier="aizuchi", based_on_seq=2), "stale")
    assert (await api.consume("kai", "yes", tier="aizuchi", based_on_seq=3))["granted"] is True


async def test_idle_cap_stops_the_bots_until_a_human_speaks(api: Api) -> None:
    await api.patch(idle_cap=2)
    assert (await api.consume("hana", "ok", tier="aizuchi"))["granted"] is True
    assert (await api.consume("kai", "I see what you mean.", tier="remark"))["granted"] is True
    _refused(await api.consume("mio", "ok", tier="aizuchi"), "idle_cap")
    assert (await api.status())["bot_streak"] == 2
    await api.observe("anyone there?")
    assert (await api.status())["bot_streak"] == 0
    assert (await api.consume("mio", "ok", tier="aizuchi"))["granted"] is True


# --- consume --------------------------------------------------------------------------------------------


async def test_consume_by_tier_spends_the_tiers_cost(api: Api) -> None:
    spoken = await api.consume("kai", "なるほど", tier="aizuchi")
    assert spoken["granted"] is True
    assert spoken["refunded"] == 0
    assert (spoken["message"]["tier"], spoken["message"]["cost"]) == ("aizuchi", 5)
    assert spoken["level"] == 95
    assert await api.texts() == ["なるほど"]


@pytest.mark.parametrize(
    ("amount", "tier"),
    [(5, "aizuchi"), (59, "aizuchi"), (60, "remark"), (79, "remark"), (80, "long"), (100, "long")],
)
async def test_consume_by_amount_buys_the_dearest_tier_it_covers(api: Api, amount: int, tier: str) -> None:
    spoken = await api.consume("kai", "ok", amount=amount)
    assert spoken["granted"] is True
    assert (spoken["message"]["tier"], spoken["message"]["cost"]) == (tier, amount)
    assert await api.level() == 100 - amount


async def test_consume_refunds_after_the_recovery_delay(api: Api, clock: FakeClock) -> None:
    spent_at = clock.value
    await api.consume("hana", "Let me tell you about my trip.", tier="remark")
    status = await api.status()
    assert status["level"] == 40
    assert status["refunds"] == [{"at": spent_at + 5.0, "amount": 60}]
    clock.advance(4.9)
    assert await api.level() == 40
    clock.advance(0.1)
    status = await api.status()
    assert status["level"] == 100
    assert status["refunds"] == []


async def test_consume_refused_says_when_the_pool_can_afford_it(api: Api, clock: FakeClock) -> None:
    await api.consume("hana", "A long story, really.", tier="long")
    clock.advance(2)
    verdict = await api.consume("kai", "Me too!", tier="remark")
    _refused(verdict, "insufficient")
    assert verdict["retry_after"] == pytest.approx(3.0)
    assert verdict["message"] is None
    clock.advance(verdict["retry_after"])
    assert (await api.consume("kai", "Me too!", tier="remark"))["granted"] is True


# --- history --------------------------------------------------------------------------------------------


async def test_history_pages_with_after_and_limit(api: Api) -> None:
    for number in range(1, 6):
        await api.observe(f"message {number}")

    async def page(after: int, limit: int) -> tuple[list[int], int, bool]:
        body = await api.call("GET", f"{CH}/history?after={after}&limit={limit}", "kai")
        assert body["channel_id"] == CHANNEL
        return [m["seq"] for m in body["messages"]], body["next_after"], body["has_more"]

    assert await page(0, 2) == ([1, 2], 2, True)
    assert await page(2, 2) == ([3, 4], 4, True)
    assert await page(4, 2) == ([5], 5, False)
    assert await page(5, 2) == ([], 5, False)
    assert await page(0, 5) == ([1, 2, 3, 4, 5], 5, False)


async def test_history_defaults_to_the_first_fifty(api: Api) -> None:
    for number in range(55):
        await api.observe(f"m{number}")
    body = await api.call("GET", f"{CH}/history", "admin")
    assert [m["seq"] for m in body["messages"]] == list(range(1, 51))
    assert (body["next_after"], body["has_more"]) == (50, True)


# --- observed messages ----------------------------------------------------------------------------------


async def test_observed_message_is_recorded_once_per_platform_id(api: Api) -> None:
    first = await api.observe("hello!", platform_message_id="d-100")
    assert first == {"seq": 1, "created": True}
    again = await api.observe("hello!", platform_message_id="d-100")
    assert again == {"seq": 1, "created": False}
    [message] = (await api.history())["messages"]
    assert message["platform_message_id"] == "d-100"
    assert (message["author_id"], message["author_kind"], message["author_name"]) == ("u1", "human", "Yuki")
    assert message["cost"] == 0
    assert message["tier"] is None


async def test_observed_messages_without_platform_id_are_each_recorded(api: Api) -> None:
    assert (await api.observe("lol"))["seq"] == 1
    assert (await api.observe("lol"))["seq"] == 2
    assert await api.texts() == ["lol", "lol"]


async def test_humans_do_not_lower_the_level(api: Api) -> None:
    await api.consume("hana", "Anyone up for karaoke?", tier="remark")
    for number in range(5):
        await api.observe(f"human {number}", platform_message_id=f"h{number}")
    status = await api.status()
    assert status["level"] == 40
    assert status["last_seq"] == 6


async def test_human_message_resets_the_bot_streak(api: Api) -> None:
    assert (await api.consume("hana", "ok", tier="aizuchi"))["granted"] is True
    assert (await api.consume("kai", "I see what you mean.", tier="remark"))["granted"] is True
    assert (await api.status())["bot_streak"] == 2
    await api.observe("hi bots")
    assert (await api.status())["bot_streak"] == 0


async def test_human_naming_a_persona_gives_it_priority(api: Api, clock: FakeClock) -> None:
    await api.observe("kai, what do you think?")
    [message] = (await api.history())["messages"]
    assert message["addressed"] == ["kai"]
    status = await api.status()
    assert status["priority"] == ["kai"]
    assert status["priority_until"] == clock.value + 20.0

    verdict = await api.claim("hana", "remark")
    _refused(verdict, "priority")
    assert verdict["retry_after"] == 20.0
    _refused(await api.consume("mio", "Actually, I think...", tier="long"), "priority")
    # Not even a nod: before kai answers, it would read as an answer to the question.
    _refused(await api.consume("hana", "ooh", tier="aizuchi"), "priority")
    _refused(await api.claim("mio", "aizuchi"), "priority")

    claim_id = (await api.claim("kai", "remark"))["claim"]["claim_id"]
    assert (await api.speak("kai", claim_id, "I think it is a great idea."))["granted"] is True
    assert (await api.status())["priority"] == []
    assert (await api.consume("hana", "ooh", tier="aizuchi"))["granted"] is True
    clock.advance(5)  # the remark's cost comes back, so only the floor could refuse now
    assert (await api.claim("mio", "remark"))["granted"] is True


async def test_an_addressed_persona_that_passes_twice_gives_the_floor_up(api: Api) -> None:
    await api.observe("kai, what do you think?")
    first = (await api.claim("kai", "remark"))["claim"]["claim_id"]
    await api.release("kai", first)
    # One pass is a try: the floor is still kai's.
    assert (await api.status())["priority"] == ["kai"]
    _refused(await api.claim("hana", "aizuchi"), "priority")
    second = (await api.claim("kai", "remark"))["claim"]["claim_id"]
    await api.release("kai", second)
    assert (await api.status())["priority"] == []
    assert (await api.claim("hana", "aizuchi"))["granted"] is True


async def test_one_nod_per_message(api: Api, clock: FakeClock) -> None:
    await api.observe("we went to the sea")
    held = (await api.claim("hana", "aizuchi"))["claim"]["claim_id"]
    verdict = await api.consume("kai", "nice", tier="aizuchi")
    _refused(verdict, "nodded")  # hana's nod is on its way
    assert verdict["retry_after"] == 30.0  # hana's claim lapses then
    assert (await api.speak("hana", held, "いいね"))["granted"] is True
    verdict = await api.claim("kai", "aizuchi")
    _refused(verdict, "nodded")  # a nod to a nod
    assert verdict["retry_after"] is None  # only a new message helps
    await api.observe("and it rained")
    assert (await api.consume("kai", "oh no", tier="aizuchi"))["granted"] is True


async def test_priority_passes_when_its_window_ends(api: Api, clock: FakeClock) -> None:
    await api.observe("hey", mentions=["mio"])
    _refused(await api.claim("hana", "remark"), "priority")
    clock.advance(20)
    assert (await api.status())["priority"] == []
    assert (await api.claim("hana", "remark"))["granted"] is True


async def test_a_mention_addresses_the_persona(api: Api) -> None:
    await api.observe("what about you?", mentions=["mio"])
    [message] = (await api.history())["messages"]
    assert message["addressed"] == ["mio"]
    assert (await api.status())["priority"] == ["mio"]


# --- personas -------------------------------------------------------------------------------------------


async def test_registered_display_name_and_aliases_address_the_persona(api: Api) -> None:
    result = await api.call(
        "PUT", "/v1/personas/kai", "kai", json={"display_name": "Kaito", "aliases": ["K-kun"]}, expect=204
    )
    assert result is None
    assert (await api.status("kai"))["you"]["display_name"] == "Kaito"
    assert (await api.settings())["personas"]["kai"]["display_name"] == "Kaito"

    await api.observe("Kaito, are you there?")
    await api.observe("and you, K-kun?")
    await api.observe("Kaitos are not a thing")  # a name inside a longer word does not count
    addressed = [m["addressed"] for m in (await api.history())["messages"]]
    assert addressed == [["kai"], ["kai"], []]

    spoken = await api.consume("kai", "Yes!", tier="aizuchi")
    assert spoken["message"]["author_name"] == "Kaito"


async def test_registering_again_replaces_the_names(api: Api) -> None:
    await api.call("PUT", "/v1/personas/mio", "mio", json={"display_name": "Mio"}, expect=204)
    await api.call("PUT", "/v1/personas/mio", "mio", json={"display_name": "Mii"}, expect=204)
    assert (await api.status("mio"))["you"]["display_name"] == "Mii"


# --- usage ----------------------------------------------------------------------------------------------


async def test_usage_accumulates_per_channel_and_day(api: Api) -> None:
    path = f"{CH}/usage"
    first = await api.call("POST", path, "hana", json={"prompt_tokens": 100, "completion_tokens": 20})
    assert first == {"tokens_today": 120, "daily_token_budget": 500_000}
    second = await api.call("POST", path, "kai", json={"prompt_tokens": 30, "completion_tokens": 0, "model": "m"})
    assert second["tokens_today"] == 150
    assert (await api.status())["tokens_today"] == 150
    # The prompt cache's share at its own price: 1,000 read at the model's 5%, 200 written at 1.25, 100 uncached.
    cached = {"prompt_tokens": 1_300, "completion_tokens": 10, "cache_read_tokens": 1_000, "cache_write_tokens": 200}
    third = await api.call("POST", path, "hana", json={**cached, "cache_read_rate": 0.05})
    assert third["tokens_today"] == 150 + 100 + 50 + 250 + 10
    # Said the default way (no rates): the built-in models' tenth and 1.25.
    fourth = await api.call(
        "POST", path, "kai", json={"prompt_tokens": 100, "completion_tokens": 0, "cache_read_tokens": 100}
    )
    assert fourth["tokens_today"] == third["tokens_today"] + 10
    more = {"prompt_tokens": 10, "completion_tokens": 0, "cache_read_tokens": 8, "cache_write_tokens": 8}
    refused = await api.call("POST", path, "kai", json=more, expect=422)
    assert "part of prompt_tokens" in str(refused)


async def test_spent_budget_refuses_until_the_next_utc_day(api: Api, clock: FakeClock) -> None:
    await api.patch(daily_token_budget=1_000)
    await api.call("POST", f"{CH}/usage", "hana", json={"prompt_tokens": 600, "completion_tokens": 399})
    assert (await api.claim("hana", "aizuchi"))["granted"] is True
    await api.call("POST", f"{CH}/usage", "hana", json={"prompt_tokens": 1, "completion_tokens": 0})
    midnight = (math.floor(clock.value / 86_400) + 1) * 86_400
    for verdict in (await api.claim("kai", "remark"), await api.consume("mio", "mm", tier="aizuchi")):
        _refused(verdict, "budget")
        assert verdict["retry_after"] == pytest.approx(midnight - clock.value, abs=0.001)
    clock.advance(midnight - clock.value)
    status = await api.status()
    assert status["tokens_today"] == 0
    assert (await api.claim("kai", "remark"))["granted"] is True


# --- retract and link -----------------------------------------------------------------------------------


async def test_retract_refunds_and_removes_the_message(api: Api) -> None:
    await api.observe("before")
    seq = (await api.consume("hana", "This post will fail.", tier="remark"))["message"]["seq"]
    await api.observe("after")
    assert await api.level() == 40
    retracted = await api.call("POST", f"{CH}/messages/{seq}/retract", "hana")
    assert retracted == {"seq": seq, "refunded": 60, "level": 100}
    assert await api.level() == 100
    assert await api.texts() == ["before", "after"]
    assert (await api.status())["last_seq"] == 3
    assert (await api.observe("next"))["seq"] == 4


async def test_retract_never_refunds_twice(api: Api) -> None:
    seq = (await api.consume("hana", "oops", tier="remark"))["message"]["seq"]
    await api.call("POST", f"{CH}/messages/{seq}/retract", "hana")
    await api.consume("kai", "hm", tier="aizuchi")
    response = await api.client.post(f"{CH}/messages/{seq}/retract", headers=auth("hana"))
    assert response.status in {200, 409}, await response.text()
    if response.status == 200:
        assert (await response.json())["refunded"] == 0
    assert await api.level() == 95


async def test_retract_after_the_refund_came_refunds_nothing(api: Api, clock: FakeClock) -> None:
    seq = (await api.consume("hana", "slow network", tier="remark"))["message"]["seq"]
    clock.advance(6)
    retracted = await api.call("POST", f"{CH}/messages/{seq}/retract", "hana")
    assert retracted == {"seq": seq, "refunded": 0, "level": 100}
    assert await api.texts() == []


async def test_retract_a_message_spoken_on_a_claim(api: Api) -> None:
    claim_id = (await api.claim("kai", "long"))["claim"]["claim_id"]
    seq = (await api.speak("kai", claim_id, "Here is what I think.", tier="remark"))["message"]["seq"]
    assert await api.level() == 40
    retracted = await api.call("POST", f"{CH}/messages/{seq}/retract", "kai")
    assert (retracted["refunded"], retracted["level"]) == (60, 100)


async def test_link_platform_id(api: Api) -> None:
    seq = (await api.consume("hana", "posted fine", tier="remark"))["message"]["seq"]
    linked = await api.call("PUT", f"{CH}/messages/{seq}/platform-id", "hana", json={"platform_message_id": "d-7"})
    assert (linked["seq"], linked["platform_message_id"], linked["text"]) == (seq, "d-7", "posted fine")
    [message] = (await api.history())["messages"]
    assert message["platform_message_id"] == "d-7"
    # Linking the same id again is a no-op; the arbiter bot seeing the post later records nothing new.
    again = await api.call("PUT", f"{CH}/messages/{seq}/platform-id", "hana", json={"platform_message_id": "d-7"})
    assert again == linked
    assert await api.observe("posted fine", platform_message_id="d-7") == {"seq": seq, "created": False}
    assert await api.texts() == ["posted fine"]


async def test_link_to_a_second_platform_id_conflicts(api: Api) -> None:
    seq = (await api.consume("hana", "posted fine", tier="remark"))["message"]["seq"]
    await api.call("PUT", f"{CH}/messages/{seq}/platform-id", "hana", json={"platform_message_id": "d-7"})
    before = await api.snapshot()
    error = await api.error(
        "PUT", f"{CH}/messages/{seq}/platform-id", "hana", json={"platform_message_id": "d-8"}, expect=409
    )
    assert error["field"] == "platform_message_id"
    assert await api.snapshot() == before


async def test_a_posted_message_cannot_be_retracted(api: Api) -> None:
    seq = (await api.consume("hana", "posted fine", tier="remark"))["message"]["seq"]
    await api.call("PUT", f"{CH}/messages/{seq}/platform-id", "hana", json={"platform_message_id": "d-7"})
    before = await api.snapshot()
    error = await api.error("POST", f"{CH}/messages/{seq}/retract", "hana", expect=409)
    assert error["field"] == "seq"
    assert await api.snapshot() == before


# --- meta -----------------------------------------------------------------------------------------------


async def test_health_needs_no_token(api: Api) -> None:
    assert await api.call("GET", "/v1/health", None) == {"ok": True}


async def test_personas_list_how_each_registered(api: Api) -> None:
    body = {"display_name": "Hana", "aliases": ["はな"], "color": "#f08a24", "platform_user_id": "9001"}
    await api.call("PUT", "/v1/personas/hana", "hana", json=body, expect=204)
    listed = await api.call("GET", "/v1/personas", "kai")
    unregistered = {"aliases": [], "color": None, "platform_user_id": None, "cannot_speak": None}
    assert listed["personas"] == [
        {"id": "hana", "kind": "persona", **body, "cannot_speak": None},
        {"id": "kai", "kind": "persona", "display_name": "kai", **unregistered},
        {"id": "mio", "kind": "persona", "display_name": "mio", **unregistered},
    ]


async def test_a_persona_that_cannot_speak_says_why_and_is_addressed_by_nobody_until_it_registers_again(
    api: Api,
) -> None:
    why = "the API refused the key in ANTHROPIC_API_KEY (profile 'anthropic')"
    await api.call("PUT", "/v1/personas/kai", "kai", json={"display_name": "Kai", "cannot_speak": why}, expect=204)
    await api.observe("Kai, are you there?")
    listed = await api.call("GET", "/v1/personas", "mio")
    assert [p["cannot_speak"] for p in listed["personas"] if p["id"] == "kai"] == [why]

    await api.call("PUT", "/v1/personas/kai", "kai", json={"display_name": "Kai"}, expect=204)  # started again
    await api.observe("Kai, now?")
    assert [m["addressed"] for m in (await api.history())["messages"]] == [[], ["kai"]]
    too_long = {"display_name": "Kai", "cannot_speak": "x" * 301}
    await api.call("PUT", "/v1/personas/kai", "kai", json=too_long, expect=422)


async def test_a_personas_own_post_seen_on_the_platform_links_to_its_grant(api: Api) -> None:
    # The platform's copy of a persona's message can arrive before the persona links it: it is the same message.
    seq = (await api.consume("hana", "Same here!", tier="aizuchi"))["message"]["seq"]
    author = {"author_id": "hana", "author_name": "Hana", "author_kind": "persona"}
    seen = await api.observe("Same here!", platform_message_id="d-77", **author)
    assert seen == {"seq": seq, "created": False}
    assert (await api.history())["messages"][-1]["platform_message_id"] == "d-77"
    assert await api.texts() == ["Same here!"]


async def test_an_edit_on_the_platform_changes_the_text_in_the_history(api: Api) -> None:
    await api.observe("helo everyone", platform_message_id="p1")
    edited = await api.call("PATCH", f"{CH}/platform-messages/p1", "admin", json={"text": "hello everyone"})
    assert (edited["seq"], edited["text"]) == (1, "hello everyone")
    assert await api.texts() == ["hello everyone"]


async def test_a_deletion_on_the_platform_removes_the_message_but_keeps_the_cost(api: Api) -> None:
    await api.observe("hi", platform_message_id="p1")
    posted = (await api.consume("hana", "A thought worth deleting.", tier="remark"))["message"]["seq"]
    await api.call("PUT", f"{CH}/messages/{posted}/platform-id", "hana", json={"platform_message_id": "p2"})
    await api.call("DELETE", f"{CH}/platform-messages/p2", "admin")
    assert await api.texts() == ["hi"]
    assert await api.level() == 40  # the turn was taken; the refund comes on time, not early
    again = await api.error("PATCH", f"{CH}/platform-messages/p2", "admin", json={"text": "x"}, expect=409)
    assert again["field"] == "seq"


COVERED: dict[tuple[str, str], object] = {
    ("POST", "/v1/channels/{channel_id}/consume"): test_consume_by_tier_spends_the_tiers_cost,
    ("POST", "/v1/channels/{channel_id}/claims"): test_claim_holds_the_tiers_cost,
    ("POST", "/v1/channels/{channel_id}/claims/{claim_id}/speak"): test_speak_in_the_claimed_tier,
    ("DELETE", "/v1/channels/{channel_id}/claims/{claim_id}"): test_release_refunds_the_claim_at_once,
    ("GET", "/v1/channels/{channel_id}/status"): test_status_for_a_persona_has_every_field,
    ("GET", "/v1/channels/{channel_id}/history"): test_history_pages_with_after_and_limit,
    ("POST", "/v1/channels/{channel_id}/messages"): test_observed_message_is_recorded_once_per_platform_id,
    ("POST", "/v1/channels/{channel_id}/messages/{seq}/retract"): test_retract_refunds_and_removes_the_message,
    ("PUT", "/v1/channels/{channel_id}/messages/{seq}/platform-id"): test_link_platform_id,
    ("POST", "/v1/channels/{channel_id}/usage"): test_usage_accumulates_per_channel_and_day,
    ("PUT", "/v1/channels/{channel_id}/standing"): test_a_persona_that_cannot_post_says_so_and_hands_its_floor_back,
    ("PUT", "/v1/personas/{persona_id}"): test_registered_display_name_and_aliases_address_the_persona,
    ("GET", "/v1/channels"): test_list_channels_shows_each_channel_and_its_last_seq,
    ("GET", "/v1/personas"): test_personas_list_how_each_registered,
    ("PATCH", "/v1/channels/{channel_id}/platform-messages/{platform_message_id}"): (
        test_an_edit_on_the_platform_changes_the_text_in_the_history
    ),
    ("DELETE", "/v1/channels/{channel_id}/platform-messages/{platform_message_id}"): (
        test_a_deletion_on_the_platform_removes_the_message_but_keeps_the_cost
    ),
    ("PUT", "/v1/channels/{channel_id}"): test_create_channel_answers_with_the_default_settings,
    ("GET", "/v1/channels/{channel_id}/settings"): test_get_settings_matches_what_create_answered,
    ("PATCH", "/v1/channels/{channel_id}/settings"): test_patch_settings_changes_only_the_fields_given,
    ("PUT", "/v1/channels/{channel_id}/personas/{persona_id}"): test_disabled_persona_is_refused_and_sees_it_in_status,
    ("DELETE", "/v1/channels/{channel_id}/history"): test_clear_history_empties_it_and_seq_keeps_counting,
    ("GET", "/v1/channels/{channel_id}/memory"): test_memory_lists_the_notes_the_personas_kept,
    ("DELETE", "/v1/channels/{channel_id}/memory"): test_reset_memory_forgets_every_persona_s_notes,
    ("DELETE", "/v1/channels/{channel_id}/memory/{persona_id}"): test_reset_memory_of_one_persona_keeps_the_others,
}
