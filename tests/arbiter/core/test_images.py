"""What the history keeps of a message's images (``arbiter.core.images``): the types the models take, within the
size, the first few; and when a signed Discord address expires."""

from __future__ import annotations

from arbiter.core.images import ImageBounds, ImageRef, Sniffed, bounded, signed_expiry, sniff
from tests.support.pictures import gif, jpeg_header, png, webp_header


def image(name: str, content_type: str = "image/png", size: int | None = 1000) -> ImageRef:
    return ImageRef(f"https://cdn.example/{name}", content_type, size)


def test_only_the_types_both_providers_take_are_kept() -> None:
    shown = [image(f"a.{kind}", f"image/{kind}") for kind in ("jpeg", "png", "gif", "webp", "svg+xml", "bmp")]
    shown.append(image("notes.txt", "text/plain"))
    assert [i.content_type for i in bounded(shown, ImageBounds(per_message=10))] == [
        "image/jpeg", "image/png", "image/gif", "image/webp"
    ]  # fmt: skip


def test_an_image_over_the_size_is_dropped_and_one_of_unknown_size_kept() -> None:
    bounds = ImageBounds(per_message=10, max_bytes=5000)
    shown = [image("big.png", size=5001), image("edge.png", size=5000), image("embed.png", size=None)]
    assert [i.url.rsplit("/", 1)[1] for i in bounded(shown, bounds)] == ["edge.png", "embed.png"]


def test_the_first_few_are_kept_and_an_address_that_is_not_the_webs_is_not() -> None:
    shown = [ImageRef("file:///etc/passwd", "image/png"), *(image(f"{n}.png") for n in range(6))]
    assert [i.url for i in bounded(shown, ImageBounds(per_message=3))] == [image(f"{n}.png").url for n in range(3)]
    assert bounded(shown, ImageBounds(per_message=0)) == ()


def test_a_signed_address_expires_at_its_ex_parameter() -> None:
    url = "https://cdn.discordapp.com/attachments/1/2/cat.png?ex=6a1b2c3d&is=6a19dabd&hm=abc123"
    assert signed_expiry(url) == float(0x6A1B2C3D)
    assert signed_expiry("https://example.org/dog.webp") is None
    assert signed_expiry("https://cdn.discordapp.com/a.png?ex=zz") is None
    expiring = ImageRef(url, "image/png", expires_at=100.0)
    assert not expiring.expired(99.9) and expiring.expired(100.0)
    assert not ImageRef("https://example.org/dog.webp", "image/webp").expired(1e12)


def test_an_image_is_known_by_its_bytes_with_its_dimensions() -> None:
    assert sniff(png(64, 48)) == Sniffed("image/png", 64, 48)
    assert sniff(gif(3, 2)) == Sniffed("image/gif", 3, 2)
    assert sniff(jpeg_header(1024, 768)) == Sniffed("image/jpeg", 1024, 768)
    assert sniff(webp_header(640, 480)) == Sniffed("image/webp", 640, 480)


def test_other_formats_are_named_and_anything_else_is_not_an_image() -> None:
    assert sniff(b"BM" + bytes(60)) == Sniffed("image/bmp")
    assert sniff(b"II*\x00" + bytes(8)) == Sniffed("image/tiff")
    assert sniff(b"\x00\x00\x00\x18ftypheic" + bytes(8)) == Sniffed("image/heic")
    for data in (b"", b"hello, world", b"<svg xmlns='http://www.w3.org/2000/svg'/>", b"%PDF-1.7", png()[:20]):
        assert sniff(data) is None
