"""Image files made here, for the tests that show the personas a picture: a real PNG and GIF a browser can draw, and
JPEG and WebP headers (what the arbiter and the wire servers read of a file: its signature and dimensions)."""

from __future__ import annotations

import asyncio
import socket
import struct
import zlib
from typing import TYPE_CHECKING, Self

from aiohttp import web

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ("PictureHost", "gif", "jpeg_header", "picture", "png", "refused_url", "webp_header")


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width: int = 64, height: int = 48, rgb: tuple[int, int, int] = (240, 138, 36)) -> bytes:
    """A valid RGB PNG of one colour."""
    row = b"\x00" + bytes(rgb) * width  # filter type 0, then the pixels
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + _chunk(b"IDAT", zlib.compress(row * height))
        + _chunk(b"IEND", b"")
    )


def gif(width: int = 1, height: int = 1) -> bytes:
    """A valid GIF89a of one black pixel's colour table (its logical screen is ``width`` x ``height``)."""
    return (
        b"GIF89a"
        + struct.pack("<HHBBB", width, height, 0x80, 0, 0)
        + b"\x00\x00\x00\xff\xff\xff"
        + b"\x2c"
        + struct.pack("<HHHHB", 0, 0, 1, 1, 0)
        + b"\x02\x02\x44\x01\x00\x3b"
    )


def jpeg_header(width: int = 1024, height: int = 768) -> bytes:
    """The start of a baseline JPEG: SOI, an APP0 (JFIF) segment and a start of frame giving the dimensions."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, height, width, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


def webp_header(width: int = 640, height: int = 480) -> bytes:
    """The start of an extended WebP (RIFF, WEBP, a VP8X chunk giving the canvas size)."""
    vp8x = b"VP8X" + struct.pack("<I", 10) + b"\x00\x00\x00\x00"
    vp8x += (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", 4 + len(vp8x)) + b"WEBP" + vp8x


def picture(content_type: str, width: int, height: int) -> bytes:
    """A file of ``content_type`` (one of the four the models take) and those dimensions; other types get a few
    bytes of text, as a file that is not an image has."""
    if content_type == "image/png":
        return png(width, height)
    if content_type == "image/gif":
        return gif(width, height)
    if content_type == "image/jpeg":
        return jpeg_header(width, height)
    if content_type == "image/webp":
        return webp_header(width, height)
    return b"not a picture\n"


class PictureHost:
    """A web server of files on this machine, as a site showing pictures: ``put`` one, get its address; an address
    it does not have answers 404, ``status`` makes one answer another status (a 403, say), and a path in ``silent``
    is never answered (a host that hangs) until the host stops."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[str, bytes]] = {}
        self.status: dict[str, int] = {}
        self.fetched: list[str] = []  # the paths asked for, in order
        self.silent: set[str] = set()
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    def put(self, name: str, data: bytes, content_type: str = "image/png") -> str:
        self.files[f"/{name}"] = (content_type, data)
        return f"{self.base_url}/{name}"

    def url(self, name: str) -> str:
        return f"{self.base_url}/{name}"

    async def _serve(self, request: web.Request) -> web.Response:
        self.fetched.append(request.path)
        if request.path in self.silent:
            await self._stopping.wait()
        if request.path in self.status:
            return web.Response(status=self.status[request.path], text="Forbidden")
        held = self.files.get(request.path)
        if held is None:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=held[1], content_type=held[0])

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._serve)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()


def refused_url(name: str = "cat.png") -> str:
    """An address on this machine where nothing listens: connecting is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/{name}"
