"""Choosing what the offline stand-in says: a move (pass, nod, remark, long remark) and a line of a set that fits
the cue (:mod:`bots.llm.scripted.cue`), fresh by the runtime's rules.

Which set fits: a greeting, thanks or a goodbye gets its own set; a question a yes or a no answers gets an answer,
one it cannot know offline (what, which, why, how) an honest line that it cannot, never a yes or a no; simple
arithmetic gets the number; a statement gets a nod, a remark, a question or a line built on one of its words. A
message between others gets a nod at most, and nothing left to answer gets a pass. The persona's own lines come
first, then the generic ones in its language.

It keeps the runtime's no-repeat rule (:mod:`bots.language.text`): a remark is never one of its own last
``recent_window`` lines (nor the same template), nor a line present in the conversation it was shown; a nod is not
a sentence and may come again, only not as its previous nod nor as the words of the message it answers.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, cast

from arbiter.contract import display_length
from bots.language.kinds import Kind
from bots.language.text import line_key, nod_repeats, repeats
from bots.llm.base import ACTIONS, Action, Decision

if TYPE_CHECKING:
    import random
    from collections.abc import Iterable, Mapping

    from bots.llm.scripted.cue import Cue
    from bots.llm.scripted.lines import Lines

__all__ = ("Line", "Said", "Voice", "join", "wide")

# How often each move comes up before the mood adjustments below: mostly nods and remarks. A pass is rare:
# the runtime only asks after it has decided to take a turn and claimed the tier, as a model would mostly
# speak when asked at that point.
# How often a plain nod is one of its own emojis, where it has them: often enough to be seen, not every time.
_EMOJI_NOD_SHARE = 0.3
_WEIGHTS: dict[str, float] = {"pass": 0.04, "aizuchi": 0.42, "remark": 0.34, "long": 0.12}
# After each own move, how the next one's weights shift, so the persona does not do the same thing twice running.
_AFTER: dict[str, dict[str, float]] = {
    "pass": {"pass": 0.5},
    "aizuchi": {"aizuchi": 0.8},
    "remark": {"remark": 0.7},
    "long": {"long": 0.25, "remark": 0.7},
}
_PLACEHOLDER = re.compile(r"\{(name|word|n)\}")
_KIND_SETS = {Kind.GREETING: "greetings", Kind.FAREWELL: "farewells", Kind.THANKS: "thanks"}


class Line(NamedTuple):
    text: str
    template: str | None = None  # the line it was built from, when it had a placeholder


@dataclass(frozen=True, slots=True)
class Said:
    """What the conversation shown already holds: the lines' keys, the lines (to spot a template), and its own
    latest nod there (the one its next nod must not be again)."""

    keys: frozenset[str]
    lines: tuple[str, ...]
    last_nod: str | None = None

    @classmethod
    def of(cls, lines: Iterable[str], last_nod: str | None = None) -> Said:
        texts = tuple(lines)
        return cls(frozenset(line_key(text) for text in texts) - {""}, texts, last_nod)


class Voice:
    """A persona's lines and its memory of what it said: picks a move and a line for a cue.

    ``lines`` are the persona's own sets, ``generic`` the fallback sets in its language; ``rng`` makes it
    deterministic for a seed; ``recent_window`` is how many of its own latest lines it will not say again.
    """

    def __init__(self, lines: Lines, generic: Lines, rng: random.Random, recent_window: int) -> None:
        self.lines = lines
        self.generic = generic
        self._rng = rng
        # One entry per line said: its keys (and its template's), so a long remark counts as one line; and the
        # lines themselves, to keep clear of near repeats too.
        self._recent: deque[frozenset[str]] = deque(maxlen=max(1, recent_window))
        self._recent_texts: deque[str] = deque(maxlen=max(1, recent_window))
        self.last_action: str | None = None
        self._parsed_sets: dict[tuple[str, ...], tuple[tuple[str, tuple[str, ...], Line | None], ...]] = {}

    def choose(self, actions: Iterable[str], max_lengths: Mapping[str, int], said: Said, cue: Cue) -> Decision:
        """A move among ``actions`` and its line: the largest move most of the time (the caller claimed it),
        another when nothing fresh fits, a pass when nothing fits at all and a pass is offered."""
        weights = {action: _WEIGHTS[action] for action in actions}
        largest = max((a for a in weights if a != "pass"), key=ACTIONS.index, default=None)
        must_speak = "pass" not in weights
        if cue.done and not must_speak:
            return self.passes()
        if largest is not None:
            weights[largest] += 3.0
        for action, factor in _AFTER.get(self.last_action or "", {}).items():
            if action in weights:
                weights[action] *= factor
        used = frozenset().union(*self._recent)
        while weights:
            action = self._rng.choices(list(weights), weights=list(weights.values()))[0]
            if action == "pass":
                break
            parts = self._pick(action, max_lengths.get(action), said, used, cue)
            if parts is not None:
                return self.said(action, parts)
            del weights[action]  # nothing fresh fits this move: try the others before falling silent
        if must_speak and largest is not None:
            # Better a line said before than no answer at all: the freshest that fits, else the shortest nod.
            parts = self._pick(largest, max_lengths.get(largest), Said.of(()), frozenset(), cue, relaxed=True)
            return self.said(largest, parts or (Line(min(self.lines.aizuchi, key=display_length)),))
        return self.passes()

    def passes(self) -> Decision:
        self.last_action = "pass"
        return Decision("pass")

    def said(self, action: str, parts: tuple[Line, ...]) -> Decision:
        """Say ``parts`` as ``action``: remembered, so that it is not said again soon."""
        text = join(tuple(part.text for part in parts))
        self._recent.append(frozenset(key for part in parts for key in _keys(part)))
        self._recent_texts.append(text)
        self.last_action = action
        return Decision(cast("Action", action), text)

    # --- picking a line -------------------------------------------------------------------------------

    def _pick(
        self, action: str, limit: int | None, said: Said, used: frozenset[str], cue: Cue, *, relaxed: bool = False
    ) -> tuple[Line, ...] | None:
        if action == "aizuchi":
            return self._pick_nod(limit, cue, said, relaxed=relaxed)

        def fresh(line: Line) -> bool:
            return (
                not any(key in used or key in said.keys for key in _keys(line))
                and (line.template is None or not _template_in(line.template, said.lines))
                and (limit is None or display_length(line.text) <= limit)
            )

        def first_fresh(pools: list[list[Line]]) -> list[Line]:
            for pool in pools:
                usable = [line for line in dict.fromkeys(pool) if fresh(line)]
                if usable:
                    return usable
            return []

        earlier = [] if relaxed else [*self._recent_texts, *said.lines]

        def choose(candidates: list[tuple[Line, ...]]) -> tuple[Line, ...] | None:
            # At random; but not what says nearly the same as a line said lately (as the runtime would judge).
            while candidates:
                parts = self._rng.choice(candidates)
                if not repeats(join(tuple(part.text for part in parts)), earlier):
                    return parts
                candidates = [other for other in candidates if other != parts]
            return None

        firsts = first_fresh(self._remark_pools(cue))
        if action == "long" and firsts:
            # A long remark is a line and a follow-up run together; the line alone will do when no pair fits.
            chosen = choose(_pairs(firsts, first_fresh(self._follow_pools(cue)), limit))
            if chosen is not None:
                return chosen
        return choose([(line,) for line in firsts])

    def _pick_nod(self, limit: int | None, cue: Cue, said: Said, *, relaxed: bool) -> tuple[Line, ...] | None:
        """A nod from the first pool with one that fits: at random among all of them, any said before included,
        but not one that :func:`bots.language.text.nod_repeats` (its previous nod, or an echo of the message it
        answers)."""

        def usable(line: Line) -> bool:
            return (limit is None or display_length(line.text) <= limit) and (
                relaxed or not nod_repeats(line.text, last_nod=said.last_nod, answering=cue.text or None)
            )

        # A short answer is a line, not a nod: not one just said by another.
        answers = bool(self._nod_answers(cue))
        # Its own emojis are nods, never answers; a draw is made only when it has some, so a persona without them
        # says what it always said.
        emoji = [Line(nod) for nod in cue.emoji_nods if usable(Line(nod))]
        if emoji and not answers and self._rng.random() < _EMOJI_NOD_SHARE:
            return (self._rng.choice(emoji),)
        for pool in self._nod_pools(cue):
            lines = [
                line for line in dict.fromkeys(pool) if usable(line) and not (answers and said.keys & set(_keys(line)))
            ]
            if lines:
                return (self._rng.choice(lines),)
        return None

    def is_nod(self, text: str) -> bool:
        """Whether ``text`` is one of its nods (for a conversation that does not say which lines were nods)."""
        key = line_key(text)
        return any(line_key(line) == key for line in (*self.lines.aizuchi, *self.generic.aizuchi))

    # --- where each move's lines come from, best first: the first pool with a fresh line that fits is used ----

    def _answer_sets(self, cue: Cue) -> tuple[str, ...]:
        """The sets that answer ``cue`` when it wants more than a nod or a remark; () when it does not."""
        if cue.aside or cue.done:
            return ()
        if cue.result is not None:
            return ("numbers",)
        if cue.image is not None:
            return (cue.image,)  # a picture shown is noticed before what its words say
        if cue.kind in _KIND_SETS:
            return (_KIND_SETS[cue.kind],)
        if cue.kind is Kind.QUESTION:
            return ("unsure",) if cue.open else ("answers",)
        return ()

    def _pools(self, names: Iterable[str], cue: Cue) -> list[list[Line]]:
        return [self._filled(getattr(lines, name), cue) for name in names for lines in (self.lines, self.generic)]

    def _nod_answers(self, cue: Cue) -> tuple[str, ...]:
        """The sets a short answer in a nod's place comes from: none for a message put to another persona."""
        return () if cue.for_another else self._answer_sets(cue)

    def _nod_pools(self, cue: Cue) -> list[list[Line]]:
        answering = self._nod_answers(cue)
        if answering:
            return self._pools(answering, cue)  # a short answer fits a nod's length; a mere nod does not answer
        return [self._filled(self.lines.aizuchi, cue), self._filled(self.generic.aizuchi, cue)]

    def _remark_pools(self, cue: Cue) -> list[list[Line]]:
        if cue.aside or cue.done:
            return []
        answering = self._answer_sets(cue)
        if answering:
            return self._pools(answering, cue)
        own, generic = self.lines, self.generic
        return [
            self._filled(own.remarks + own.echoes + own.questions, cue),
            self._filled(generic.echoes + generic.questions, cue),
            self._filled(generic.remarks, cue),
        ]

    def _follow_pools(self, cue: Cue) -> list[list[Line]]:
        """What a long remark adds after its first line: to a greeting a question, to a remark another remark."""
        own, generic = self.lines, self.generic
        if cue.kind is Kind.GREETING and not cue.aside:
            return [self._filled(own.questions, cue), self._filled(generic.questions, cue)]
        if self._answer_sets(cue):
            return []  # an answer, a goodbye or a you're-welcome needs nothing after it
        return [self._filled(own.remarks, cue), self._filled(own.questions, cue), self._filled(generic.remarks, cue)]

    def _parsed(self, lines: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...], Line | None], ...]:
        """Each line with the placeholders it has, and as a ``Line`` already when it has none: the same few sets are
        filled at every decision, so each is read once (kept by the set's lines: its own and the generic ones)."""
        parsed = self._parsed_sets.get(lines)
        if parsed is None:
            parsed = self._parsed_sets[lines] = tuple(_parse(line) for line in lines)
        return parsed

    def _filled(self, lines: tuple[str, ...], cue: Cue) -> list[Line]:
        """The lines with their placeholders filled from the cue; those whose placeholder is unknown left out."""
        values = {"name": cue.speaker, "word": cue.word, "n": cue.result}
        filled: list[Line] = []
        for line, names, plain in self._parsed(lines):
            if plain is not None:
                filled.append(plain)
                continue
            if any(values[name] is None for name in names):
                continue
            text = _PLACEHOLDER.sub(lambda match: str(values[match.group(1)]), line)
            if line.startswith("{word}") and text[:1].isascii():
                text = text[:1].upper() + text[1:]
            filled.append(Line(text, line))
        return filled


