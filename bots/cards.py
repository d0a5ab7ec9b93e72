"""Tavern character cards made into persona file data.

A card holds far more than a persona file: a system prompt, a lorebook, notes, assets. What has a place here is
mapped; everything else is named in :attr:`Imported.left_out`, so the person importing it knows what to carry over
by hand, and every default put in its place in :attr:`Imported.filled_in`.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import TypeAdapter, ValidationError

from arbiter.contract import Id, display_length
from bots.card_file import CardData, CardError
from bots.check import DEFAULT_LENGTHS
from bots.llm.scripted import GENERIC
from bots.text import cut_to_length

if TYPE_CHECKING:
    from bots.card_file import Card

__all__ = ("Imported", "card_to_persona")

Language = Literal["en", "ja"]

LINE_LIMIT = 400  # bots.persona.Line: the longest text a persona field or sample holds
NAME_LIMIT = 80  # display_name and each alias
_NEUTRAL = 0.5
_MIN_SAMPLES = 3  # Samples.aizuchi and Samples.remarks hold at least this many
_AIZUCHI_COLUMNS = DEFAULT_LENGTHS["aizuchi"]  # an example line this short is a nod
_ID: TypeAdapter[str] = TypeAdapter(Id)


@dataclass(frozen=True, slots=True)
class Imported:
    """A persona file's data, where each part came from (for comments in the file), and what did not fit."""

    persona: dict[str, Any]
    sources: dict[str, str]  # a field ("personality", "samples.greetings") -> a note on where it came from
    left_out: list[str] = field(default_factory=list)  # one line each: what of the card the file lacks
    filled_in: list[str] = field(default_factory=list)  # one line each: what the file has that the card lacked


# What each language's defaults say, where a card has nothing to give.
_WORDS: dict[str, dict[str, str]] = {
    "en": {
        "setting": "Setting: ",
        "join": " ",
        "user": "the user",
        "style": "Talks the way the sample lines do: their tone, their length, their habits.",
        "personality": "{name}, as the sample lines show.",
        "background": "No background given.",
    },
    "ja": {
        "setting": "舞台：",
        "join": "",  # Japanese sentences follow each other with no space
        "user": "ユーザー",
        "style": "サンプルの台詞と同じ口調、長さ、癖で話す。",
        "personality": "サンプルの台詞に表れる{name}。",
        "background": "背景の設定はない。",
    },
}
# Mapped here, so never reported as left out. V2/V3's top level beside data mirrors V1 and is not read.
_MAPPED = frozenset(CardData.model_fields) - {"extensions"}
_ABOUT = {
    "system_prompt": "the card's system prompt (aizuchi writes its own prompt from the persona)",
    "post_history_instructions": "instructions after the history (aizuchi writes its own prompt)",
    "creator_notes": "the creator's notes for users",
    "creator_notes_multilingual": "the creator's notes for users, by language",
    "creator": "who made the card",
    "character_version": "the card's version",
    "source": "where the card came from",
    "creation_date": "when the card was made",
    "modification_date": "when the card was last changed",
}


def card_to_persona(
    card: Card,
    *,
    persona_id: str | None = None,
    language: Language | None = None,
    provider: str = "scripted",
) -> Imported:
    """The persona file data for ``card``. ``persona_id`` defaults to a slug of the name, ``language`` to a guess
    from the card's text (ja when most of its letters are kana or kanji)."""
    data = card.data
    name = _collapse(data.name)
    pid = _persona_id(persona_id, name)
    lang: Language = language or _guess_language(data)
    char = _collapse(data.nickname) or name  # V3: {{char}} stands for the nickname when there is one
    notes = Imported({}, {})
    if persona_id is None:
        notes.sources["id"] = "made from the card's name; the file name must match it"
    if language is None:
        notes.sources["language"] = "guessed from the card's text"

    display_name = _cut_reported(name, NAME_LIMIT, "name", notes.left_out)
    aliases = []
    nickname = _collapse(data.nickname)
    if nickname and nickname.casefold() != display_name.casefold():
        aliases.append(_cut_reported(nickname, NAME_LIMIT, "nickname", notes.left_out))
        notes.sources["aliases"] = "the card's nickname"
    personality, background = _character(data, display_name, char, _WORDS[lang], notes)
    notes.filled_in.append("speaking_style: cards have no such field; a line that points at the samples")
    notes.sources["speaking_style"] = "cards have no such field: say how the character talks"
    notes.sources["big_five"] = "not in the card: a neutral 0.5 each; extraversion also makes it quicker to jump in"
    talkativeness = _talkativeness(data)
    if talkativeness is None:
        talkativeness = _NEUTRAL
        notes.filled_in.append("talkativeness and big_five: not in the card; a neutral 0.5 each (tune them)")
        notes.sources["talkativeness"] = "not in the card: a neutral 0.5 (0 rarely speaks, 1 whenever it can)"
    else:
        notes.filled_in.append("big_five: not in the card; a neutral 0.5 each (tune them)")
        notes.sources["talkativeness"] = "the card's talkativeness (SillyTavern's)"
    samples = _samples(data, {name, char}, char, lang, notes)
    notes.left_out.extend(_unmapped(data))

    notes.persona.update(
        id=pid,
        display_name=display_name,
        aliases=aliases,
        language=lang,
        personality=personality,
        background=background,
        speaking_style=_WORDS[lang]["style"],
        talkativeness=talkativeness,
        provider=provider,
        discord_token_env=_token_env(pid),
        big_five=dict.fromkeys(
            ("openness", "conscientiousness", "extraversion", "agreeableness", "neuroticism"), _NEUTRAL
        ),
        samples=samples,
    )
    return notes


