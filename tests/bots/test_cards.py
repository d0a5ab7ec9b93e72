"""Character cards made into persona files: what maps where, what is reported as left out, what a bad card says,
and the file written from it (read back by the persona loader, in place whole or not at all)."""

from __future__ import annotations

import colorsys
import json
import os
import random
import re
import string
import struct
import subprocess
import sys
import tomllib
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from arbiter.core.addressing import addressed_personas
from bots.card_file import CardError, parse_card, read_card
from bots.cards import card_to_persona, name_aliases, strip_stage_directions
from bots.colors import (
    HUMAN_COLOR,
    HUMAN_DISTANCE,
    INK_THRESHOLD,
    INKS,
    SURFACES,
    chip_ink,
    contrast,
    delta_e,
    persona_color,
    relative_luminance,
    room_readable,
)
from bots.llm.scripted import GENERIC
from bots.persona import Persona, PersonaError, load_persona
from bots.persona_file import PersonaFileExists, render_persona, write_persona
from tests.support.cards import chunk, encoded, isolde_card, ja_card, png, text_chunk, v2_card, v3_card

ROOM = Path(__file__).resolve().parents[2] / "arbiter" / "room" / "static"


def imported(card: dict[str, Any], **options: Any) -> tuple[Persona, Any]:
    result = card_to_persona(parse_card(json.dumps(card).encode()), **options)
    return Persona.model_validate(result.persona), result


def test_a_v2_card_maps_name_text_examples_and_greetings() -> None:
    persona, result = imported(v2_card())

    assert (persona.id, persona.display_name, persona.aliases, persona.language) == ("seraphina", "Seraphina", [], "en")
    assert persona.personality == "Kind, gentle, protective and wise."
    # The description (with {{char}} resolved) and then the scenario, as the setting.
    assert persona.background == (
        "Seraphina is the guardian of the Eldoria forest. She heals whoever wanders in hurt. "
        "Setting: the user wakes up in Seraphina's glade after a storm."
    )
    # The character's own turns only, continuation lines joined; a turn by the card's name is the character's;
    # stage directions taken out.
    assert persona.samples.remarks == [
        "You are safe in my glade. The forest guards its own.",
        "I keep this forest. I have kept it for a very long time.",
        "The herbs need another hour. Then we eat.",
    ]
    # Lines that fit a nod are nods; one is not enough, so generic ones make up the three a persona needs.
    assert persona.samples.aizuchi[:2] == ["Of course.", "Mm-hm."]
    assert persona.samples.aizuchi[2] in GENERIC["en"].aizuchi
    assert len(persona.samples.aizuchi) == 3
    # {{user}} is the file's {name}; a random choice is its first option.
    assert persona.samples.greetings == [
        "Oh, {name}, you're awake! I'm Seraphina.",
        "Welcome back, {name}. The tea is ready.",
    ]
    assert persona.talkativeness == 0.7  # SillyTavern's extensions.talkativeness
    assert persona.big_five.openness == persona.big_five.neuroticism == 0.5
    assert (persona.provider, persona.discord_token_env) == ("scripted", "SERAPHINA_DISCORD_TOKEN")
    assert any("aizuchi: 1 generic English line(s)" in line for line in result.filled_in)


def test_what_a_v2_card_holds_beyond_a_persona_is_named_one_line_each() -> None:
    _, result = imported(v2_card())

    left = {line.split(":")[0]: line for line in result.left_out}
    assert left.keys() >= {"system_prompt", "creator_notes", "character_book", "tags", "creator", "extensions"}
    assert "(1 entry)" in left["character_book"]
    assert left["tags"] == "tags: fantasy, healer"
    assert left["extensions"].startswith("extensions: world ")  # fav is false: nothing lost; talkativeness mapped
    assert "post_history_instructions" not in left  # empty in the card: nothing lost
    assert any(line.startswith("3 example message(s) by others") for line in result.left_out)
    assert any(line.startswith("1 example line(s) naming {{user}}") for line in result.left_out)  # "Rest now, ..."


