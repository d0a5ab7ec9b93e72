"""Helpers for the HTTP API tests: a thin caller that checks status codes, and a snapshot of a channel's state."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import auth

if TYPE_CHECKING:
    from aiohttp.test_utils import TestClient

CHANNEL = "lobby"


@dataclass
class Api:
    """Calls the API as one of the test principals and checks the status before handing back the JSON body."""

    client: TestClient[Any, Any]

    async def call(
        self,
        method: str,
        path: str,
        who: str | None = "hana",
        *,
        json: Any = None,
        data: bytes | str | None = None,
        headers: dict[str, str] | None = None,
        expect: int = 200,
    ) -> Any:
        sent = {**(auth(who) if who else {}), **(headers or {})}
        if data is not None:
            sent.setdefault("Content-Type", "application/json")
        response = await self.client.request(
            method, path, headers=sent, json=json, data=data.encode() if isinstance(data, str) else data
        )
        text = await response.text()
        assert response.status == expect, f"{method} {path}: expected {expect}, got {response.status}: {text}"
        if response.status == 204:
            assert text == ""
            return None
        assert response.content_type == "application/json", response.content_type
        return await response.json()

    async def error(self, method: str, path: str, who: str | None = "hana", *, expect: int, **kwargs: Any) -> Any:
        """A 4xx answer: returns the ``error`` object after checking the documented body shape."""
        body = await self.call(method, path, who, expect=expect, **kwargs)
        assert set(body) == {"error"}, body
        error = body["error"]
        assert set(error) <= {"code", "message", "field"}, error
        assert isinstance(error["code"], str) and error["code"]
        assert isinstance(error["message"], str) and error["message"]
        return error

    # Shortcuts for the calls most tests make.

    async def create_channel(self, channel: str = CHANNEL, **settings: Any) -> Any:
        return await self.call("PUT", f"/v1/channels/{channel}", "admin", json=settings)

    async def status(self, who: str = "admin", channel: str = CHANNEL) -> Any:
        return await self.call("GET", f"/v1/channels/{channel}/status", who)

    async def level(self, channel: str = CHANNEL) -> int:
        return int((await self.status("admin", channel))["level"])

    async def history(self, channel: str = CHANNEL, *, who: str = "admin", after: int = 0, limit: int = 200) -> Any:
        return await self.call("GET", f"/v1/channels/{channel}/history?after={after}&limit={limit}", who)

    async def texts(self, channel: str = CHANNEL) -> list[str]:
        return [message["text"] for message in (await self.history(channel))["messages"]]

    async def settings(self, channel: str = CHANNEL) -> Any:
        return await self.call("GET", f"/v1/channels/{channel}/settings", "admin")

    async def patch(self, channel: str = CHANNEL, **changes: Any) -> Any:
        return await self.call("PATCH", f"/v1/channels/{channel}/settings", "admin", json=changes)

    async def claim(self, who: str, tier: str, channel: str = CHANNEL, **extra: Any) -> Any:
        return await self.call("POST", f"/v1/channels/{channel}/claims", who, json={"tier": tier, **extra})

    async def speak(self, who: str, claim_id: str, text: str, channel: str = CHANNEL, **extra: Any) -> Any:
        path = f"/v1/channels/{channel}/claims/{claim_id}/speak"
        return await self.call("POST", path, who, json={"text": text, **extra})

    async def release(self, who: str, claim_id: str, channel: str = CHANNEL) -> Any:
        return await self.call("DELETE", f"/v1/channels/{channel}/claims/{claim_id}", who)

    async def consume(self, who: str, text: str, channel: str = CHANNEL, **extra: Any) -> Any:
        return await self.call("POST", f"/v1/channels/{channel}/consume", who, json={"text": text, **extra})

    async def observe(self, text: str, channel: str = CHANNEL, **extra: Any) -> Any:
        body = {"author_id": "u1", "author_name": "Yuki", "text": text, **extra}
        return await self.call("POST", f"/v1/channels/{channel}/messages", "admin", json=body)

    async def snapshot(self, channel: str = CHANNEL) -> dict[str, Any]:
        """Everything a request could change, read back through the API."""
        return {
            "status": {who: await self.status(who, channel) for who in ("admin", "hana", "kai")},
            "history": await self.history(channel),
            "settings": await self.settings(channel),
            "channels": await self.call("GET", "/v1/channels", "admin"),
        }


def route_template(document: dict[str, Any], method: str, path: str) -> str | None:
    """The OpenAPI path template that serves ``method path``, or None if the document has none."""
    bare = path.split("?", 1)[0]
    matches = [
        template
        for template, item in document["paths"].items()
        if method.lower() in item and re.fullmatch(re.sub(r"{\w+}", "[^/]+", template), bare)
    ]
    assert len(matches) <= 1, (method, path, matches)
    return matches[0] if matches else None


@pytest.fixture
def api(client: TestClient[Any, Any]) -> Api:
    return Api(client)


@pytest.fixture
async def lobby(api: Api) -> str:
    """A channel with the default settings."""
    await api.create_channel(CHANNEL)
    return CHANNEL
