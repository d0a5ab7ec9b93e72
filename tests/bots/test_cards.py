"""Character cards made into persona files: what maps where, what is reported as left out, what a bad card says,
and the file written from it (read back by the persona loader, in place whole or not at all)."""

from __future__ import annotations

import json
import struct
import tomllib
import zlib
from typing import TYPE_CHECKING, Any

import pytest

from bots.card_file import CardError, parse_card, read_card
from bots.cards import card_to_persona
from bots.llm.scripted import GENERIC
from bots.persona import Persona, PersonaError, load_persona
from bots.persona_file import PersonaFileExists, render_persona, write_persona
from tests.support.cards import chunk, encoded, ja_card, png, text_chunk, v2_card, v3_card

if TYPE_CHECKING:
    from pathlib import Path


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
    # The character's own turns only, continuation lines joined; a turn by the card's name is the character's.
    assert persona.samples.remarks == [
        "*She smiles.* You are safe in my glade. The forest guards its own.",
        "I keep this forest. I have kept it for a very long time.",
        "The herbs need another hour. Then we eat.",
    ]
    # Lines that fit a nod are nods; one is not enough, so generic ones make up the three a persona needs.
    assert persona.samples.aizuchi[:2] == ["Of course.", "Mm-hm."]
    assert persona.samples.aizuchi[2] in GENERIC["en"].aizuchi
    assert len(persona.samples.aizuchi) == 3
    # {{user}} is the file's {name}; a random choice is its first option.
    assert persona.samples.greetings == [
        "*You wake to the smell of herbs.* Oh, {name}, you're awake! I'm Seraphina.",
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

    assert (persona.id, persona.display_name, persona.aliases) == ("seraphina-vale", "Seraphina Vale", ["Sera"])
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
    assert {line.split(":")[0] for line in result.left_out} == {"avatar", "chat"}


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
    assert lines[lines.index("aliases = [") - 1] == "# the card's nickname"
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