def test_a_v3_card_adds_its_nickname_and_group_greetings() -> None:
    persona, result = imported(v3_card())

    # The nickname, then the name's words.
    assert persona.aliases == ["Sera", "Seraphina", "Vale"]
    assert (persona.id, persona.display_name) == ("seraphina-vale", "Seraphina Vale")
    assert "Sera is the guardian" in persona.background  # V3: {{char}} is the nickname when there is one
    assert persona.samples.greetings[-1] == "Oh, more of you! Come in, {name}, all of you."
    left = {line.split(":")[0] for line in result.left_out}
    assert left >= {"assets", "creator_notes_multilingual", "source", "creation_date"}
    assert "modification_date" not in left  # 0: unknown, nothing lost


def test_a_v1_card_is_read_from_the_top_level() -> None:
    card = {key: v2_card()["data"][key] for key in ("name", "description", "personality", "scenario", "first_mes")}
    persona, result = imported(card | {"mes_example": "", "avatar": "none", "chat": "Seraphina - 2023"})

    assert persona.display_name == "Seraphina"
    assert persona.samples.remarks == list(GENERIC["en"].remarks[:3])  # no examples at all
    assert {line.split(":")[0] for line in result.left_out} == {
        "avatar",
        "chat",
        "stage directions such as *You wake to the smell of herbs.* in 1 sample line(s)",
    }


def test_a_japanese_card_is_japanese_and_needs_an_id() -> None:
    with pytest.raises(CardError, match=r"cannot make an id from the name '月見 ゆい'.*--id"):
        imported(ja_card())

    persona, _ = imported(ja_card(), persona_id="yui")

    assert (persona.id, persona.language, persona.discord_token_env) == ("yui", "ja", "YUI_DISCORD_TOKEN")
    assert persona.samples.aizuchi[0] == "なるほど〜。"
    assert set(persona.samples.aizuchi[1:]) <= set(GENERIC["ja"].aizuchi)
    assert persona.samples.greetings == ["いらっしゃいませ、{name}さん。今日は何にしますか?"]
    assert (
        persona.background
        == "月見 ゆいは町の小さな喫茶店の店主。常連客の話を聞くのが好き。舞台：雨の日の午後、ユーザーが店に入ってくる。"
    )
    assert imported(ja_card(), persona_id="yui", language="en")[0].language == "en"


def test_long_text_is_cut_at_a_sentence_within_the_line_limit_and_said() -> None:
    sentence = "彼女は毎朝、店の前の花に水をやる。"  # 17 characters, 34 display columns
    persona, result = imported(ja_card(personality="", description=sentence * 40), persona_id="yui")

    # 400 characters, not 400 columns: a Japanese field keeps as many characters as an English one.
    assert persona.personality == sentence * 23
    assert any(line.startswith("the end of description: 289 of its 680 characters") for line in result.left_out)


def test_description_and_scenario_share_the_background() -> None:
    long = "The forest is old and the glade is older. " * 20
    persona, result = imported(v2_card(description=long, scenario="A storm is coming."))

    assert persona.background.endswith(" Setting: A storm is coming.")  # the short part whole
    assert len(persona.background) <= 400
    assert any(line.startswith("the end of description:") for line in result.left_out)


def test_example_lines_with_macros_a_file_cannot_hold_are_left_out() -> None:
    examples = "{{char}}: You rolled {{roll:6}}.\n{{char}}: {{// a note}}Quiet night.\n{{char}}: Hm, {not} this."
    persona, result = imported(v2_card(mes_example=examples))

    assert "Quiet night." in persona.samples.aizuchi
    assert not any("{" in line for line in persona.samples.remarks + persona.samples.aizuchi)
    assert any(line.startswith("2 example line(s) with a macro or brace") for line in result.left_out)


@pytest.mark.parametrize(
    ("name", "slug", "token"),
    [
        ("Dr. Émile Zola!", "dr-emile-zola", "DR_EMILE_ZOLA_DISCORD_TOKEN"),
        ("2B", "2b", "PERSONA_2B_DISCORD_TOKEN"),  # a variable's name cannot start with a digit
        ("  Ann  Lee ", "ann-lee", "ANN_LEE_DISCORD_TOKEN"),
    ],
)
def test_the_id_and_the_token_variable_are_made_from_the_name(name: str, slug: str, token: str) -> None:
    persona, _ = imported(v2_card(name=name))
    assert (persona.id, persona.discord_token_env) == (slug, token)


