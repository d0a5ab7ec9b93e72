"""Image files made here, for the tests that show the personas a picture: a real PNG and GIF a browser can draw, and
JPEG and WebP headers (what the arbiter and the wire servers read of a file: its signature and dimensions)."""

from __future__ import annotations

import struct
import zlib

__all__ = ("gif", "jpeg_header", "png", "webp_header")


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
