"""The room's routes on an in-process arbiter (the in-memory twin, the fake clock), called through aiohttp's test
client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from arbiter.room import add_room
from tests.conftest import storage_url

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from aiohttp.test_utils import TestClient

    from arbiter.server import Arbiter
    from tests.conftest import OpenArbiter


@dataclass
class Room:
    """A client of the room, and what the room asked ``on_open`` to do."""

    client: TestClient[Any, Any]
    arbiter: Arbiter
    opened: list[str] = field(default_factory=list)
    fail_open: list[BaseException] = field(default_factory=list)  # raised by the next ``on_open`` calls

    @property
    def service(self) -> Any:
        return self.arbiter.service

    async def on_open(self, channel_id: str) -> None:
        if self.fail_open:
            raise self.fail_open.pop(0)
        self.opened.append(channel_id)

    async def call(self, method: str, path: str, *, expect: int = 200, **kwargs: Any) -> Any:
        """A JSON call that must answer ``expect``; its decoded body (None for a 204)."""
        response = await self.client.request(method, path, **kwargs)
        text = await response.text()
        assert response.status == expect, f"{method} {path}: expected {expect}, got {response.status}: {text}"
        if response.status == 204:
            assert text == ""
            return None
        assert response.content_type == "application/json", response.content_type
        return await response.json()

    async def error(self, method: str, path: str, *, expect: int, **kwargs: Any) -> dict[str, Any]:
        """A 4xx answer in the /v1 API's error shape; its ``error`` object."""
        body = await self.call(method, path, expect=expect, **kwargs)
        assert set(body) == {"error"}, body
        assert set(body["error"]) <= {"code", "message", "field"}, body
        assert body["error"]["code"] and body["error"]["message"], body
        error: dict[str, Any] = body["error"]
        return error

    async def snapshot(self, channel: str = "lobby") -> Any:
        return await self.call("GET", f"/room/api/{channel}/snapshot")

    async def say(self, text: str, name: str = "Yui", channel: str = "lobby") -> Any:
        return await self.call("POST", f"/room/api/{channel}/say", json={"name": name, "text": text})

    async def patch(self, changes: Any, channel: str = "lobby") -> Any:
        return await self.call("PATCH", f"/room/api/{channel}/settings", json=changes)


async def make_room(arbiter: Arbiter, aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]]) -> Room:
    room = Room(client=None, arbiter=arbiter)  # type: ignore[arg-type]
    add_room(arbiter.app, on_open=room.on_open)
    room.client = await aiohttp_client(arbiter.app)
    return room


@pytest.fixture
async def room(
    request: pytest.FixtureRequest,
    open_test_arbiter: OpenArbiter,
    aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]],
) -> Room:
    return await make_room(await open_test_arbiter(storage_url(request)), aiohttp_client)