def test_an_invalid_id_is_refused() -> None:
    with pytest.raises(CardError, match=r"--id 'no spaces' is not a valid id"):
        imported(v2_card(), persona_id="no spaces")


# --- PNG -----------------------------------------------------------------------------------------------------


def test_a_png_card_is_read_from_its_chara_chunk() -> None:
    card = parse_card(png(text_chunk("chara", v2_card())))

    assert (card.spec, card.container, card.data.name) == ("Character Card V2", "PNG", "Seraphina")


def test_a_png_with_both_chunks_is_read_from_ccv3() -> None:
    card = parse_card(png(text_chunk("chara", v2_card()), text_chunk("ccv3", v3_card())))

    assert (card.spec, card.data.name) == ("Character Card V3", "Seraphina Vale")


def test_compressed_text_chunks_are_read() -> None:
    ztxt = chunk(b"zTXt", b"chara\0\0" + zlib.compress(encoded(v2_card())))
    itxt = chunk(b"iTXt", b"ccv3\0\1\0en\0\0" + zlib.compress(encoded(v3_card())))

    assert parse_card(png(ztxt)).data.name == "Seraphina"
    assert parse_card(png(itxt)).data.name == "Seraphina Vale"


# --- bad cards -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"name: Seraphina\n", r"^the file is not JSON \(Expecting value at line 1 column 1\)$"),
        (b"\xff\xfe\x00garbage", r"^not a character card: neither a PNG nor JSON"),
        (b"[1, 2]", r"^not a character card: the JSON is a list, not an object$"),
        (b'{"hello": "world"}', r"^not a character card: no 'spec' and no 'name'$"),
        (png(), r"^a PNG with no character card in it \(no 'ccv3' or 'chara' text chunk\)$"),
        (png(chunk(b"tEXt", b"chara\0not base64!")), r"^the PNG's 'chara' chunk is not valid base64"),
        (png(chunk(b"tEXt", b"chara\0" + b"bm90IGpzb24=")), r"^the PNG's 'chara' chunk is not JSON"),
        (png(text_chunk("chara", v2_card()))[:60], r"^a truncated PNG"),
        (json.dumps({"spec": "chara_card_v9", "data": {}}).encode(), r"^unknown card spec 'chara_card_v9'"),
        (json.dumps({"spec": "chara_card_v2", "data": "x"}).encode(), r"needs a 'data' object; it has text$"),
        (json.dumps(v2_card(name="")).encode(), r"^the card has no name \(data.name is missing or empty\)$"),
        (json.dumps(v2_card(alternate_greetings="Hi")).encode(), r"^not a valid card: data.alternate_greetings: "),
    ],
)
def test_a_bad_card_says_what_is_wrong(raw: bytes, message: str) -> None:
    with pytest.raises(CardError, match=message):
        parse_card(raw)


def test_a_damaged_card_chunk_is_caught_by_its_checksum() -> None:
    good = text_chunk("chara", v2_card())
    body = good[8:-4].replace(b"chara\0ey", b"chara\0ez")
    damaged = good[:8] + body + good[-4:]

    with pytest.raises(CardError, match=r"'chara' chunk is damaged \(its checksum does not match\)"):
        parse_card(png(damaged))
    assert struct.unpack(">I", good[-4:])[0] == zlib.crc32(good[4:-4])  # the builder's own chunks are sound


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CardError, match=rf"^{tmp_path / 'nope.png'}: no such file$"):
        read_card(tmp_path / "nope.png")
    with pytest.raises(CardError, match=rf"^{tmp_path}: is a directory"):
        read_card(tmp_path)


# --- the file ------------------------------------------------------------------------------------------------


