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
from bots.colors import persona_color
from bots.language.text import cut_to_length
from bots.llm.scripted import GENERIC

if TYPE_CHECKING:
    from bots.card_file import Card

__all__ = ("Imported", "card_to_persona", "name_aliases", "strip_stage_directions")

Language = Literal["en", "ja"]

LINE_LIMIT = 400  # bots.persona.Line: the longest text a persona field or sample holds
NAME_LIMIT = 80  # display_name and each alias
ALIAS_LIMIT = 10  # bots.persona.Persona.aliases
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
    aliases = _aliases(display_name, _collapse(data.nickname), notes)
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
    color = persona_color(pid)
    notes.filled_in.append(f"color: {color}, made from the id (cards have no colour); it reads on both room themes")
    notes.sources["color"] = (
        "not in the card: made from the id, a hue of its own whose chip reads on the room's light and dark themes"
    )

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
        color=color,
        big_five=dict.fromkeys(
            ("openness", "conscientiousness", "extraversion", "agreeableness", "neuroticism"), _NEUTRAL
        ),
        samples=samples,
    )
    return notes


def _aliases(display_name: str, nickname: str, notes: Imported) -> list[str]:
    """The card's nickname (V3), then the words of the name people would call the character by."""
    aliases: list[str] = []
    if nickname and nickname.casefold() != display_name.casefold():
        aliases.append(_cut_reported(nickname, NAME_LIMIT, "nickname", notes.left_out))
        notes.sources["aliases"] = "the card's nickname"
    taken = {name.casefold() for name in (display_name, *aliases)}
    words = [word for word in name_aliases(display_name) if word.casefold() not in taken]
    words = words[: ALIAS_LIMIT - len(aliases)]
    if words:
        notes.sources["aliases"] = ("the card's nickname, then " if aliases else "") + (
            "words of its name (not titles, nor short or everyday words)"
        )
        notes.filled_in.append(
            f"aliases: {', '.join(words)}, from the name's words (titles, short and everyday words left out)"
        )
    return [*aliases, *words]


# Where the part of a name people call the character by ends: an epithet ("Ren the Wanderer", "Lyra, Keeper of
# Stars", "Sera (Healer)", "Kai - the Bard", "Ash aka ...").
_NAME_END = re.compile(r"\s*(?:[,(\[{|/:;]|\s[-–—]\s|\b(?:the|of|from|aka|a\.k\.a\.)(?!\w))", re.IGNORECASE)
_WORD_EDGES = "\"'“”‘’.,!?"
# Titles, ranks and honorifics: "Captain Isolde Varga" is called Isolde or Varga, not Captain.
_TITLES = frozenset(
    """
    mr mrs ms mx miss mister master madam madame mademoiselle monsieur dame sir lady lord
    dr doc doctor prof professor rev reverend father mother sister brother saint st
    captain capt commander cmdr admiral general gen colonel col major lieutenant lt sergeant sgt corporal
    private officer detective det agent inspector sheriff marshal chief
    king queen prince princess duke duchess count countess baron baroness earl emperor empress
    jr sr esq
    """.split()  # noqa: SIM905 - a list of words reads best as words
)
# Words between names ("Erich von Stroheim"), and everyday English words that are also names: a name is matched in
# any message, in any case, so "Will Turner" answering to "will" would make "I will" address him.
_COMMON = frozenset(
    """
    von van der den ter de del della da di du la le el al bin ibn and
    will may june april august grace hope joy faith charity patience rose lily daisy ivy holly iris amber
    ruby pearl jade crystal ray mark bill frank jack don guy max bob sue pat dean rob art rich chase hunter page
    eve dawn sky summer autumn winter spring sunny honey angel baby buddy star storm rain river stone wolf fox bear
    hawk crow raven robin sage bishop cook baker mason young long short little small strong wise good best love
    lucky happy merry noble brave bright swift bliss dash flash blaze ash echo moon sun night day north south
    east west black white green brown gray grey red blue gold golden silver steel iron dark light new old big
    great first last one two three hill wood woods field lake marsh bush bell hall park knight grant lane bond
    cash penny
    """.split()  # noqa: SIM905 - a list of words reads best as words
)
_NOT_NAMES = _TITLES | _COMMON
_MIN_ALIAS = 3  # shorter words ("Al", "Jo") are too often part of other text