def _parse(line: str) -> tuple[str, tuple[str, ...], Line | None]:
    names = tuple(_PLACEHOLDER.findall(line))
    return line, names, None if names else Line(line)


def wide(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


def join(parts: tuple[str, ...]) -> str:
    """Sentences run together: Latin text wants a space between them; Japanese and Chinese do not ("やあ!わかる")."""
    text = parts[0]
    for part in parts[1:]:
        text += ("" if wide(text[-1:] or " ") or wide(part[:1] or " ") else " ") + part
    return text


class _Measured(NamedTuple):
    """What pairing a line needs of it, worked out once per line rather than once per pair."""

    line: Line
    key: str
    length: int  # display columns
    wide_ends: tuple[bool, bool]  # its first and its last character are wide (no space between it and a neighbour)
    plain_ends: tuple[bool, bool]  # its first and its last character are plain (see _plain)


def _measured(line: Line) -> _Measured:
    text = line.text
    first, last = text[:1] or " ", text[-1:] or " "
    return _Measured(
        line, line_key(text), display_length(text), (wide(first), wide(last)), (_plain(first), _plain(last))
    )


def _plain(char: str) -> bool:
    """A letter, digit, punctuation, symbol or space: a character whose columns do not depend on its neighbours
    (not a joiner, a combining mark, a variation selector or a skin tone, which join the one before)."""
    return unicodedata.category(char)[0] in "LNPSZ" and char != _EMOJI_PRESENTATION and ord(char) not in _SKIN_TONES


_EMOJI_PRESENTATION = "\ufe0f"
_SKIN_TONES = range(0x1F3FB, 0x1F400)


def _pairs(firsts: list[Line], follows: list[Line], limit: int | None) -> list[tuple[Line, ...]]:
    """Every line of ``firsts`` with every line of ``follows`` that may follow it within ``limit``, in order: not
    the same words again, not the same template twice."""
    heads = [_measured(line) for line in firsts]
    tails = [_measured(line) for line in follows]
    return [
        (a.line, b.line)
        for a in heads
        for b in tails
        if a.key != b.key
        and (a.line.template is None or a.line.template != b.line.template)
        and (limit is None or _joined_length(a, b) <= limit)
    ]


def _joined_length(a: _Measured, b: _Measured) -> int:
    """``display_length(join((a, b)))``: the two lengths and the space between, where the characters that meet are
    plain (a plain character's columns do not depend on the one before it); measured whole otherwise."""
    if a.plain_ends[1] and b.plain_ends[0]:
        return a.length + b.length + (0 if a.wide_ends[1] or b.wide_ends[0] else 1)
    return display_length(join((a.line.text, b.line.text)))


def _keys(line: Line) -> tuple[str, ...]:
    """What saying ``line`` uses up: the line, and the template it was built from (a key no text can have)."""
    key = line_key(line.text)
    return (key,) if line.template is None else (key, f"template:{line.template}")


def _template_in(template: str, lines: Iterable[str]) -> bool:
    """Whether one of ``lines`` was built from ``template`` (by anyone): the same words around another word."""
    pattern = _template_pattern(template)
    return any(pattern.fullmatch(line) for line in lines)


@functools.lru_cache(maxsize=1024)
def _template_pattern(template: str) -> re.Pattern[str]:
    """The lines ``template`` builds: compiled once per template, as the same few templates are checked at every
    decision (``re``'s own cache is small and slower to ask)."""
    return re.compile(
        _PLACEHOLDER.sub(".+?", re.escape(template).replace(r"\{", "{").replace(r"\}", "}")), re.IGNORECASE
    )