def test_the_file_reads_back_as_the_persona_with_its_comments(tmp_path: Path) -> None:
    result = card_to_persona(parse_card(png(text_chunk("ccv3", v3_card()))))
    text = render_persona(result.persona, result.sources, ["Seraphina Vale: imported."])

    path, persona = write_persona(tmp_path, text, "seraphina-vale")

    assert path == tmp_path / "seraphina-vale.toml"
    assert tomllib.loads(path.read_text(encoding="utf-8")) == result.persona
    assert load_persona(path) == persona == Persona.model_validate(result.persona)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "# Seraphina Vale: imported."
    assert lines[lines.index("aliases = [") - 1] == (
        "# the card's nickname, then words of its name (not titles, nor short or everyday words)"
    )
    assert lines[lines.index(f'color = "{persona_color("seraphina-vale")}"') - 1].startswith("# not in the card:")
    assert "# the card's personality" in lines
    assert lines[lines.index("[big_five]") - 1].startswith("# not in the card: a neutral 0.5 each")


def test_an_existing_file_is_kept_unless_replacing(tmp_path: Path) -> None:
    result = card_to_persona(parse_card(json.dumps(v2_card()).encode()))
    text = render_persona(result.persona, result.sources)
    (tmp_path / "seraphina.toml").write_text("# mine\n", encoding="utf-8")

    with pytest.raises(PersonaFileExists, match=r"seraphina.toml already exists: give another --id, or --force"):
        write_persona(tmp_path, text, "seraphina")
    assert (tmp_path / "seraphina.toml").read_text(encoding="utf-8") == "# mine\n"

    write_persona(tmp_path, text, "seraphina", replace=True)
    assert load_persona(tmp_path / "seraphina.toml").display_name == "Seraphina"
    assert [path.name for path in tmp_path.iterdir()] == ["seraphina.toml"]  # no draft left behind


def test_an_invalid_persona_is_never_put_in_place(tmp_path: Path) -> None:
    result = card_to_persona(parse_card(json.dumps(v2_card()).encode()))
    broken = result.persona | {"talkativeness": 2.0}

    with pytest.raises(PersonaError, match=rf"^{tmp_path / 'seraphina.toml'}: talkativeness: "):
        write_persona(tmp_path, render_persona(broken, {}), "seraphina")
    assert list(tmp_path.iterdir()) == []


# --- the colour: one per persona, readable in the room -----------------------------------------------------------


def css_colors(css: str) -> tuple[dict[str, str], dict[str, str]]:
    """The light theme's custom properties (the first :root), and the dark theme's (the :root in the dark media
    query), from room.css."""
    light = css[css.index(":root {") : css.index("}", css.index(":root {"))]
    dark_start = css.index(":root {", css.index("prefers-color-scheme: dark"))
    dark = css[dark_start : css.index("}", dark_start)]

    def props(block: str) -> dict[str, str]:
        return dict(re.findall(r"(--[\w-]+):\s*(#[0-9a-fA-F]{6})\s*;", block))

    return props(light), props(dark)


def test_the_contrast_computation_gives_the_known_values() -> None:
    assert contrast("#000000", "#ffffff") == contrast("#ffffff", "#000000") == 21.0
    assert contrast("#3a6ea5", "#3a6ea5") == 1.0
    assert round(contrast("#767676", "#ffffff"), 2) == 4.54  # the lightest grey that passes AA on white
    assert round(contrast("#777777", "#ffffff"), 2) == 4.48  # ... and the next one, which does not
    assert round(contrast("#ff0000", "#ffffff"), 2) == 4.0
    assert (relative_luminance("#000000"), relative_luminance("#ffffff")) == (0.0, 1.0)
    assert round(relative_luminance("#808080"), 4) == 0.2159
    assert round(delta_e("#000000", "#ffffff"), 1) == 100.0
    assert delta_e("#20966b", "#20966b") == 0.0
    with pytest.raises(ValueError, match="not a #rrggbb colour"):
        relative_luminance("#fff")