def _character(data: CardData, name: str, char: str, words: dict[str, str], notes: Imported) -> tuple[str, str]:
    """Personality and background: the card's personality summary, else its description, is the personality;
    what is left of description and scenario (the setting) is the background."""

    def prose(text: str) -> str:
        return _collapse(_macros(text, char, words["user"]))

    description, summary, scenario = prose(data.description), prose(data.personality), prose(data.scenario)
    parts = [("description", description), ("scenario", scenario)]
    if summary:
        personality = _cut_reported(summary, LINE_LIMIT, "personality", notes.left_out)
        notes.sources["personality"] = "the card's personality"
    elif description:
        personality = _cut_reported(description, LINE_LIMIT, "description", notes.left_out)
        notes.sources["personality"] = "the card's description (it has no personality summary)"
        parts = parts[1:]
    else:
        personality = words["personality"].format(name=name)
        notes.filled_in.append("personality: the card has no description or personality; a placeholder line")
    parts = [(key, f"{words['setting']}{text}" if key == "scenario" else text) for key, text in parts if text]
    if not parts:
        notes.filled_in.append("background: the card has no scenario, and no description left for it")
        return personality, words["background"]
    notes.sources["background"] = "the card's " + ", then its ".join(
        "scenario (the setting)" if key == "scenario" else key for key, _ in parts
    )
    return personality, _share(parts, LINE_LIMIT, words["join"], notes.left_out)


def _samples(data: CardData, names: set[str], char: str, lang: Language, notes: Imported) -> dict[str, list[str]]:
    aizuchi, remarks = _example_lines(data.mes_example, names, char, notes.left_out)
    notes.sources["samples.aizuchi"] = "the character's short lines in the card's example messages"
    notes.sources["samples.remarks"] = "the character's lines in the card's example messages"
    if len(aizuchi) < _MIN_SAMPLES:
        aizuchi = _fill(aizuchi, GENERIC[lang].aizuchi, "aizuchi", lang, notes.filled_in)
        notes.sources["samples.aizuchi"] += ", then generic nods"
    if len(remarks) < _MIN_SAMPLES:
        remarks = _fill(remarks, GENERIC[lang].remarks, "remarks", lang, notes.filled_in)
        notes.sources["samples.remarks"] += ", then generic remarks"
    samples = {"aizuchi": aizuchi, "remarks": remarks}
    greetings = _greetings(data, char, notes.left_out)
    if greetings:
        samples["greetings"] = greetings
        notes.sources["samples.greetings"] = (
            "the card's first message and other greetings; {name} is whom it greets (the card's {{user}})"
        )
    return samples


def _persona_id(given: str | None, name: str) -> str:
    if given is not None:
        try:
            return _ID.validate_python(given)
        except ValidationError:
            raise CardError(
                f"--id {given!r} is not a valid id: 1 to 64 ASCII letters, digits, '_', '.' or '-', "
                "starting with a letter or a digit"
            ) from None
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:64].rstrip("-")
    if not slug:
        raise CardError(f"cannot make an id from the name {name!r} (no ASCII letters or digits): give one with --id")
    return slug


def _token_env(persona_id: str) -> str:
    stem = re.sub(r"[^A-Z0-9]", "_", persona_id.upper())
    return f"{'PERSONA_' if stem[0].isdigit() else ''}{stem}_DISCORD_TOKEN"