def name_aliases(name: str) -> list[str]:
    """The words of ``name`` (before any epithet) that people would call the character by: Latin-script words that
    start with a capital, three letters or more, that are not titles, particles, initials, numerals or everyday
    English words. A name in another script gets none: names there are matched anywhere in a message, with no word
    breaks to stop a short one being found inside another word."""
    head = _NAME_END.split(name, maxsplit=1)[0]
    found: list[str] = []
    for raw in head.split():
        word = raw.strip(_WORD_EDGES)
        if _callable(word) and word.casefold() not in {seen.casefold() for seen in found}:
            found.append(word)
    return [word for word in found if word.casefold() != _collapse(name).casefold()]


def _callable(word: str) -> bool:
    return (
        len(word) >= _MIN_ALIAS
        and word[0].isupper()
        and all((char.isalpha() and unicodedata.name(char, "").startswith("LATIN")) or char in "'’-" for char in word)
        and re.fullmatch(r"[IVXLCDM]+", word) is None  # "Henry VIII"
        and word.casefold() not in _NOT_NAMES
    )


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
    in_examples, in_greetings = _Directions(), _Directions()
    aizuchi, remarks = _example_lines(data.mes_example, names, char, notes.left_out, in_examples)
    cleaned = ", stage directions taken out" if in_examples else ""
    notes.sources["samples.aizuchi"] = f"the character's short lines in the card's example messages{cleaned}"
    notes.sources["samples.remarks"] = f"the character's lines in the card's example messages{cleaned}"
    if len(aizuchi) < _MIN_SAMPLES:
        aizuchi = _fill(aizuchi, GENERIC[lang].aizuchi, "aizuchi", lang, notes.filled_in)
        notes.sources["samples.aizuchi"] += ", then generic nods"
    if len(remarks) < _MIN_SAMPLES:
        remarks = _fill(remarks, GENERIC[lang].remarks, "remarks", lang, notes.filled_in)
        notes.sources["samples.remarks"] += ", then generic remarks"
    samples = {"aizuchi": aizuchi, "remarks": remarks}
    greetings = _greetings(data, char, notes.left_out, in_greetings)
    if greetings:
        samples["greetings"] = greetings
        notes.sources["samples.greetings"] = (
            "the card's first message and other greetings"
            + (", stage directions taken out" if in_greetings else "")
            + "; {name} is whom it greets (the card's {{user}})"
        )
    _Directions.report((in_examples, in_greetings), notes.left_out)
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
    """``text`` cut to ``limit`` characters where a person would stop (bots.language.text measures in display
    columns)."""
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


def _example_lines(
    mes_example: str, char_names: set[str], char: str, left: list[str], directions: _Directions
) -> tuple[list[str], list[str]]:
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
        text = directions.clean(_collapse(_macros(" ".join(lines), char, "{user}")))
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


def _greetings(data: CardData, char: str, left: list[str], directions: _Directions) -> list[str]:
    """First message, alternate greetings and V3's group-only ones (aizuchi's rooms are all groups), ``{{user}}``
    made the file's ``{name}``."""
    greetings: list[str] = []
    unkept = cut = 0
    for greeting in (data.first_mes, *data.alternate_greetings, *data.group_only_greetings):
        text = directions.clean(_collapse(_macros(greeting, char, "{name}")))
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


@dataclass(slots=True)
class _Directions:
    """Stage directions taken out of one kind of sample line, to be reported."""

    cleaned: int = 0  # lines a direction was taken out of
    dropped: int = 0  # lines that held nothing else
    example: str = ""  # the first one taken out

    def __bool__(self) -> bool:
        return bool(self.cleaned or self.dropped)

    def clean(self, text: str) -> str:
        kept, removed = _without_directions(text)
        if removed:
            self.example = self.example or removed[0]
            if kept:
                self.cleaned += 1
            else:
                self.dropped += 1
        return kept

    @staticmethod
    def report(kinds: tuple[_Directions, ...], left: list[str]) -> None:
        cleaned, dropped = sum(kind.cleaned for kind in kinds), sum(kind.dropped for kind in kinds)
        if not cleaned and not dropped:
            return
        example = next(kind.example for kind in kinds if kind)
        if len(example) > 40:  # the start of it, to the last whole word
            example = f"{example[:38].rsplit(' ', 1)[0].rstrip(',;:')}…{example[-1]}"
        nothing_else = f" ({dropped} of them held nothing else and are dropped)" if dropped else ""
        left.append(
            f"stage directions such as {example} in {cleaned + dropped} sample line(s): a persona's lines are what"
            f" it says{nothing_else}"
        )


