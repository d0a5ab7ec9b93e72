"""The room's page and files: served from the arbiter, self-contained (the machine may be offline), a room per
URL, and only for the person at this machine."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from yarl import URL

from arbiter.room import is_loopback_host

if TYPE_CHECKING:
    from tests.arbiter.room.conftest import Room

STATIC = Path(__file__).resolve().parents[3] / "arbiter" / "room" / "static"


class _References(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in {"src", "href"} and value is not None]


async def test_root_redirects_to_the_lobby(room: Room) -> None:
    response = await room.client.get("/", allow_redirects=False)
    assert response.status == 302
    assert response.headers["Location"] == "/room/lobby"


async def test_the_page_is_served_and_opens_its_room(room: Room) -> None:
    response = await room.client.get("/room/kitchen")
    assert response.status == 200
    assert response.content_type == "text/html"
    page = await response.text()
    assert "/room/static/room.js" in page
    assert room.opened == ["kitchen"]
    assert (await room.service.settings("kitchen")).channel_id == "kitchen"


async def test_a_room_is_opened_once_however_often_it_is_visited(room: Room) -> None:
    await room.client.get("/room/kitchen")
    await room.client.get("/room/kitchen")
    await room.snapshot("kitchen")
    await room.say("hello", channel="kitchen")
    assert room.opened == ["kitchen"]


async def test_an_open_that_failed_is_tried_again_on_the_next_visit(room: Room) -> None:
    room.fail_open.append(RuntimeError("the personas could not join"))
    failed = await room.client.get("/room/kitchen")
    assert failed.status == 500
    assert room.opened == []
    assert (await room.client.get("/room/kitchen")).status == 200
    assert room.opened == ["kitchen"]


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ("/room/-starts-with-a-dash", "“-starts-with-a-dash”"),
        ("/room/" + "x" * 65, "“" + "x" * 65 + "”"),
        ("/room/caf%C3%A9", "“café”"),
        ("/room/two%20words", "“two words”"),
        ("/room/%3Cscript%3E", "“&lt;script&gt;”"),
    ],
)
async def test_a_name_that_cannot_be_a_room_gets_a_clear_page(room: Room, path: str, shown: str) -> None:
    response = await room.client.get(path)
    assert response.status == 404
    assert response.content_type == "text/html"
    page = await response.text()
    assert "not a room name" in page
    assert shown in page
    assert "<script>" not in page
    assert room.opened == []
    assert (await room.service.channels()).channels == []


@pytest.mark.parametrize(
    ("name", "content_types"),
    [
        ("index.html", {"text/html"}),
        # Which of the two a system's mimetypes table gives varies; browsers run both.
        ("room.js", {"text/javascript", "application/javascript"}),
        ("room.css", {"text/css"}),
        ("favicon.svg", {"image/svg+xml"}),
    ],
)
async def test_the_static_files_are_served(room: Room, name: str, content_types: set[str]) -> None:
    response = await room.client.get(f"/room/static/{name}")
    assert response.status == 200
    assert response.content_type in content_types
    assert await response.read() == (STATIC / name).read_bytes()
    assert response.headers["Cache-Control"] == "no-cache"


@pytest.mark.parametrize("path", ["/room/static/%2E%2E/routes.py", "/room/static/..%2Froutes.py"])
async def test_nothing_outside_the_static_folder_is_served(room: Room, path: str) -> None:
    # Sent as written: a client would otherwise resolve the dots itself.
    url = URL(str(room.client.make_url("/")).rstrip("/") + path, encoded=True)
    response = await room.client.session.get(url)
    assert response.status in (403, 404)
    assert "add_room" not in await response.text()


def test_the_page_loads_nothing_from_elsewhere() -> None:
    # The machine may be offline: no CDN, no web font, no absolute URL to fetch.
    parser = _References()
    parser.feed((STATIC / "index.html").read_text(encoding="utf-8"))
    assert parser.urls
    assert all(url.startswith("/room/static/") for url in parser.urls), parser.urls
    for name in ("index.html", "room.js", "room.css"):
        text = (STATIC / name).read_text(encoding="utf-8")
        assert not re.search(r"https?://|@import|url\(", text), name


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({"Host": "evil.example"}, "not_local"),
        ({"Host": "192.168.1.20:8340"}, "not_local"),
        ({"Origin": "http://evil.example"}, "cross_origin"),
        ({"Origin": "null"}, "cross_origin"),
    ],
)
@pytest.mark.parametrize(
    "call",
    [
        ("GET", "/room/lobby", None),
        ("GET", "/room/api/lobby/snapshot", None),
        ("POST", "/room/api/lobby/say", {"name": "Mallory", "text": "hi"}),
        ("PATCH", "/room/api/lobby/settings", {"paused": True}),
    ],
)
async def test_only_pages_on_this_machine_may_use_the_room(
    room: Room, headers: dict[str, str], code: str, call: tuple[str, str, object]
) -> None:
    # A site the person visits may resolve its name to 127.0.0.1 (DNS rebinding) or post to the room from its own
    # page: neither gets in, as the room has no token.
    method, path, body = call
    error = await room.error(method, path, expect=403, json=body, headers=headers)
    assert error["code"] == code
    assert room.opened == []
    assert (await room.service.channels()).channels == []


async def test_the_rooms_own_pages_may_use_it(room: Room) -> None:
    origin = str(room.client.make_url("/").origin())
    response = await room.client.post(
        "/room/api/lobby/say", json={"name": "Yui", "text": "hello"}, headers={"Origin": origin}
    )
    assert response.status == 200


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("room.localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.20", False),
        ("example.com", False),
        ("localhost.example.com", False),
        ("", False),
    ],
)
def test_which_hosts_are_this_machine(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback
