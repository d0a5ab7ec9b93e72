"""The personas' memories (dialogue states) through the HTTP API: stored with a speech or a release, the newest kept,
read back by the persona (its own) and the admin (all), reset by the admin, gone with the history, bounded."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from arbiter.contract import MAX_MEMORY_TOKENS
from tests.arbiter.api.conftest import CHANNEL

if TYPE_CHECKING:
    from tests.arbiter.api.conftest import Api

MEMORY = f"/v1/channels/{CHANNEL}/memory"
pytestmark = pytest.mark.usefixtures("lobby")


def notes(topic: str = "weekend plans", **extra: Any) -> dict[str, Any]:
    return {
        "topic": topic,
        "open_questions": ["Yuki: who brings the tea?"],
        "agreed": ["picnic on Saturday"],
        "speakers": [{"name": "Yuki", "note": "wants a picnic; will bring a blanket"}],
        **extra,
    }


async def memories(api: Api, who: str = "admin") -> dict[str, Any]:
    found = await api.call("GET", MEMORY, who)
    return {m["persona"]: m for m in found["memories"]}


async def test_a_speech_stores_the_notes_it_carries(api: Api, clock: Any) -> None:
    seq = (await api.observe("Picnic on Saturday? Who brings the tea?"))["seq"]
    claim = (await api.claim("hana", "remark"))["claim"]
    spoken = await api.speak("hana", claim["claim_id"], "I'll bring the tea!", memory={"seq": seq, "state": notes()})
    assert spoken["granted"] is True

    [stored] = (await api.call("GET", MEMORY, "hana"))["memories"]
    assert stored == {
        "channel_id": CHANNEL,
        "persona": "hana",
        "seq": seq,
        "state": notes(),
        "updated_at": clock(),
    }


async def test_a_release_stores_the_notes_and_a_persona_reads_only_its_own(api: Api) -> None:
    seq = (await api.observe("hello"))["seq"]
    for persona in ("hana", "kai"):
        claim = (await api.claim(persona, "remark"))["claim"]
        released = await api.call(
            "DELETE",
            f"/v1/channels/{CHANNEL}/claims/{claim['claim_id']}",
            persona,
            json={"memory": {"seq": seq, "state": notes(f"{persona}'s view")}},
        )
        assert released["granted"] is True

    assert {p: m["state"]["topic"] for p, m in (await memories(api)).items()} == {
        "hana": "hana's view",
        "kai": "kai's view",
    }
    assert list(await memories(api, "kai")) == ["kai"]  # written from its own point of view: not for the others
    assert (await api.call("GET", MEMORY, "mio"))["memories"] == []


async def test_a_refused_speech_stores_nothing(api: Api) -> None:
    seq = (await api.observe("hello"))["seq"]
    claim = (await api.claim("hana", "aizuchi"))["claim"]
    too_long = "a nod that goes on and on and on, far beyond what a nod may be"
    refused = await api.speak("hana", claim["claim_id"], too_long, memory={"seq": seq, "state": notes()})
    assert refused["reason"] == "too_long"
    assert await memories(api) == {}


async def test_older_notes_never_replace_newer_ones(api: Api) -> None:
    first = (await api.observe("one"))["seq"]
    second = (await api.observe("two"))["seq"]
    for seq, topic in ((second, "newer"), (first, "older, arriving late")):
        claim = (await api.claim("hana", "remark"))["claim"]
        await api.call(
            "DELETE",
            f"/v1/channels/{CHANNEL}/claims/{claim['claim_id']}",
            "hana",
            json={"memory": {"seq": seq, "state": notes(topic)}},
        )
    stored = (await memories(api))["hana"]
    assert (stored["seq"], stored["state"]["topic"]) == (second, "newer")


async def test_notes_ahead_of_the_history_are_refused_and_change_nothing(api: Api) -> None:
    seq = (await api.observe("hello"))["seq"]
    claim = (await api.claim("hana", "remark"))["claim"]
    before = await api.snapshot()
    error = await api.error(
        "POST",
        f"/v1/channels/{CHANNEL}/claims/{claim['claim_id']}/speak",
        "hana",
        json={"text": "Hi!", "memory": {"seq": seq + 5, "state": notes()}},
        expect=422,
    )
    assert error["field"] == "memory.seq"
    assert await api.snapshot() == before
    assert await memories(api) == {}


@pytest.mark.parametrize(
    ("state", "field"),
    [
        # Over the cap in tokens as a whole, though every part is within its own bounds.
        ({"speakers": [{"name": f"P{i}", "note": "x" * 290} for i in range(12)]}, "memory.state"),
        ({"open_questions": ["q"] * 9}, "memory.state.open_questions"),
        ({"topic": "t" * 301}, "memory.state.topic"),
        ({"speakers": [{"name": "Yuki"}]}, "memory.state.speakers.0.note"),
        ({"agreed": ["nul \u0000"]}, "memory.state.agreed.0"),
        ({"mood": "sunny"}, "memory.state.mood"),
    ],
)
async def test_notes_out_of_bounds_are_refused_naming_the_field(api: Api, state: Any, field: str) -> None:
    seq = (await api.observe("hello"))["seq"]
    claim = (await api.claim("hana", "remark"))["claim"]
    error = await api.error(
        "DELETE",
        f"/v1/channels/{CHANNEL}/claims/{claim['claim_id']}",
        "hana",
        json={"memory": {"seq": seq, "state": state}},
        expect=422,
    )
    assert error["field"] == field
    if field == "memory.state":
        assert f"cap of {MAX_MEMORY_TOKENS}" in error["message"]
    assert (await api.status("hana"))["claim"] is not None  # the claim is still held: nothing happened
    assert await memories(api) == {}


async def _remember(api: Api, persona: str) -> None:
    seq = (await api.observe(f"hello {persona}"))["seq"]
    claim = (await api.claim(persona, "remark"))["claim"]
    await api.call(
        "DELETE",
        f"/v1/channels/{CHANNEL}/claims/{claim['claim_id']}",
        persona,
        json={"memory": {"seq": seq, "state": notes(persona)}},
    )


async def test_the_admin_resets_one_persona_or_all(api: Api) -> None:
    for persona in ("hana", "kai", "mio"):
        await _remember(api, persona)
    await api.call("DELETE", f"{MEMORY}/kai", "admin", expect=204)
    assert set(await memories(api)) == {"hana", "mio"}
    await api.call("DELETE", MEMORY, "admin", expect=204)
    assert await memories(api) == {}


async def test_a_persona_may_not_reset_memories_and_an_unknown_persona_is_named(api: Api) -> None:
    await _remember(api, "hana")
    await api.error("DELETE", f"{MEMORY}/hana", "hana", expect=403)
    await api.error("DELETE", MEMORY, "kai", expect=403)
    error = await api.error("DELETE", f"{MEMORY}/nobody", "admin", expect=404)
    assert error["field"] == "persona"
    assert set(await memories(api)) == {"hana"}


async def test_clearing_the_history_forgets_what_the_personas_remembered_of_it(api: Api) -> None:
    await _remember(api, "hana")
    await api.call("DELETE", f"/v1/channels/{CHANNEL}/history", "admin", expect=204)
    assert await memories(api) == {}
