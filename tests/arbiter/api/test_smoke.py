from __future__ import annotations

from tests.conftest import auth


async def test_claim_speak_flow(client) -> None:
    resp = await client.put("/v1/channels/lobby", json={}, headers=auth("admin"))
    assert resp.status == 200, await resp.text()
    resp = await client.post("/v1/channels/lobby/claims", json={"tier": "remark"}, headers=auth("hana"))
    body = await resp.json()
    assert resp.status == 200, body
    assert body["granted"] is True
    claim = body["claim"]["claim_id"]
    resp = await client.post(
        f"/v1/channels/lobby/claims/{claim}/speak", json={"text": "hello there"}, headers=auth("hana")
    )
    body = await resp.json()
    assert body["granted"], body
    resp = await client.get("/v1/channels/lobby/history", headers=auth("hana"))
    body = await resp.json()
    assert [m["text"] for m in body["messages"]] == ["hello there"]
    resp = await client.get("/v1/openapi.json")
    assert resp.status == 200