# A stage direction: *in asterisks* (the cards' convention), or (in parentheses) where it cannot be an aside.
_ASTERISKS = re.compile(r"(?<!\*)\*(?![\s*])([^*\n]+?)(?<![\s*])\*(?!\*)")
_PARENTHESES = re.compile(r"\(([^()\n]{1,80})\)")
_OOC = re.compile(r"ooc\b", re.IGNORECASE)  # (OOC: a note out of character)
_PARENTHESIS_WORDS = 6  # "(laughs)", "(sighs softly)"; longer, it reads as prose
_SENTENCE_END = ".!?…。！？"
_QUOTE_OPEN = '"“「『'
_QUOTE_CLOSE = '"”」』'
_QUOTED = re.compile(r'"([^"“”]*)"|“([^"“”]*)”')
_SPEECH = re.compile(rf"(?:\s*(?:{_QUOTED.pattern}))+\s*")


def strip_stage_directions(text: str) -> str:
    """``text`` without its stage directions; empty if it held nothing else. See :func:`_is_direction`."""
    return _without_directions(text)[0]


def _without_directions(text: str) -> tuple[str, list[str]]:
    """``text`` without its stage directions, and the directions taken out (in order)."""
    removed: list[str] = []
    while True:  # one at a time: what is left decides whether the next one stands at a sentence's edge
        found = next(
            (m for pattern in (_ASTERISKS, _PARENTHESES) for m in pattern.finditer(text) if _is_direction(m)), None
        )
        if found is None:
            break
        removed.append(found.group(0))
        left, right = text[: found.start()], text[found.end() :]
        wide = any(unicodedata.east_asian_width(c) in "WF" for c in (left[-1:], right[:1]) if c)
        text = left + ("" if wide else " ") + right  # Japanese sentences meet with no space
    if not removed:
        return text, removed
    text = re.sub(r"\s+([,.!?;:…、。！？])", r"\1", _collapse(text)).lstrip(",;:—– ").rstrip(",;—– ")
    if _SPEECH.fullmatch(text):  # only speech is left ("Come in," "Sit."): it needs no quotes
        said = [(match.group(1) or match.group(2) or "").strip() for match in _QUOTED.finditer(text)]
        text = " ".join(
            f"{part[:-1]}." if part.endswith(",") and following[:1].isupper() else part  # "Come in. Sit."
            for part, following in zip(said, [*said[1:], ""], strict=True)
        )
    return (text if any(char.isalnum() for char in text) else ""), removed


def _is_direction(match: re.Match[str]) -> bool:
    """Whether a span in asterisks or parentheses is a stage direction, not emphasis or an aside. In asterisks: when
    it starts the line, ends it, comes before a quotation, is a sentence of its own (ends with . ! ?), or stands
    between two sentences; inside a sentence (``I *really* mean it``) it is emphasis. In parentheses: an OOC note,
    or a short one that starts the line or stands between sentences, with no lower-case word going on after it;
    at the end of a sentence it reads as an aside (``I'll be there (probably)``) and stays."""
    before, after = match.string[: match.start()].rstrip(), match.string[match.end() :].lstrip()
    inner = match.group(1).strip()
    between = (not before or before[-1] in _SENTENCE_END + _QUOTE_CLOSE) and not after[:1].islower()
    if match.group(0).startswith("("):
        return bool(_OOC.match(inner)) or (len(inner.split()) <= _PARENTHESIS_WORDS and between)
    return not before or not after or after[0] in _QUOTE_OPEN or inner[-1] in _SENTENCE_END or between


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