def test_the_colours_are_checked_against_what_the_room_shows() -> None:
    """The room paints a persona's colour as its name chip's background, with near-black or white text by luminance;
    the chip sits on the light or dark theme's panels. A change to room.css or room.js that these constants miss
    fails here."""
    light, dark = css_colors((ROOM / "room.css").read_text(encoding="utf-8"))
    assert {
        "light panel": light["--panel"],
        "light page": light["--page"],
        "dark panel": dark["--panel"],
        "dark page": dark["--page"],
    } == SURFACES
    script = (ROOM / "room.js").read_text(encoding="utf-8")
    human = re.search(r'const HUMAN_COLOR = "(#[0-9a-f]{6})"', script)
    assert human is not None
    assert human[1] == HUMAN_COLOR
    ink = re.search(r'return luminance > ([\d.]+) \? "(#\w{6})" : "(#\w{6})"', script)
    assert ink is not None
    assert (float(ink[1]), ink[2], ink[3]) == (INK_THRESHOLD, *INKS)
    assert 'setProperty("background-color", color)' in script
    assert 'setProperty("color", inkFor(color))' in script
    # The hue is the room's own hash of the id (FNV-1a, modulo 360), so a colour here keeps the room's hue.
    assert "0x811c9dc5" in script
    assert "0x01000193" in script
    assert "hash % 360" in script


def test_no_colour_reaches_aa_against_both_themes_so_the_chip_text_is_what_is_measured() -> None:
    # Why the rule is 4.5:1 for the chip's text and 3:1 for the chip around it: no colour at all reaches 4.5:1
    # against both the light and the dark panel.
    steps = range(0, 256, 17)
    assert not any(
        min(contrast(color, SURFACES["light panel"]), contrast(color, SURFACES["dark panel"])) >= 4.5
        for color in (f"#{r:02x}{g:02x}{b:02x}" for r in steps for g in steps for b in steps)
    )


def test_every_colour_it_can_give_reads_on_both_themes_and_is_not_the_humans_grey() -> None:
    from bots import colors

    candidates = [colors._at_luminance(hue / 360, level) for hue in range(360) for level in colors._LEVELS]

    for color in candidates:
        assert contrast(color, chip_ink(color)) >= 4.5, color  # the name on the chip, AA, on either theme
        for surface, background in SURFACES.items():
            assert contrast(color, background) >= 3.0, (color, surface)  # the chip against the panel or page
        assert delta_e(color, HUMAN_COLOR) >= HUMAN_DISTANCE, color
        assert room_readable(color)
    assert len(set(candidates)) > 700  # a few neighbours round to the same #rrggbb
    # What personas got before: a grey next to the human's, and its chip barely there on the light theme.
    assert not room_readable("#888888")
    assert delta_e("#888888", HUMAN_COLOR) < HUMAN_DISTANCE
    assert not room_readable(HUMAN_COLOR)


def test_the_colour_is_stable_and_keeps_the_rooms_hue() -> None:
    from bots import colors

    assert (colors._fnv1a("a"), colors._fnv1a("foobar")) == (0xE40C292C, 0xBF9CF968)  # FNV-1a's reference values
    color = persona_color("captain-isolde-varga")
    assert color == persona_color("captain-isolde-varga") == "#20966b"
    hue, _, _ = colorsys.rgb_to_hls(*(int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)))
    assert abs(hue * 360 - colors._fnv1a("captain-isolde-varga") % 360) < 1
    # Not Python's hash(), which changes with every process.
    code = "from bots.colors import persona_color; print(persona_color('captain-isolde-varga'))"
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == "#20966b"


def test_different_ids_get_different_colours_spread_over_the_hues() -> None:
    ids = ["ann", "anne", "aoi", "aoki", "kai", "kei", "rin", "ryn", "seraphina", "seraphina-vale", "yui", "mio"]
    colors = {persona_id: persona_color(persona_id) for persona_id in ids}

    assert len(set(colors.values())) == len(ids)
    for near, other in (("ann", "anne"), ("aoi", "aoki"), ("kai", "kei"), ("rin", "ryn")):
        assert delta_e(colors[near], colors[other]) > 10, (near, other)  # one letter apart, far apart in colour
    # Over many ids, every twelfth of the hue circle, and each of the two lightness levels, is used about as
    # often. (A hash of the id alone cannot promise that two personas in one room never look alike: give one a
    # color in its file then.)
    names = random.Random(25)
    many = [persona_color("".join(names.choices(string.ascii_lowercase, k=names.randint(3, 12)))) for _ in range(1200)]
    sectors = Counter(
        int(colorsys.rgb_to_hls(*(int(c[i : i + 2], 16) / 255 for i in (1, 3, 5)))[0] * 12) % 12 for c in many
    )
    assert len(sectors) == 12
    assert all(60 <= count <= 140 for count in sectors.values()), sectors
    white_ink = sum(1 for color in many if chip_ink(color) == "#ffffff")
    assert 500 <= white_ink <= 700


