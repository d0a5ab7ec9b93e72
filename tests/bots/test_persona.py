"""Persona files: loading, validation errors that name the file and the field, the shipped personas, and
``aizuchi personas check`` (run as the user runs it, in a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from bots.check import check_personas
from bots.colors import persona_color
from bots.language.text import is_emoji
from bots.persona import PersonaError, load_persona, load_personas

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "personas"


def valid(persona_id: str = "aoi", **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": persona_id,
        "display_name": persona_id.title(),
        "aliases": [f"{persona_id.title()}-chan"],
        "language": "en",
        "personality": "Curious and direct.",
        "background": "Grew up by the sea.",
        "speaking_style": "Short plain sentences.",
        "talkativeness": 0.6,
        "provider": "scripted",
        "discord_token_env": f"{persona_id.upper()}_DISCORD_TOKEN",
        "big_five": {
            "openness": 0.5,
            "conscientiousness": 0.5,
            "extraversion": 0.5,
            "agreeableness": 0.5,
            "neuroticism": 0.5,
        },
        "samples": {"aizuchi": ["Right.", "I see.", "Huh."], "remarks": ["One.", "Two.", "Three."]},
    }
    for key, value in changes.items():
        if "." in key:
            table, field = key.split(".")
            if value is DROP:
                del data[table][field]
            else:
                data[table][field] = value
        elif value is DROP:
            del data[key]
        else:
            data[key] = value
    return data


DROP = object()


def toml_of(data: dict[str, Any]) -> str:
    """TOML for a persona: top-level values, then one table per dict (JSON literals are valid TOML here)."""
    lines = [
        f"{key} = {json.dumps(value, ensure_ascii=False)}" for key, value in data.items() if not isinstance(value, dict)
    ]
    for name, table in ((k, v) for k, v in data.items() if isinstance(v, dict)):
        lines.append(f"[{name}]")
        lines += [f"{key} = {json.dumps(value, ensure_ascii=False)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


def write(directory: Path, data: dict[str, Any], name: str | None = None) -> Path:
    path = directory / f"{name or data.get('id', 'nameless')}.toml"
    path.write_text(toml_of(data), encoding="utf-8")
    return path


# --- loading ---------------------------------------------------------------------------------------------


def test_a_valid_file_loads_with_its_defaults(tmp_path: Path) -> None:
    persona = load_persona(write(tmp_path, valid()))

    assert persona.id == "aoi"
    assert persona.names == ("Aoi", "Aoi-chan")
    assert persona.big_five.openness == 0.5
    assert (persona.color, persona.react_with_emoji) == (persona_color("aoi"), False)  # its own, not a grey
    # An older file, with only nods and remarks, still loads: the per-kind sets are optional.
    samples = persona.samples
    assert (samples.greetings, samples.farewells, samples.thanks) == ([], [], [])
    assert (samples.answers, samples.questions, samples.echoes) == ([], [], [])


def test_the_per_kind_sets_load_with_their_placeholders(tmp_path: Path) -> None:
    sets = {
        "greetings": ["Hi {name}!", "Hello."],
        "farewells": ["Bye {name}."],
        "thanks": ["Anytime."],
        "answers": ["{word}? Good question."],
        "questions": ["What about you, {name}?"],
        "echoes": ["{word}, nice.", "So, {word}, {name}?"],
    }
    changes: dict[str, Any] = {f"samples.{name}": lines for name, lines in sets.items()}
    persona = load_persona(write(tmp_path, valid("aoi", **changes)))

    for name, lines in sets.items():
        assert getattr(persona.samples, name) == lines


def test_personas_load_sorted_by_id_or_in_the_order_asked(tmp_path: Path) -> None:
    for persona_id in ("cho", "aoi", "ben"):
        write(tmp_path, valid(persona_id))

    assert [p.id for p in load_personas(tmp_path)] == ["aoi", "ben", "cho"]
    assert [p.id for p in load_personas(tmp_path, ["cho", "aoi"])] == ["cho", "aoi"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        pytest.param({"display_name": DROP}, "display_name", id="missing-field"),
        pytest.param({"talkativeness": 1.5}, "talkativeness", id="trait-above-one"),
        pytest.param({"talkativeness": "high"}, "talkativeness", id="trait-not-a-number"),
        pytest.param({"big_five.extraversion": -0.1}, "big_five.extraversion", id="big-five-below-zero"),
        pytest.param({"big_five.openness": DROP}, "big_five.openness", id="big-five-missing"),
        pytest.param({"samples.aizuchi": ["Hm.", "Ok."]}, "samples.aizuchi", id="too-few-samples"),
        pytest.param({"samples.remarks": ["One.", "  ", "Three."]}, "samples.remarks[1]", id="blank-sample"),
        pytest.param({"samples.echoes": ["Nice.", "{word}!"]}, "samples.echoes[0]", id="echo-without-word"),
        pytest.param({"samples.greetings": ["Hi {nmae}!"]}, "samples.greetings[0]", id="unknown-placeholder"),
        pytest.param({"samples.greetings": ["Hi {word}!"]}, "samples.greetings[0]", id="placeholder-not-for-set"),
        pytest.param({"samples.aizuchi": ["Hm.", "Ok.", "{name}!"]}, "samples.aizuchi[2]", id="placeholder-in-a-nod"),
        pytest.param({"samples.farewell": ["Bye."]}, "samples.farewell", id="unknown-set"),
        pytest.param({"language": "fr"}, "language", id="unknown-language"),
        pytest.param({"mood": "sunny"}, "mood", id="unknown-field"),
        pytest.param({"color": "red"}, "color", id="bad-colour"),
        pytest.param({"discord_token_env": "hana-token"}, "discord_token_env", id="bad-variable-name"),
        pytest.param({"aliases": ["AOI"]}, "aliases", id="alias-repeats-the-name"),
        pytest.param({"aliases": ["Blue", "blue"]}, "aliases", id="aliases-repeat-each-other"),
        pytest.param({"personality": "x" * 401}, "personality", id="line-too-long"),
        pytest.param({"id": "ben"}, "id", id="id-is-not-the-file-name"),
    ],
)
def test_every_validation_error_names_the_file_and_the_field(
    tmp_path: Path, changes: dict[str, Any], field: str
) -> None:
    path = write(tmp_path, valid(**changes), name="aoi")

    with pytest.raises(PersonaError) as caught:
        load_persona(path)

    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    problems = message.removeprefix(f"{path}: ").split("; ")
    assert any(problem.startswith(f"{field}: ") for problem in problems), message


def test_an_invalid_id_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad id.toml"
    path.write_text(toml_of(valid("x", id="bad id")), encoding="utf-8")

    with pytest.raises(PersonaError, match=r"bad id\.toml: id: "):
        load_persona(path)


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        pytest.param(b'id = "aoi"\ndisplay_name = \n', "not valid TOML", id="not-toml"),
        pytest.param(b'id = "\xff\xfe"\n', "cannot read", id="not-utf8"),
    ],
)
def test_an_unreadable_file_is_named(tmp_path: Path, content: bytes, complaint: str) -> None:
    path = tmp_path / "aoi.toml"
    path.write_bytes(content)

    with pytest.raises(PersonaError, match=complaint) as caught:
        load_persona(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_missing_files_and_directories_are_named(tmp_path: Path) -> None:
    with pytest.raises(PersonaError, match="no such persona file"):
        load_persona(tmp_path / "ghost.toml")
    with pytest.raises(PersonaError, match="no such persona directory"):
        load_personas(tmp_path / "nowhere")
    with pytest.raises(PersonaError, match=r"no persona files \(\*\.toml\)"):
        load_personas(tmp_path)
    with pytest.raises(PersonaError, match="not a valid persona id"):
        load_personas(tmp_path, ["../etc/passwd"])


# --- the shipped personas ----------------------------------------------------------------------------------


def test_the_shipped_personas_all_load_and_make_a_cast() -> None:
    personas = load_personas(SHIPPED)

    assert len(personas) >= 3
    assert sorted(p.id for p in personas) == sorted(path.stem for path in SHIPPED.glob("*.toml"))
    assert {p.language for p in personas} == {"en", "ja"}
    assert len({p.talkativeness for p in personas}) > 1  # not all alike: some lead, some listen


def test_the_shipped_personas_pass_the_check() -> None:
    report = check_personas(SHIPPED, None, {})

    assert report.ok, report.errors
    assert report.warnings == []


def test_the_shipped_personas_have_lines_enough_for_a_long_run() -> None:
    # A persona posts about 40 lines in a long run and never repeats a remark of its last 30: with 16 remarks and
    # its per-kind sets and echoes it need not fall back on generic lines. Nods may come again (only not twice
    # running), so about 16 keep them varied rather than fresh.
    for persona in load_personas(SHIPPED):
        samples = persona.samples
        assert len(samples.aizuchi) >= 16, persona.id
        assert len(samples.remarks) >= 16, persona.id
        for name in ("greetings", "farewells", "thanks", "answers", "questions", "echoes"):
            assert len(getattr(samples, name)) >= 5, f"{persona.id}: samples.{name}"
        every = [line for name in type(samples).model_fields for line in getattr(samples, name)]
        assert len(every) == len(set(every)), f"{persona.id}: a line appears twice"


def test_some_shipped_personas_nod_with_emoji_reactions_and_have_emoji_nods_to_react_with() -> None:
    # Nods are text messages unless a persona file opts into reactions (docs/personas.md); some shipped personas
    # do, so the demo shows both. Opting in with no nod that is only emoji, nor an emoji of its own, would never react.
    personas = load_personas(SHIPPED)
    reacting = [persona for persona in personas if persona.react_with_emoji]

    assert reacting
    assert len(reacting) < len(personas)  # the others nod in text
    for persona in reacting:
        emoji = [line for line in persona.samples.aizuchi if is_emoji(line)]
        assert len(emoji) >= 3 or persona.nod_emojis, persona.id
        assert len(emoji) < len(persona.samples.aizuchi), persona.id  # words too: not every nod fits a reaction


# --- the check's cross-file rules --------------------------------------------------------------------------


def test_the_check_reports_names_shared_between_personas(tmp_path: Path) -> None:
    write(tmp_path, valid("aoi", aliases=["Sunny"]))
    write(tmp_path, valid("ben", aliases=["sunny"]))

    report = check_personas(tmp_path, None, {})

    assert not report.ok
    assert any("sunny" in error and "ambiguous" in error for error in report.errors)


def test_the_check_reports_a_shared_token_variable_and_an_unknown_profile(tmp_path: Path) -> None:
    write(tmp_path, valid("aoi", discord_token_env="SHARED_TOKEN"))
    ben = write(tmp_path, valid("ben", discord_token_env="SHARED_TOKEN", provider="gpt-nowhere"))

    report = check_personas(tmp_path, None, {})

    assert any("SHARED_TOKEN" in error for error in report.errors)
    assert f"{ben}: provider: no profile named 'gpt-nowhere'" in "\n".join(report.errors)


def test_the_check_warns_about_samples_longer_than_the_default_tiers(tmp_path: Path) -> None:
    nods = ["Right.", "I see.", "Well, that is certainly one way to look at it."]
    path = write(tmp_path, valid("aoi", **{"samples.aizuchi": nods}))

    report = check_personas(tmp_path, None, {})

    assert report.ok
    assert [warning.split(":")[:2] for warning in report.warnings] == [[str(path), " samples.aizuchi[2]"]]


def test_the_check_measures_the_per_kind_sets_with_their_placeholders_filled(tmp_path: Path) -> None:
    # A name or a word counts 8 columns: the echo comes to 120 columns, the answer to 122.
    echo = "{word}" + "e" * 112
    answer = "{word}{name}" + "a" * 106
    path = write(tmp_path, valid("aoi", **{"samples.echoes": [echo], "samples.answers": ["Fine.", answer]}))

    report = check_personas(tmp_path, None, {})

    assert report.ok
    assert [warning.split(":")[1:3] for warning in report.warnings] == [
        [
            " samples.answers[1]",
            " 122 columns with its placeholders filled, over the default 120 (the scripted provider"
            " will not use it unless a channel allows more)",
        ]
    ]
    assert all(warning.startswith(str(path)) for warning in report.warnings)


# --- ``aizuchi personas check`` as a command ---------------------------------------------------------------


def run_check(directory: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    # Run where no .env or profiles.toml lies around, with no AIZUCHI_* settings from the caller.
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIZUCHI_")}
    return subprocess.run(
        [sys.executable, "-m", "aizuchi", "personas", "check", "--dir", str(directory)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_check_command_passes_on_the_shipped_personas(tmp_path: Path) -> None:
    result = run_check(SHIPPED, tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(f"{len(list(SHIPPED.glob('*.toml')))} persona(s) checked: ok")
    assert "  emoji rin_cheer" in result.stdout  # its own, checked
    assert result.stderr == ""


def test_the_check_command_fails_clearly_on_broken_files(tmp_path: Path) -> None:
    personas = tmp_path / "personas"
    personas.mkdir()
    write(personas, valid("aoi"))
    broken = write(personas, valid("ben", talkativeness=2))
    garbled = personas / "cho.toml"
    garbled.write_text('id = "cho"\nlanguage = \n', encoding="utf-8")

    result = run_check(personas, tmp_path)

    assert result.returncode == 1
    errors = result.stderr.splitlines()
    assert any(line.startswith(f"error: {broken}: talkativeness: ") for line in errors), result.stderr
    assert any(line.startswith(f"error: {garbled}: not valid TOML") for line in errors), result.stderr
    assert "1 persona(s) checked: 2 error(s)" in result.stdout


# --- MCP servers -----------------------------------------------------------------------------------------

FAQ = {"name": "faq", "command": "python", "args": ["examples/faq/faq_server.py"], "tools": ["search_faq"]}


def test_mcp_servers_load_from_an_array_of_tables(tmp_path: Path) -> None:
    path = tmp_path / "aoi.toml"
    http = {"name": "docs", "url": "https://mcp.example.com/mcp", "tools": ["lookup"], "timeout_s": 2.5}
    path.write_text(tomli_w.dumps(valid(mcp_servers=[{**FAQ, "env": ["FAQ_TOKEN"]}, http])), encoding="utf-8")
    assert "[[mcp_servers]]" in path.read_text(encoding="utf-8")

    faq, docs = load_persona(path).mcp_servers

    assert (faq.command, faq.args, faq.url, faq.tools, faq.env, faq.timeout_s) == (
        "python",
        ["examples/faq/faq_server.py"],
        None,
        ["search_faq"],
        ["FAQ_TOKEN"],
        5.0,
    )
    assert (docs.command, docs.url, docs.timeout_s) == (None, "https://mcp.example.com/mcp", 2.5)
    assert load_persona(write(tmp_path, valid("ben"))).mcp_servers == []


@pytest.mark.parametrize(
    ("server", "field", "complaint"),
    [
        pytest.param({**FAQ, "command": DROP}, "mcp_servers[0]", "either command", id="neither-command-nor-url"),
        pytest.param({**FAQ, "url": "https://x.example/mcp"}, "mcp_servers[0]", "not both", id="command-and-url"),
        pytest.param(
            {"name": "docs", "url": "https://x.example/mcp", "args": ["-v"], "tools": ["a"]},
            "mcp_servers[0]",
            "a url server takes neither",
            id="args-for-a-url",
        ),
        pytest.param({**FAQ, "url": "ftp://x"}, "mcp_servers[0].url", "pattern", id="url-not-http"),
        pytest.param({**FAQ, "tools": []}, "mcp_servers[0].tools", "at least 1", id="no-tools"),
        pytest.param({**FAQ, "tools": ["search faq"]}, "mcp_servers[0].tools[0]", "pattern", id="bad-tool-name"),
        pytest.param({**FAQ, "tools": ["decide"]}, "mcp_servers", "'decide'", id="tool-named-decide"),
        pytest.param({**FAQ, "env": ["faq-token"]}, "mcp_servers[0].env[0]", "pattern", id="env-not-a-name"),
        pytest.param({**FAQ, "timeout_s": 0}, "mcp_servers[0].timeout_s", "greater than 0", id="zero-timeout"),
        pytest.param({**FAQ, "token": "sk-secret"}, "mcp_servers[0].token", "Extra inputs", id="unknown-field"),
        pytest.param({**FAQ, "name": "has space"}, "mcp_servers[0].name", "", id="bad-name"),
    ],
)
def test_a_bad_mcp_server_entry_is_named_by_its_field(
    tmp_path: Path, server: dict[str, Any], field: str, complaint: str
) -> None:
    path = tmp_path / "aoi.toml"
    entry = {key: value for key, value in server.items() if value is not DROP}
    path.write_text(tomli_w.dumps(valid(mcp_servers=[entry])), encoding="utf-8")

    with pytest.raises(PersonaError) as caught:
        load_persona(path)

    problems = str(caught.value).removeprefix(f"{path}: ").split("; ")
    assert any(p.startswith(f"{field}: ") and complaint in p for p in problems), str(caught.value)


def test_two_servers_may_not_share_a_name_or_a_tool(tmp_path: Path) -> None:
    path = tmp_path / "aoi.toml"
    other = {"name": "other", "command": "other-server", "tools": ["search_faq"]}
    path.write_text(tomli_w.dumps(valid(mcp_servers=[FAQ, {**FAQ, "tools": ["x"]}])), encoding="utf-8")
    with pytest.raises(PersonaError, match=r"mcp_servers: Value error, two servers have the same name"):
        load_persona(path)
    path.write_text(tomli_w.dumps(valid(mcp_servers=[FAQ, other])), encoding="utf-8")
    with pytest.raises(PersonaError, match=r"mcp_servers: Value error, tools listed twice .*: search_faq"):
        load_persona(path)
