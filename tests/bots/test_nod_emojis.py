"""A persona's own emoji nods: in its file, validated on load against Discord's rules for an application emoji, with
errors that name the file and the field (the shipped images pass them); in the rules its model reads and among the
stand-in's nods, where they can be reactions. On Discord: tests/discord/test_own_emojis.py."""

from __future__ import annotations

import struct
import zlib
from typing import TYPE_CHECKING, Any

import pytest
import tomli_w

from bots.llm.base import DecisionRequest
from bots.llm.scene import Scene, SceneLine
from bots.llm.scripted import ScriptedProvider
from bots.persona import EMOJI_MAX_BYTES, PersonaError, load_persona, load_personas
from bots.prompt import rules_prompt
from tests.bots.test_persona import SHIPPED, valid
from tests.support.fleet import make_persona

if TYPE_CHECKING:
    from pathlib import Path


def tiny_png() -> bytes:
    """A 1x1 PNG, as a drawing program would write it."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0\0\0\0\0"))
        + chunk(b"IEND", b"")
    )


def with_emojis(directory: Path, emojis: list[dict[str, str]], **changes: Any) -> Path:
    data = valid("aoi", **{"react_with_emoji": True, "nod_emojis": emojis, **changes})
    path = directory / "aoi.toml"
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return path


def test_an_emoji_image_is_found_next_to_the_persona_file(tmp_path: Path) -> None:
    (tmp_path / "emoji").mkdir()
    (tmp_path / "emoji" / "aoi_nod.png").write_bytes(tiny_png())

    persona = load_persona(with_emojis(tmp_path, [{"name": "aoi_nod", "image": "emoji/aoi_nod.png"}]))

    [emoji] = persona.nod_emojis
    assert (emoji.name, emoji.image) == ("aoi_nod", tmp_path / "emoji" / "aoi_nod.png")
    assert persona.emoji_nods == (":aoi_nod:",)


@pytest.mark.parametrize(
    ("emoji", "image", "complaint"),
    [
        pytest.param({"name": "a", "image": "nod.png"}, tiny_png(), "should match pattern", id="name-too-short"),
        pytest.param({"name": "x" * 33, "image": "nod.png"}, tiny_png(), "should match pattern", id="name-too-long"),
        pytest.param({"name": "aoi-nod", "image": "nod.png"}, tiny_png(), "should match pattern", id="name-hyphen"),
        pytest.param({"name": "aoi_nod", "image": "gone.png"}, tiny_png(), "cannot read", id="no-such-file"),
        pytest.param({"name": "aoi_nod", "image": "nod.png"}, b"<svg/>", "not a PNG, JPEG, GIF or WebP", id="svg"),
        pytest.param(
            {"name": "aoi_nod", "image": "nod.png"},
            tiny_png() + bytes(EMOJI_MAX_BYTES),
            "Discord takes at most 262144",
            id="too-big",
        ),
        pytest.param({"name": "aoi_nod"}, tiny_png(), "Field required", id="no-image"),
    ],
)
def test_an_emoji_discord_would_not_take_is_named_with_the_file_and_the_field(
    tmp_path: Path, emoji: dict[str, str], image: bytes, complaint: str
) -> None:
    (tmp_path / "nod.png").write_bytes(image)
    path = with_emojis(tmp_path, [emoji])

    with pytest.raises(PersonaError, match=complaint) as caught:
        load_persona(path)

    assert str(caught.value).startswith(f"{path}: nod_emojis")


ONE = {"name": "aoi_nod", "image": "nod.png"}


@pytest.mark.parametrize(
    ("emojis", "changes", "complaint"),
    [
        pytest.param([ONE], {"react_with_emoji": False}, "set react_with_emoji = true", id="not-reacting"),
        pytest.param([ONE, ONE], {}, "two emojis have the same name", id="same-name"),
        pytest.param([{**ONE, "name": f"aoi_{n}"} for n in range(6)], {}, "at most 5 items", id="too-many"),
    ],
)
def test_emojis_are_reactions_with_distinct_names_and_a_handful_at_most(
    tmp_path: Path, emojis: list[dict[str, str]], changes: dict[str, Any], complaint: str
) -> None:
    (tmp_path / "nod.png").write_bytes(tiny_png())
    path = with_emojis(tmp_path, emojis, **changes)

    with pytest.raises(PersonaError, match=complaint) as caught:
        load_persona(path)

    assert str(caught.value).startswith(f"{path}: nod_emojis: ")


def test_the_shipped_emoji_images_are_small_pngs_discord_takes() -> None:
    emojis = [emoji for persona in load_personas(SHIPPED) for emoji in persona.nod_emojis]

    assert emojis
    for emoji in emojis:
        data = emoji.image.read_bytes()
        assert data.startswith(b"\x89PNG"), emoji.name
        assert len(data) < 8 * 1024, emoji.name  # a few KiB each, committed


# --- offered as nods where they can be reactions -------------------------------------------------------


def test_the_rules_offer_its_own_emojis_only_where_it_can_react_with_them() -> None:
    persona = make_persona("aoi").model_copy(update={"react_with_emoji": True})
    lengths = {"aizuchi": 24, "remark": 120}

    offered = rules_prompt(persona, lengths, "", emoji_nods=(":aoi_nod:",))
    plain = rules_prompt(persona, lengths, "")

    assert "your own emojis, written just so: :aoi_nod:" in offered
    assert ":aoi_nod:" not in plain and "a single emoji works too" in plain


async def test_the_stand_in_nods_with_its_own_emoji_now_and_then_and_never_without_it() -> None:
    persona = make_persona("aoi")
    news = (SceneLine("bob", "person", "I'm off to the mountains this weekend."),)

    async def nods(emoji: tuple[str, ...]) -> list[str]:
        provider = ScriptedProvider.for_persona(persona, seed=1)
        scene = Scene(names=("Aoi",), lines=news, emoji_nods=emoji)
        request = DecisionRequest(system="", turns=(), actions=("aizuchi",), max_lengths={"aizuchi": 24}, scene=scene)
        return [(await provider.decide(request)).decision.text for _ in range(40)]

    with_emoji, without = await nods((":aoi_nod:",)), await nods(())

    assert 4 <= with_emoji.count(":aoi_nod:") <= 20  # about three nods in ten
    assert ":aoi_nod:" not in without
