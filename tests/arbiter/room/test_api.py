"""The room's JSON API: a snapshot to draw the room from, the person's messages, and the settings panel, which
goes through the same service method and gives the same errors as /v1's admin endpoint."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

from arbiter.contract import Tier
from arbiter.core.limits import ID_PATTERN, MAX_NAME_LENGTH, MAX_TEXT_LENGTH
from arbiter.room import human_id
from arbiter.room.routes import HISTORY_LIMIT
from tests.conftest import auth

if TYPE_CHECKING:
    from tests.arbiter.room.conftest import Room
    from tests.support.clock import FakeClock


async def test_snapshot_of_a_new_room(room: Room) -> None:
    snapshot = await room.snapshot("kitchen")
    settings = await room.service.settings("kitchen")
    status = await room.service.status("kitchen")
    assert snapshot["channel_id"] == "kitchen"
    assert snapshot["settings"] == settings.model_dump(mode="json")
    assert snapshot["status"] == status.model_dump(mode="json")
    assert snapshot["status"]["level"] == snapshot["status"]["capacity"] == 100
    assert [p["id"] for p in snapshot["personas"]] == ["hana", "kai", "mio"]
    assert snapshot["history"] == []
    assert snapshot["last_seq"] == 0


async def test_snapshot_shows_each_personas_name_and_colour(room: Room) -> None:
    await room.service.register_persona("hana", "はな", ["Hana"], color="#f08a24")
    personas = {p["id"]: p for p in (await room.snapshot())["personas"]}
    assert personas["hana"]["display_name"] == "はな"
    assert personas["hana"]["color"] == "#f08a24"
    # Not registered yet: shown by its id, and the page picks a colour.
    assert personas["kai"]["display_name"] == "kai"
    assert personas["kai"]["color"] is None


async def test_snapshot_has_the_recent_history_oldest_first(room: Room) -> None:
    for text in ("one", "two", "three"):
        await room.say(text)
    await room.service.consume("lobby", "kai", "うん", tier=Tier.AIZUCHI)
    snapshot = await room.snapshot()
    assert [m["text"] for m in snapshot["history"]] == ["one", "two", "three", "うん"]
    assert snapshot["history"][-1]["tier"] == "aizuchi"
    assert snapshot["last_seq"] == 4
    page = await room.service.history("lobby", after=0, limit=10)
    assert snapshot["history"] == [m.model_dump(mode="json") for m in page.messages]


async def test_snapshot_history_is_the_latest_messages_only(room: Room) -> None:
    for index in range(HISTORY_LIMIT + 5):
        await room.say(f"message {index}")
    history = (await room.snapshot())["history"]
    assert len(history) == HISTORY_LIMIT
    assert history[0]["text"] == "message 5"
    assert history[-1]["seq"] == HISTORY_LIMIT + 5


async def test_snapshot_status_is_the_admins_view_of_the_pool(room: Room, clock: FakeClock) -> None:
    await room.snapshot()
    await room.service.consume("lobby", "hana", "そうそう", tier=Tier.AIZUCHI)
    clock.advance(1)
    status = (await room.snapshot())["status"]
    assert status["level"] == 95
    assert status["refunds"] == [{"at": clock.value - 1 + 5.0, "amount": 5}]
    assert status["you"] is None and status["claim"] is None


async def test_say_records_a_human_message_that_costs_nothing(room: Room) -> None:
    result = await room.say("  What shall we cook tonight?  ")
    assert result == {"seq": 1, "created": True}
    (message,) = (await room.service.history("lobby")).messages
    assert message.author_kind == "human"
    assert message.author_name == "Yui"
    assert message.author_id == human_id("Yui")
    assert message.text == "What shall we cook tonight?"
    assert message.tier is None and message.cost == 0
    assert (await room.service.status("lobby")).level == 100


async def test_naming_a_persona_gives_it_the_floor(room: Room) -> None:
    await room.service.register_persona("hana", "はな", ["Hana"])
    await room.say("Hana, what do you think?")
    (message,) = (await room.service.history("lobby")).messages
    assert message.addressed == ["hana"]
    assert (await room.service.status("lobby")).priority == ["hana"]


async def test_a_person_named_like_a_persona_is_still_a_person(room: Room) -> None:
    await room.say("I am not a bot", name="hana")
    (message,) = (await room.service.history("lobby")).messages
    assert message.author_kind == "human"
    assert message.author_id != "hana"


@pytest.mark.parametrize("name", ["Yui", "yui", "ゆい", "Ann-Lee O'Neil", "x" * MAX_NAME_LENGTH, "🙂"])
def test_a_persons_author_id_is_a_valid_id_that_never_collides_with_a_persona(name: str) -> None:
    author_id = human_id(name)
    assert re.match(ID_PATTERN, author_id)
    assert author_id.startswith("room.")
    assert human_id(name) == author_id
    assert human_id(name.upper()) == author_id  # the same person, however they capitalise their name


def test_different_names_get_different_author_ids() -> None:
    names = ["ゆい", "けん", "Yui", "Ken", "Yui!", "yui?"]
    # "Yui!" and "yui?" differ in their digest although their readable part is the same.
    assert len({human_id(name) for name in names}) == len(names)


async def test_say_accepts_text_and_name_at_their_limits(room: Room) -> None:
    await room.say("あ" * MAX_TEXT_LENGTH, name="n" * MAX_NAME_LENGTH)
    (message,) = (await room.service.history("lobby")).messages
    assert len(message.text) == MAX_TEXT_LENGTH


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"name": "Yui", "text": ""}, 422, "text"),
        ({"name": "Yui", "text": " \n\t "}, 422, "text"),
        ({"name": "Yui", "text": "x" * (MAX_TEXT_LENGTH + 1)}, 422, "text"),
        ({"name": "Yui", "text": 42}, 422, "text"),
        ({"name": "Yui"}, 422, "text"),
        ({"text": "hello"}, 422, "name"),
        ({"name": "", "text": "hello"}, 422, "name"),
        ({"name": "   ", "text": "hello"}, 422, "name"),
        ({"name": "x" * (MAX_NAME_LENGTH + 1), "text": "hello"}, 422, "name"),
        ({"name": "Yui\nKen", "text": "hello"}, 422, "name"),
        ({"name": "Yui", "text": "hello", "tier": "long"}, 422, "tier"),
        (["Yui", "hello"], 400, None),
    ],
)
async def test_say_refuses_bad_input_naming_the_field(room: Room, body: Any, status: int, field: str | None) -> None:
    error = await room.error("POST", "/room/api/lobby/say", json=body, expect=status)
    assert error.get("field") == field
    assert (await room.service.history("lobby")).messages == []


async def test_say_refuses_malformed_json(room: Room) -> None:
    error = await room.error(
        "POST", "/room/api/lobby/say", data=b"{not json", headers={"Content-Type": "application/json"}, expect=400
    )
    assert error["code"] == "malformed_json"


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_say_is_a_post(room: Room, method: str) -> None:
    error = await room.error(method, "/room/api/lobby/say", expect=405)
    assert error["code"] == "method_not_allowed"


@pytest.mark.parametrize("path", ["snapshot", "say", "settings", "events"])
async def test_the_api_refuses_a_room_name_that_cannot_be(room: Room, path: str) -> None:
    method = {"say": "POST", "settings": "PATCH"}.get(path, "GET")
    error = await room.error(method, f"/room/api/-nope/{path}", json={}, expect=422)
    assert error["field"] == "channel_id"
    assert room.opened == []


async def test_settings_change_the_channel(room: Room) -> None:
    changed = await room.patch({"capacity": 120, "tiers": {"aizuchi": {"cost": 7, "recovery_s": 2}}, "idle_cap": 4})
    settings = await room.service.settings("lobby")
    assert changed == settings.model_dump(mode="json")
    assert settings.capacity == 120
    assert settings.tiers["aizuchi"].cost == 7
    assert settings.tiers["aizuchi"].recovery_s == 2.0
    assert settings.tiers["remark"].cost == 60  # untouched
    assert settings.idle_cap == 4
    assert (await room.snapshot())["settings"] == changed


async def test_a_changed_tier_cost_is_what_a_persona_then_pays(room: Room) -> None:
    await room.patch({"tiers": {"aizuchi": {"cost": 9}}})
    result = await room.service.consume("lobby", "hana", "へえ", tier=Tier.AIZUCHI)
    assert result.granted and result.message is not None
    assert result.message.cost == 9
    assert result.level == 91


async def test_pause_and_resume(room: Room) -> None:
    assert (await room.patch({"paused": True}))["paused"] is True
    refused = await room.service.consume("lobby", "hana", "へえ", tier=Tier.AIZUCHI)
    assert not refused.granted and refused.reason == "paused"
    assert (await room.patch({"paused": False}))["paused"] is False
    assert (await room.service.consume("lobby", "hana", "へえ", tier=Tier.AIZUCHI)).granted


REFUSED_SETTINGS: list[tuple[Any, str]] = [
    ({"capacity": 0}, "capacity"),
    ({"capacity": "100"}, "capacity"),
    ({"capacity": None}, "capacity"),
    ({"capacity": 50}, "tiers.remark.cost"),
    ({"tiers": {"remark": {"cost": "lots"}}}, "tiers.remark.cost"),
    ({"tiers": {"aizuchi": {"cost": 0}}}, "tiers.aizuchi.cost"),
    ({"tiers": {"aizuchi": {"cost": 70}}}, "tiers.remark.cost"),
    ({"tiers": {"shout": {"cost": 5}}}, "tiers.shout"),
    ({"tiers": {"long": {"recovery_s": -1}}}, "tiers.long.recovery_s"),
    ({"idle_cap": 1.5}, "idle_cap"),
    ({"paused": "yes"}, "paused"),
    ({"volume": 11}, "volume"),
]


@pytest.mark.parametrize(("changes", "field"), REFUSED_SETTINGS)
async def test_refused_settings_name_the_field_and_change_nothing(room: Room, changes: Any, field: str) -> None:
    before = (await room.snapshot())["settings"]
    error = await room.error("PATCH", "/room/api/lobby/settings", json=changes, expect=422)
    assert error["field"] == field
    assert (await room.service.settings("lobby")).model_dump(mode="json") == before


@pytest.mark.parametrize(("changes", "field"), REFUSED_SETTINGS)
async def test_refused_settings_get_the_same_error_as_the_admin_api(room: Room, changes: Any, field: str) -> None:
    await room.snapshot()
    from_room = await room.call("PATCH", "/room/api/lobby/settings", json=changes, expect=422)
    from_api = await room.call("PATCH", "/v1/channels/lobby/settings", json=changes, headers=auth("admin"), expect=422)
    assert from_room == from_api


# --- the room's state: what the page shows beside the conversation --------------------------------------------


async def test_state_is_the_snapshot_without_the_history(room: Room) -> None:
    await room.say("hello")
    snapshot = await room.snapshot()
    state = await room.call("GET", "/room/api/lobby/state")
    assert state == {key: value for key, value in snapshot.items() if key not in {"history", "last_seq"}}
    assert state["held_back"] == {}


async def test_state_says_which_personas_are_held_back_and_why(room: Room) -> None:
    await room.snapshot()  # opens the room
    await room.service.set_persona("lobby", "mio", muted=True)
    held_back = (await room.call("GET", "/room/api/lobby/state"))["held_back"]
    assert {pid: why["reason"] for pid, why in held_back.items()} == {"mio": "muted"}

    await room.patch({"paused": True})
    held_back = (await room.call("GET", "/room/api/lobby/state"))["held_back"]
    assert {pid: why["reason"] for pid, why in held_back.items()} == {"hana": "paused", "kai": "paused", "mio": "muted"}


async def test_state_says_when_the_bots_have_had_their_turns(room: Room) -> None:
    await room.patch({"idle_cap": 1})
    await room.say("hello")
    await room.service.consume("lobby", "kai", "うん", tier=Tier.AIZUCHI)
    held_back = (await room.call("GET", "/room/api/lobby/state"))["held_back"]
    assert {why["reason"] for why in held_back.values()} == {"idle_cap"}
    assert set(held_back) == {"hana", "kai", "mio"}
    assert all(why["retry_after"] is None for why in held_back.values())  # only a person's message lifts it
    await room.say("and now?")
    assert (await room.call("GET", "/room/api/lobby/state"))["held_back"] == {}


async def test_state_shows_each_personas_tokens_with_the_prompt_caches_share(room: Room) -> None:
    await room.call("GET", "/room/api/lobby/state")  # the room opens its channel on the first visit
    await room.service.report_usage("lobby", "hana", 1_300, 40, cache_read_tokens=1_100, cache_write_tokens=0)
    await room.service.report_usage("lobby", "hana", 1_250, 30, cache_read_tokens=0, cache_write_tokens=1_100)

    state = await room.call("GET", "/room/api/lobby/state")

    assert state["usage"] == [
        {
            "persona": "hana",
            "requests": 2,
            "prompt_tokens": 2_550,
            "completion_tokens": 70,
            "cache_read_tokens": 1_100,
            "cache_write_tokens": 1_100,
        }
    ]
    # 350 uncached + 110 read + 1,375 written + 70 out.
    assert state["status"]["tokens_today"] == 350 + 110 + 1_375 + 70


async def test_state_says_when_a_spent_budget_comes_back(room: Room, clock: FakeClock) -> None:
    midnight = (clock.value // 86_400 + 1) * 86_400  # the next UTC midnight
    clock.advance(midnight - clock.value - 3600)
    await room.patch({"daily_token_budget": 100})
    await room.service.report_usage("lobby", "hana", 90, 10)
    held_back = (await room.call("GET", "/room/api/lobby/state"))["held_back"]
    assert {pid: (why["reason"], why["retry_after"]) for pid, why in held_back.items()} == {
        pid: ("budget", 3600.0) for pid in ("hana", "kai", "mio")
    }


# --- memory -----------------------------------------------------------------------------------------------


async def _noted(room: Room, persona: str, topic: str) -> None:
    from arbiter import contract as wire

    seq = (await room.say(f"{persona}, what's for dinner?"))["seq"]
    claimed = await room.service.claim("lobby", persona, Tier.REMARK)
    assert claimed.claim is not None, claimed
    notes = wire.MemoryUpdate(seq=seq, state=wire.DialogueState(topic=topic))
    await room.service.release("lobby", persona, claimed.claim.claim_id, memory=notes)


async def test_the_room_shows_each_personas_notes_and_forgets_them(room: Room) -> None:
    await _noted(room, "hana", "dinner")
    await _noted(room, "kai", "dessert")
    shown = {m["persona"]: m["state"]["topic"] for m in (await room.snapshot())["memories"]}

    await room.call("DELETE", "/room/api/lobby/memory/kai", expect=204)
    after_one = [m["persona"] for m in (await room.call("GET", "/room/api/lobby/state"))["memories"]]
    await room.call("DELETE", "/room/api/lobby/memory", expect=204)
    after_all = (await room.call("GET", "/room/api/lobby/state"))["memories"]

    assert shown == {"hana": "dinner", "kai": "dessert"}
    assert after_one == ["hana"]
    assert after_all == []


async def test_forgetting_an_unknown_personas_notes_is_named(room: Room) -> None:
    error = await room.error("DELETE", "/room/api/lobby/memory/nobody", expect=404)
    assert error["field"] == "persona"
    error = await room.error("DELETE", "/room/api/lobby/memory/no%20body", expect=422)
    assert error["field"] == "persona_id"
