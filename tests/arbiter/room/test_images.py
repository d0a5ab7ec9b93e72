"""A person gives the room a picture: the arbiter checks it from its bytes, holds it, records its address with the
message (``local``: only this machine reaches it) and serves it back; what it refuses it names, and keeps nothing."""

from __future__ import annotations

import hashlib
import io
from typing import TYPE_CHECKING, Any

import aiohttp

from tests.support.pictures import gif, png

if TYPE_CHECKING:
    from tests.arbiter.room.conftest import Room


def form(name: str = "Yui", text: str = "", *images: tuple[str, bytes, str]) -> aiohttp.FormData:
    data = aiohttp.FormData()
    data.add_field("name", name)
    data.add_field("text", text)
    for filename, body, content_type in images:
        data.add_field("image", io.BytesIO(body), filename=filename, content_type=content_type)
    return data


async def say_with(room: Room, *images: tuple[str, bytes, str], text: str = "Look!", expect: int = 200) -> Any:
    return await room.call("POST", "/room/api/lobby/say", data=form("Yui", text, *images), expect=expect)


async def test_a_picture_is_recorded_with_the_message_and_served_back(room: Room) -> None:
    photo = png(64, 48)
    assert await say_with(room, ("cat.png", photo, "image/png")) == {"seq": 1, "created": True}
    (message,) = (await room.service.history("lobby")).messages
    assert message.text == "Look! [attached: cat.png]"
    (image,) = message.images
    name = f"{hashlib.sha256(photo).hexdigest()}.png"
    assert image.url == f"{room.client.make_url('/room/images/' + name)}"
    assert (image.content_type, image.size, image.width, image.height) == ("image/png", len(photo), 64, 48)
    assert image.local and image.expires_at is None
    # The page's snapshot carries it, and the address answers with the bytes, as what they are.
    assert (await room.snapshot())["history"][0]["images"][0]["url"] == image.url
    response = await room.client.get(f"/room/images/{name}")
    assert response.status == 200 and response.content_type == "image/png"
    assert await response.read() == photo
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in response.headers["Content-Security-Policy"]


async def test_a_pasted_picture_alone_is_a_message(room: Room) -> None:
    await say_with(room, ("", gif(), "image/gif"), text="   ")
    (message,) = (await room.service.history("lobby")).messages
    assert message.text == "[attached: image-1]"
    assert [image.content_type for image in message.images] == ["image/gif"]


async def test_the_type_is_read_from_the_bytes_not_the_name(room: Room) -> None:
    await say_with(room, ("photo.jpg", png(), "image/jpeg"))
    (message,) = (await room.service.history("lobby")).messages
    assert message.images[0].content_type == "image/png" and message.images[0].url.endswith(".png")


async def test_what_the_room_refuses_it_names_and_keeps_nothing_of(room: Room) -> None:
    limit = room.service.image_bounds.max_bytes
    cases = [
        (
            ("big.png", png() + bytes(limit), "image/png"),
            413,
            "image_too_large",
            "image 2 (big.png) is larger than the",
        ),
        (("scan.bmp", b"BM" + bytes(100), "image/bmp"), 422, "image_type", "image/bmp; the room takes PNG"),
        (("notes.png", b"just some text", "image/png"), 422, "not_an_image", "is not an image"),
        (("empty.png", b"", "image/png"), 422, "not_an_image", "is not an image"),
    ]
    for image, status, code, says in cases:
        response = await room.client.post(
            "/room/api/lobby/say", data=form("Yui", "hm", ("ok.png", png(), "image/png"), image)
        )
        body = await response.json()
        assert response.status == status, body
        assert body["error"]["code"] == code and says in body["error"]["message"], body
    assert (await room.service.history("lobby")).messages == []
    # The good image given with a refused one was never held.
    response = await room.client.get(f"/room/images/{hashlib.sha256(png()).hexdigest()}.png")
    assert response.status == 404 and (await response.json())["error"]["code"] == "image_gone"


async def test_a_message_takes_at_most_the_images_the_history_keeps(room: Room) -> None:
    count = room.service.image_bounds.per_message
    images = [(f"{n}.png", png(n + 1, 1), "image/png") for n in range(count + 1)]
    error = await room.error("POST", "/room/api/lobby/say", data=form("Yui", "many", *images), expect=422)
    assert error["code"] == "too_many_images" and f"at most {count} images" in error["message"]
    await say_with(room, *images[:count])
    (message,) = (await room.service.history("lobby")).messages
    assert len(message.images) == count


async def test_a_form_without_a_name_is_refused_like_the_json(room: Room) -> None:
    error = await room.error(
        "POST", "/room/api/lobby/say", data=form("", "hi", ("a.png", png(), "image/png")), expect=422
    )
    assert error["field"] == "name"
    data = aiohttp.FormData()
    data.add_field("name", "Yui")
    data.add_field("avatar", b"x", filename="x.png", content_type="image/png")
    error = await room.error("POST", "/room/api/lobby/say", data=data, expect=422)
    assert "unexpected form field 'avatar'" in error["message"]
    assert (await room.service.history("lobby")).messages == []


async def test_an_image_the_room_does_not_hold_is_gone(room: Room) -> None:
    response = await room.client.get(f"/room/images/{'0' * 64}.png")
    assert response.status == 404
    assert "no longer holds" in (await response.json())["error"]["message"]
    assert (await room.client.get("/room/images/page.html")).status == 404


async def test_a_form_of_endless_fields_is_refused(room: Room) -> None:
    data = aiohttp.FormData(default_to_multipart=True)
    for _ in range(room.service.image_bounds.per_message + 4):
        data.add_field("name", "Yui")
    error = await room.error("POST", "/room/api/lobby/say", data=data, expect=422)
    assert error["code"] == "bad_form"
