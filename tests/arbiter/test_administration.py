"""Clearing a channel's history ends what was under way about it: over the HTTP API, on SQLite and PostgreSQL, and
across a restart of the arbiter.

A claim taken before the clear is closed by it (its cost back in the pool at once), its speech is refused as stale,
and notes about the cleared conversation are refused, whether they come with a speech or with a release."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.support.arbiters import serve

if TYPE_CHECKING:
    from tests.support.arbiters import Api
    from tests.support.clock import FakeClock

CHANNEL = "lobby"
NOTES = {"topic": "the picnic", "open_questions": ["who brings the tea?"], "agreed": [], "speakers": []}


async def claimed(api: Api, persona: str, tier: str, based_on: int) -> str:
    body = {"tier": tier, "based_on_seq": based_on}
    result = await api.call("POST", f"/v1/channels/{CHANNEL}/claims", persona, body)
    assert result["granted"], result
    return str(result["claim"]["claim_id"])


async def memories(api: Api) -> list[Any]:
    return list((await api.call("GET", f"/v1/channels/{CHANNEL}/memory"))["memories"])


async def test_a_clear_closes_the_claims_taken_before_it_and_refuses_what_they_would_bring_back(
    database_url: str, clock: FakeClock
) -> None:
    async with serve(database_url, clock=clock) as served:
        api = served.api
        await api.create_channel(CHANNEL)
        question = (await api.say(CHANNEL, "yuki", "Picnic on Saturday? Who brings the tea?"))["seq"]
        passing = await claimed(api, "kai", "aizuchi", question)
        clock.advance(4)  # a remark waits a moment for a nod under way
        speaking = await claimed(api, "hana", "remark", question)
        assert (await api.status(CHANNEL))["level"] == 35

        await api.call("DELETE", f"/v1/channels/{CHANNEL}/history")

        status = await api.status(CHANNEL)
        assert (status["level"], status["claims_held"]) == (100, {})
        path = f"/v1/channels/{CHANNEL}/claims/{speaking}/speak"
        body = {"text": "I'll bring the tea!", "based_on_seq": question, "memory": {"seq": question, "state": NOTES}}
        spoken = await api.call("POST", path, "hana", body)
        assert (spoken["granted"], spoken["reason"]) == (False, "stale")
        # A release with notes on the cleared conversation: refused whole, nothing stored; then without them.
        released_with = await api.request(
            "DELETE", f"/v1/channels/{CHANNEL}/claims/{passing}", "kai", {"memory": {"seq": question, "state": NOTES}}
        )
        assert released_with[0] == 409
        assert (released_with[1]["error"]["code"], released_with[1]["error"]["field"]) == (
            "history_cleared",
            "memory.seq",
        )
        released = await api.call("DELETE", f"/v1/channels/{CHANNEL}/claims/{passing}", "kai")
        assert released["claim"]["state"] == "cleared"
        assert await api.history(CHANNEL) == []
        assert await memories(api) == []

    async with serve(database_url, clock=clock) as again:  # what the clear ended stays ended after a restart
        api = again.api
        later = (await api.say(CHANNEL, "yuki", "Anyway: hello again"))["seq"]
        stale = await api.request(
            "POST", f"/v1/channels/{CHANNEL}/claims", "hana", {"tier": "remark", "based_on_seq": question}
        )
        assert (stale[1]["granted"], stale[1]["reason"]) == (False, "stale")
        fresh = await claimed(api, "hana", "remark", later)
        body = {"text": "Hello!", "based_on_seq": later, "memory": {"seq": question, "state": NOTES}}
        refused = await api.request("POST", f"/v1/channels/{CHANNEL}/claims/{fresh}/speak", "hana", body)
        assert (refused[0], refused[1]["error"]["code"]) == (409, "history_cleared")
        body["memory"] = {"seq": later, "state": NOTES}
        spoken = await api.call("POST", f"/v1/channels/{CHANNEL}/claims/{fresh}/speak", "hana", body)
        assert spoken["granted"] is True
        assert [(m["persona"], m["seq"]) for m in await memories(api)] == [("hana", later)]
        assert [m["text"] for m in await api.history(CHANNEL)] == ["Anyway: hello again", "Hello!"]
