"""``aizuchi personas import CARD`` as the user runs it: the installed command, in a directory of its own, on real
card files; the persona file it writes passes ``aizuchi personas check``; a bad card ends it with one line and
writes nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from arbiter.core.addressing import addressed_personas
from bots.colors import persona_color, room_readable
from bots.persona import load_persona
from tests.support.cards import chunk, isolde_card, ja_card, png, text_chunk, v2_card, v3_card

AIZUCHI = Path(sys.executable).parent / "aizuchi"  # the console script installed beside this Python (.venv/bin)


def aizuchi(workdir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # No AIZUCHI_*/ARBITER_* settings from the caller; the working directory has no .env or profiles.toml.
    keep = {key: value for key, value in os.environ.items() if not key.startswith(("AIZUCHI_", "ARBITER_"))}
    return subprocess.run(
        [str(AIZUCHI), *args],
        cwd=workdir,
        env={**keep, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def personas(tmp_path: Path) -> Path:
    directory = tmp_path / "my-personas"
    directory.mkdir()
    return directory


def test_a_png_card_becomes_a_persona_the_check_accepts(tmp_path: Path, personas: Path) -> None:
    card = tmp_path / "Seraphina.png"
    card.write_bytes(png(text_chunk("chara", v2_card()), text_chunk("ccv3", v3_card())))

    result = aizuchi(tmp_path, "personas", "import", str(card), AIZUCHI_PERSONAS_DIR=str(personas))

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    written = personas / "seraphina-vale.toml"
    lines = result.stdout.splitlines()
    assert lines[0] == f"wrote {written}: Seraphina Vale (en), from a Character Card V3 in PNG"
    left_out = [line.removeprefix("left out: ") for line in lines if line.startswith("left out: ")]
    named = {line.split(":")[0] for line in left_out}
    assert named >= {"system_prompt", "character_book", "creator_notes", "tags", "assets", "extensions"}
    assert any(line.startswith("filled in: big_five") for line in lines)
    assert lines[-1] == "next: aizuchi personas check, then run it with AIZUCHI_PERSONAS=seraphina-vale"
    assert written.read_text(encoding="utf-8").startswith(
        "# Seraphina Vale: imported from Seraphina.png, a Character Card V3 in PNG, by `aizuchi personas import`."
    )

    check = aizuchi(tmp_path, "personas", "check", AIZUCHI_PERSONAS_DIR=str(personas))

    assert check.returncode == 0, check.stderr
    assert "seraphina-vale Seraphina Vale en  profile=scripted" in check.stdout
    assert check.stdout.rstrip().endswith("1 persona(s) checked: ok")


def test_an_imported_persona_is_usable_as_it_is(tmp_path: Path, personas: Path) -> None:
    """A card with a title in its name and actions around its lines: the persona answers to its first name, has a
    colour of its own, says only what the character says, and the report names all three."""
    card = tmp_path / "Isolde.png"
    card.write_bytes(png(text_chunk("chara", isolde_card())))

    result = aizuchi(tmp_path, "personas", "import", str(card), AIZUCHI_PERSONAS_DIR=str(personas))

    assert result.returncode == 0, result.stderr
    written = personas / "captain-isolde-varga.toml"
    color = persona_color("captain-isolde-varga")
    lines = result.stdout.splitlines()
    assert lines[0] == f"wrote {written}: Captain Isolde Varga (en), from a Character Card V2 in PNG"
    assert "filled in: aliases: Isolde, Varga, from the name's words (titles, short and everyday words left out)" in (
        lines
    )
    assert f"filled in: color: {color}, made from the id (cards have no colour); it reads on both room themes" in lines
    assert (
        "left out: stage directions such as *She grins.* in 5 sample line(s): a persona's lines are what it says "
        "(1 of them held nothing else and are dropped)"
    ) in lines

    persona = load_persona(written)
    assert addressed_personas("Isolde, hi", {"rin": ("Rin",), persona.id: persona.names}) == (persona.id,)
    assert (persona.color, room_readable(persona.color)) == (color, True)
    samples = persona.samples
    assert samples.greetings == ["You're the new navigator, {name}? Sit down."]
    assert [line for line in samples.remarks + samples.aizuchi if "*" in line] == [
        "I *really* mean it: the storm is coming."  # emphasis, not a stage direction
    ]
    text = written.read_text(encoding="utf-8")
    assert f'color = "{color}"' in text
    assert "# the character's lines in the card's example messages, stage directions taken out" in text

    check = aizuchi(tmp_path, "personas", "check", AIZUCHI_PERSONAS_DIR=str(personas))
    assert check.returncode == 0, check.stderr
    assert check.stdout.rstrip().endswith("1 persona(s) checked: ok")


def test_a_japanese_json_card_with_the_options(tmp_path: Path) -> None:
    card = tmp_path / "yui.json"
    card.write_text(json.dumps(ja_card(), ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "new" / "dir"  # made when missing

    result = aizuchi(
        tmp_path, "personas", "import", str(card), "--out", str(out), "--id", "yui", "--provider", "anthropic"
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {out / 'yui.toml'}: 月見 ゆい (ja), from a Character Card V2 in JSON")
    assert "filled in: samples.aizuchi: 2 generic Japanese line(s)" in result.stdout
    check = aizuchi(tmp_path, "personas", "check", "--dir", str(out), ANTHROPIC_API_KEY="sk-test")
    assert check.returncode == 0, check.stderr
    assert "yui        月見 ゆい      ja  profile=anthropic" in check.stdout


def test_an_id_that_is_taken_is_refused_unless_forced(tmp_path: Path, personas: Path) -> None:
    card = tmp_path / "card.json"
    card.write_text(json.dumps(v2_card()), encoding="utf-8")
    mine = personas / "seraphina.toml"
    mine.write_text("# my own seraphina\n", encoding="utf-8")

    refused = aizuchi(tmp_path, "personas", "import", str(card), "--out", str(personas))

    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"aizuchi: {mine} already exists: give another --id, or --force to replace it"
    ]
    assert refused.stdout == ""
    assert mine.read_text(encoding="utf-8") == "# my own seraphina\n"

    forced = aizuchi(tmp_path, "personas", "import", str(card), "--out", str(personas), "--force")

    assert forced.returncode == 0, forced.stderr
    assert 'display_name = "Seraphina"' in mine.read_text(encoding="utf-8")
    assert sorted(path.name for path in personas.iterdir()) == ["seraphina.toml"]


@pytest.mark.parametrize(
    ("card", "args", "message"),
    [
        (("card.json", b"{ not json"), (), r"card\.json: the file is not JSON \(Expecting property name"),
        (("card.png", png()), (), r"card\.png: a PNG with no character card in it"),
        (
            ("card.png", png(chunk(b"tEXt", b"chara\0%%%"))),
            (),
            r"card\.png: the PNG's 'chara' chunk is not valid base64",
        ),
        (("card.json", json.dumps({"spec": "pygmalion", "data": {}}).encode()), (), r"unknown card spec 'pygmalion'"),
        (("card.json", json.dumps(v2_card(name="  ")).encode()), (), r"card\.json: the card has no name"),
        (None, (), r"missing\.png: no such file$"),
        (("card.json", json.dumps(ja_card()).encode()), (), r"cannot make an id from the name .*: give one with --id$"),
        (("card.json", json.dumps(v2_card()).encode()), ("--id=-bad",), r"--id '-bad' is not a valid id"),
    ],
)
def test_a_bad_card_ends_with_one_line_and_writes_nothing(
    tmp_path: Path, personas: Path, card: tuple[str, bytes] | None, args: tuple[str, ...], message: str
) -> None:
    path = tmp_path / (card[0] if card else "missing.png")
    if card is not None:
        path.write_bytes(card[1])

    result = aizuchi(tmp_path, "personas", "import", str(path), *args, "--out", str(personas))

    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("aizuchi: ")
    assert re.search(message, line), line
    assert result.stdout == ""
    assert list(personas.iterdir()) == []