def test_an_imported_persona_has_its_own_colour_and_the_report_says_so() -> None:
    isolde, result = imported(isolde_card())
    again, _ = imported(isolde_card())
    seraphina, _ = imported(v2_card())
    renamed, _ = imported(isolde_card(), persona_id="isolde")

    assert isolde.color == again.color == persona_color("captain-isolde-varga")
    assert seraphina.color == persona_color("seraphina") != isolde.color
    assert renamed.color == persona_color("isolde")  # the id the file has, as the room's own hash takes it
    assert f"color: {isolde.color}, made from the id (cards have no colour); it reads on both room themes" in (
        result.filled_in
    )


def test_a_persona_file_with_no_colour_gets_the_one_an_import_would_write(tmp_path: Path) -> None:
    result = card_to_persona(parse_card(json.dumps(isolde_card()).encode()))
    without = {key: value for key, value in result.persona.items() if key != "color"}
    (tmp_path / "captain-isolde-varga.toml").write_text(render_persona(without, {}), encoding="utf-8")
    (tmp_path / "mine.toml").write_text(render_persona(without | {"id": "mine", "color": "#3a6ea5"}, {}), "utf-8")

    assert load_persona(tmp_path / "captain-isolde-varga.toml").color == result.persona["color"]
    assert load_persona(tmp_path / "mine.toml").color == "#3a6ea5"  # a colour given is kept as it is


# --- aliases: the name's words ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "aliases"),
    [
        ("Captain Isolde Varga", ["Isolde", "Varga"]),
        ("Dr. Émile Zola", ["Émile", "Zola"]),  # a title with its dot; accented Latin letters are letters
        ("Lady Rose Marlowe", ["Marlowe"]),  # "rose" is an everyday word: "a rose" would address her
        ("Will Turner", ["Turner"]),  # "I will" must not
        ("Al Capone", ["Capone"]),  # two letters: found inside too much other text
        ("Erich von Stroheim", ["Erich", "Stroheim"]),
        ("Henry VIII", ["Henry"]),
        ("Isolde 'Izzy' Varga", ["Isolde", "Izzy", "Varga"]),
        ("Jean-Luc Picard", ["Jean-Luc", "Picard"]),
        ("Ren the Wanderer", ["Ren"]),  # an epithet is not a name
        ("Lyra, Keeper of Stars", ["Lyra"]),
        ("Sera (Healer)", ["Sera"]),
        ("Sir Theodore of Ashford", ["Theodore"]),
        ("The Doctor", []),
        ("Seraphina", []),  # a name of one word is the display name already
        ("月見 ゆい", []),  # Japanese names are found anywhere in a message: a short word would be found everywhere
        ("agent smith", []),  # not written as a name
    ],
)
def test_the_names_words_a_person_would_call_it_by(name: str, aliases: list[str]) -> None:
    assert name_aliases(name) == aliases


def test_an_imported_persona_answers_to_its_first_name() -> None:
    persona, result = imported(isolde_card())
    names = {"rin": ("Rin",), persona.id: persona.names}  # as the arbiter's registry has them

    assert (persona.display_name, persona.aliases) == ("Captain Isolde Varga", ["Isolde", "Varga"])
    assert addressed_personas("Isolde, hi", names) == (persona.id,)
    assert addressed_personas("what do you think, varga?", names) == (persona.id,)
    assert addressed_personas("Rin and Isolde, come here", names) == ("rin", persona.id)
    assert addressed_personas("Captain, hi", names) == ()  # a title is not hers alone
    assert "aliases: Isolde, Varga, from the name's words (titles, short and everyday words left out)" in (
        result.filled_in
    )