def _guess_language(data: CardData) -> Language:
    text = " ".join((data.name, data.description, data.personality, data.scenario, data.first_mes, data.mes_example))
    japanese = sum(1 for char in text if _is_japanese(char))
    latin = sum(1 for char in text if char.isascii() and char.isalpha())
    return "ja" if japanese > latin else "en"


def _is_japanese(char: str) -> bool:
    code = ord(char)
    return (
        0x3040 <= code <= 0x30FF  # hiragana, katakana
        or 0x4E00 <= code <= 0x9FFF  # kanji
        or 0x3400 <= code <= 0x4DBF
        or 0xFF66 <= code <= 0xFF9F  # half-width katakana
    )


def _talkativeness(data: CardData) -> float | None:
    value = data.talkativeness
    if value is None and isinstance(data.extensions, dict):
        value = data.extensions.get("talkativeness")
    try:
        number = float(value)  # SillyTavern writes it as text, "0.5"
    except (TypeError, ValueError):
        return None
    return number if 0.0 <= number <= 1.0 else None


# {{char}} and {{user}} in their V1 and V3 spellings; the macros with no meaning outside a chat front end.
_CHAR = re.compile(r"\{\{char\}\}|<bot>|<char>", re.IGNORECASE)
_USER = re.compile(r"\{\{user\}\}|<user>", re.IGNORECASE)
_CHOICE = re.compile(r"\{\{(?:random|pick)\s*:+\s*((?:[^{}\\]|\\.)*)\}\}", re.IGNORECASE)
_COMMENT = re.compile(r"\{\{(?://|comment:|hidden_key:)[^{}]*\}\}", re.IGNORECASE)


def _macros(text: str, char: str, user: str) -> str:
    """``text`` with the card's macros resolved: ``{{char}}`` is the character, ``{{user}}`` ``user``, a random
    choice its first option (the file is fixed text), a comment nothing."""
    text = _COMMENT.sub("", text)
    text = _CHOICE.sub(lambda match: re.split(r"(?<!\\),|::", match.group(1))[0].replace("\\,", ","), text)
    return _USER.sub(lambda _: user, _CHAR.sub(lambda _: char, text))


def _collapse(text: str) -> str:
    """One paragraph: a persona's lines are chat messages, and its fields read best on one line of the file."""
    return " ".join(text.split())


