"""Before the model call, each image a prompt shows is checked (``bots.image_fetch``): one on the web by a short
read of its first bytes, the answer kept a while per address; one only this machine reaches (the room's) fetched
whole and given inline. What cannot be had is skipped with one line, and the rest are shown."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import aiohttp
import pytest

from bots.image_fetch import ImageFetcher
from bots.images import ChosenImage
from bots.llm.base import ImageInput
from bots.llm.images import INLINE_MAX_BYTES
from tests.support.pictures import PictureHost, gif, png, refused_url

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@pytest.fixture
async def host() -> AsyncIterator[PictureHost]:
    async with PictureHost() as running:
        yield running


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as running:
        yield running


def chosen(
    url: str, seq: int = 7, *, kind: str = "image/png", local: bool = False, size: int | None = None
) -> ChosenImage:
    return ChosenImage(ImageInput(url, kind, 64, 48), seq, size, local)


async def test_an_address_that_answers_with_an_image_is_shown_and_asked_once(
    host: PictureHost, session: aiohttp.ClientSession
) -> None:
    url = host.put("cat.png", png())
    now = [0.0]
    fetcher = ImageFetcher(session, keep_s=300.0, clock=lambda: now[0])

    for _ in range(2):
        shown = await fetcher.shown([chosen(url)], persona="rin", provider="anthropic")
        assert shown == (ImageInput(url, "image/png", 64, 48),) and shown[0].data is None
    assert host.fetched == ["/cat.png"]
    now[0] = 301.0
    await fetcher.shown([chosen(url)], persona="rin", provider="anthropic")
    assert host.fetched == ["/cat.png", "/cat.png"]


async def test_what_cannot_be_had_is_skipped_with_one_line_each(
    host: PictureHost, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bots.image_fetch")
    good = host.put("cat.png", png())
    host.put("secret.png", png())
    host.status["/secret.png"] = 403
    page = host.put("page.png", b"<!doctype html>", "text/html")
    refused = refused_url()
    images = [
        chosen(host.url("gone.png"), 1),
        chosen(host.url("secret.png"), 2),
        chosen(refused, 3),
        chosen(page, 4),
        chosen(good, 5),
    ]

    shown = await ImageFetcher(session).shown(images, persona="rin", provider="openai")

    assert [image.url for image in shown] == [good]
    assert caplog.messages == [
        "persona=rin: skipping an image of message 1: its address answered 404",
        "persona=rin: skipping an image of message 2: its address answered 403",
        "persona=rin: skipping an image of message 3: its address could not be reached (ClientConnectorError)",
        "persona=rin: skipping an image of message 4: its address answers with something that is not an image the"
        " models take",
    ]


async def test_the_rooms_image_is_fetched_whole_and_given_inline_once(
    host: PictureHost, session: aiohttp.ClientSession
) -> None:
    photo = gif(40, 30)
    url = host.put("room/images/x.gif", photo, "image/gif")
    fetcher = ImageFetcher(session)

    for _ in range(2):
        (shown,) = await fetcher.shown(
            [chosen(url, kind="image/gif", local=True, size=len(photo))], persona="rin", provider="anthropic"
        )
        assert shown.data == photo and shown.url == url
    assert host.fetched == ["/room/images/x.gif"]


async def test_a_room_image_is_skipped_when_its_provider_would_refuse_it_inline_or_it_is_gone(
    host: PictureHost, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bots.image_fetch")
    limit = INLINE_MAX_BYTES["anthropic"]
    big = host.put("big.png", png() + bytes(limit))
    liar = host.put("liar.png", gif())
    images = [
        chosen(big, 1, local=True, size=limit + 100),
        chosen(big, 2, local=True),  # its size unknown: found out as it comes
        chosen(liar, 3, local=True),
        chosen(host.url("restarted.png"), 4, local=True),
    ]

    assert await ImageFetcher(session).shown(images, persona="rin", provider="anthropic") == ()

    assert [line.split(": ", 2)[2] for line in caplog.messages] == [
        f"at {limit + 100:,} bytes it is over the {limit:,} its provider takes inline",
        f"it is over the {limit:,} bytes its provider takes inline",
        "its bytes are image/gif, not image/png",
        "its address answered 404",
    ]


async def test_a_host_that_does_not_answer_is_given_up_on_in_time_and_not_waited_for_again(
    host: PictureHost, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bots.image_fetch")
    slow = host.put("slow.png", png())
    host.silent.add("/slow.png")
    good = host.put("cat.png", png())
    fetcher = ImageFetcher(session, timeout_s=0.2)

    for _ in range(2):
        shown = await fetcher.shown([chosen(slow, 3), chosen(good, 4)], persona="rin", provider="openai")
        assert [image.url for image in shown] == [good]
    assert host.fetched.count("/slow.png") == 1
    assert (
        caplog.messages == ["persona=rin: skipping an image of message 3: its address did not answer within 0.2 s"] * 2
    )