def test_everyday_words_in_a_name_do_not_make_ordinary_messages_address_it() -> None:
    persona, _ = imported(isolde_card(name="Will Rose Turner"))

    assert persona.aliases == ["Turner"]
    assert addressed_personas("I will bring a rose", {persona.id: persona.names}) == ()
    assert addressed_personas("Turner, you too", {persona.id: persona.names}) == (persona.id,)


def test_the_nickname_comes_first_and_no_name_is_given_twice() -> None:
    persona, _ = imported(v3_card(name="Seraphina Vale", nickname="Vale"))

    assert persona.aliases == ["Vale", "Seraphina"]
    persona, result = imported(ja_card(), persona_id="yui")
    assert persona.aliases == []
    assert not any(line.startswith("aliases") for line in result.filled_in)


# --- stage directions ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("*smiles* Hello there.", "Hello there."),
        ("*She smiles.* You are safe here.", "You are safe here."),
        ("Hello there. *waves*", "Hello there."),
        ("Hello there *waves*", "Hello there"),  # at the end of the line
        ("Okay. *nods* Let's go.", "Okay. Let's go."),  # between two sentences
        ("*nods* yeah, sure.", "yeah, sure."),  # the line's start is never inside a sentence
        ('*She looks up.* "You\'re late."', "You're late."),  # only speech is left: no quotes needed
        ('"Come in," *she says, stepping aside.* "Sit."', "Come in. Sit."),
        ("*smiles*, okay then", "okay then"),
        ("(laughs) That's funny.", "That's funny."),
        ("Hi. (waves) How are you?", "Hi. How are you?"),
        ("(OOC: be gentle with her) Hello.", "Hello."),
        ("こんにちは。*手を振る*元気?", "こんにちは。元気?"),  # Japanese sentences meet with no space
        ("*smiles*", ""),  # nothing said
        ("(laughs)", ""),
        ("*sighs* *shrugs*", ""),
        # Kept: emphasis inside a sentence, and asides in parentheses.
        ("I *really* mean it", "I *really* mean it"),
        ("I *really do* mean it.", "I *really do* mean it."),
        ("Wait, *what*?", "Wait, *what*?"),
        ("本当に*大事*なんだ", "本当に*大事*なんだ"),
        ("I'll be there (probably)", "I'll be there (probably)"),
        ("The tea (the green one) is ready.", "The tea (the green one) is ready."),
        ("(I think) it's fine.", "(I think) it's fine."),
        ("**Bold** move, 2 * 3 * 4.", "**Bold** move, 2 * 3 * 4."),
        ('He said "hi" and left.', 'He said "hi" and left.'),
    ],
)
def test_stage_directions_are_taken_out_and_emphasis_is_kept(line: str, said: str) -> None:
    assert strip_stage_directions(line) == said


def test_an_imported_cards_lines_are_what_the_character_says() -> None:
    persona, result = imported(isolde_card())

    assert persona.samples.remarks == [
        "Always. That's what makes it fun.",
        "I *really* mean it: the storm is coming.",
        "We climb at dawn. Hold on to something, and don't look down.",
    ]
    assert persona.samples.aizuchi[:2] == ["Not yet.", "Hm."]  # "*shrugs*" said nothing: dropped
    assert persona.samples.greetings == ["You're the new navigator, {name}? Sit down."]
    assert (
        "stage directions such as *She grins.* in 5 sample line(s): a persona's lines are what it says "
        "(1 of them held nothing else and are dropped)"
    ) in result.left_out
    assert result.sources["samples.remarks"].endswith(", stage directions taken out")
    assert ", stage directions taken out;" in result.sources["samples.greetings"]


def test_a_card_with_no_stage_directions_says_nothing_about_them() -> None:
    _, result = imported(ja_card(), persona_id="yui")

    assert not any("stage directions" in line for line in result.left_out)
    assert "stage directions" not in result.sources["samples.remarks"]


def test_a_long_direction_is_shortened_in_the_report() -> None:
    examples = "{{char}}: *She turns slowly toward the window, where the rain is falling.* Stay."
    _, result = imported(v2_card(mes_example=examples, first_mes=""))

    [line] = [line for line in result.left_out if line.startswith("stage directions")]
    assert line.startswith("stage directions such as *She turns slowly toward the window…* in 1 sample line(s)")