def _fit(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters where a person would stop (bots.text measures in display columns)."""
    columns = 2 * limit  # where even wide characters all fit; lowered by what is over until it fits
    while len(cut := cut_to_length(text, columns)) > limit:
        columns -= len(cut) - limit
    return cut


def _cut_reported(text: str, limit: int, what: str, left: list[str]) -> str:
    cut = _fit(text, limit)
    if len(cut) < len(text):
        left.append(
            f"the end of {what}: {len(text) - len(cut):,} of its {len(text):,} characters (a field holds {limit})"
        )
    return cut


def _share(parts: list[tuple[str, str]], limit: int, separator: str, left: list[str]) -> str:
    """The parts joined within ``limit``: the shorter ones whole where they fit, the room left shared evenly."""
    room = limit - len(separator) * (len(parts) - 1)
    kept: dict[str, str] = {}
    by_length = sorted(parts, key=lambda part: len(part[1]))
    for index, (key, text) in enumerate(by_length):
        kept[key] = _cut_reported(text, room // (len(by_length) - index), key, left)
        room -= len(kept[key])
    return separator.join(kept[key] for key, _ in parts)


# A speaker's line in the example messages: "{{char}}: ...", "Name: ...". Up to three words, so that prose with a
# colon in it stays part of the turn it is in.
_SPEAKER = re.compile(r"^\s*(?P<who>[^\s:：][^:：]{0,39}?)\s*[:：]\s?(?P<text>.*)$")
_START = re.compile(r"^\s*<start>\s*$", re.IGNORECASE)


def _example_lines(mes_example: str, char_names: set[str], char: str, left: list[str]) -> tuple[list[str], list[str]]:
    """The character's own lines in the card's example messages: those short enough for a nod, and the rest."""
    turns: list[tuple[bool, list[str]]] = []  # (the character's?, its lines)
    mine = {name.casefold() for name in char_names} | {"{{char}}", "<bot>", "<char>"}
    for line in mes_example.splitlines():
        if _START.match(line):
            turns.append((False, []))  # a new conversation: nothing continues across it
            continue
        match = _SPEAKER.match(line)
        if match and len(match.group("who").split()) <= 3:
            turns.append((match.group("who").strip().casefold() in mine, [match.group("text")]))
        elif turns:
            turns[-1][1].append(line)
    others = sum(1 for is_char, lines in turns if not is_char and lines)
    if others:
        left.append(f"{others} example message(s) by others ({{{{user}}}} and the like): samples are the persona's own")
    aizuchi: list[str] = []
    remarks: list[str] = []
    naming_user = unkept = cut = 0
    for is_char, lines in turns:
        if not is_char:
            continue
        text = _collapse(_macros(" ".join(lines), char, "{user}"))
        if not text:
            continue
        if "{user}" in text:
            naming_user += 1
            continue
        if "{" in text or "}" in text:
            unkept += 1
            continue
        if len(text) > LINE_LIMIT:
            cut += 1
            text = _fit(text, LINE_LIMIT)
        target = aizuchi if display_length(text) <= _AIZUCHI_COLUMNS else remarks
        if text not in target:
            target.append(text)
    if naming_user:
        left.append(f"{naming_user} example line(s) naming {{{{user}}}}: remarks and nods name no one")
    if unkept:
        left.append(f"{unkept} example line(s) with a macro or brace a persona file cannot hold")
    if cut:
        left.append(f"the end of {cut} long example line(s) (a sample holds {LINE_LIMIT} characters)")
    return aizuchi, remarks


def _greetings(data: CardData, char: str, left: list[str]) -> list[str]:
    """First message, alternate greetings and V3's group-only ones (aizuchi's rooms are all groups), ``{{user}}``
    made the file's ``{name}``."""
    greetings: list[str] = []
    unkept = cut = 0
    for greeting in (data.first_mes, *data.alternate_greetings, *data.group_only_greetings):
        text = _collapse(_macros(greeting, char, "{name}"))
        if not text:
            continue
        if "{" in text.replace("{name}", "") or "}" in text.replace("{name}", ""):
            unkept += 1
            continue
        if len(text) > LINE_LIMIT:
            cut += 1
            text = _fit(text, LINE_LIMIT)
        if text not in greetings:
            greetings.append(text)
    if unkept:
        left.append(f"{unkept} greeting(s) with a macro or brace a persona file cannot hold")
    if cut:
        left.append(f"the end of {cut} long greeting(s) (a sample holds {LINE_LIMIT} characters)")
    return greetings


def _fill(lines: list[str], generic: tuple[str, ...], what: str, lang: Language, filled: list[str]) -> list[str]:
    extra = [line for line in generic if line not in lines][: _MIN_SAMPLES - len(lines)]
    language = {"en": "English", "ja": "Japanese"}[lang]
    filled.append(
        f"samples.{what}: {len(extra)} generic {language} line(s), as the card's examples gave {len(lines)} "
        f"and a persona needs {_MIN_SAMPLES} (replace them with the character's own)"
    )
    return [*lines, *extra]


def _unmapped(data: CardData) -> list[str]:
    """One line for each part of the card with content that the persona file has no place for."""
    left: list[str] = []
    extras = dict(data.model_extra or {})
    if data.extensions is not None:
        extras["extensions"] = data.extensions
    for key, value in extras.items():
        if key in _MAPPED or not _has_content(value):
            continue
        if key == "character_book":
            entries = value.get("entries") if isinstance(value, dict) else None
            count = (
                f" ({len(entries)} {'entry' if len(entries) == 1 else 'entries'})" if isinstance(entries, list) else ""
            )
            left.append(f"character_book: the lorebook{count}; a persona file has no lorebook")
        elif key == "tags" and isinstance(value, list):
            left.append(f"tags: {', '.join(str(tag) for tag in value)}")
        elif key == "assets" and isinstance(value, list):
            left.append(f"assets: {len(value)} image(s) or other file(s) the card points at")
        elif key == "extensions" and isinstance(value, dict):
            mapped = {"talkativeness"} if _talkativeness(data) is not None else set()
            keys = [k for k, v in value.items() if _has_content(v) and k not in mapped]
            if keys:
                left.append(f"extensions: {', '.join(keys)} (front ends' own data)")
        else:
            left.append(f"{key}: {_ABOUT.get(key, 'not a field this maps')}")
    return left


def _has_content(value: object) -> bool:
    if isinstance(value, dict):
        return any(_has_content(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_content(item) for item in value)
    if isinstance(value, str):
        return bool(value.strip())
    return bool(value)  # None, false and 0 (V3's "date unknown") hold nothing
