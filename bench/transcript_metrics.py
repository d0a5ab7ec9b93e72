"""How distinct the personas sound in a transcript, measured offline: speaker distinctness and persona accuracy.

Both follow the seed paper's measures, on a text representation that needs no model: TF-IDF over character
n-grams (2 to 4 characters, within words, like scikit-learn's ``char_wb`` analyzer), which reads English and
Japanese alike without a tokenizer. The vocabulary and its IDF are fitted on the transcript's lines plus the
personas' profiles, so a measure depends on nothing but its inputs.

- *Speaker distinctness*: for each persona with at least two lines, the mean cosine similarity of its lines to
  each other minus their mean similarity to the other personas' lines; the transcript's is the mean over those
  speakers. Above 0, a persona sounds more like itself than like the others; 0, they are indistinguishable.
  (The paper takes the two means over all pairs at once, with BAAI/bge-m3 embeddings; per speaker, a
  talkative persona does not outweigh a quiet one.)
- *Persona accuracy*: the share of persona lines whose nearest profile (by cosine) is the speaker's own. The
  paper asks an LLM to name the speaker; the nearest profile is its offline stand-in.

Lines by a speaker with no profile (the person) count toward the vocabulary only. Pure and deterministic:
ties between profiles go to the lowest persona id.
"""

from __future__ import annotations

import math
import re
import statistics
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from bots.persona import Persona

__all__ = ("SpeakerScore", "TranscriptScores", "measure", "ngrams", "profile_text")

SIZES = (2, 3, 4)  # character n-gram lengths
_PLACEHOLDER = re.compile(r"\{(?:name|word)\}")

Vector = dict[str, float]


def profile_text(persona: Persona) -> str:
    """What a persona is said to be and sound like: personality, background, speaking style and every sample
    line (placeholders dropped, as they are never said)."""
    samples = [line for field in type(persona.samples).model_fields for line in getattr(persona.samples, field)]
    parts = [persona.personality, persona.background, persona.speaking_style, *samples]
    return "\n".join(_PLACEHOLDER.sub("", part) for part in parts)


def ngrams(text: str) -> Counter[str]:
    """The text's character n-grams, counted; each word padded with a space at both ends, so word edges count."""
    counts: Counter[str] = Counter()
    for word in unicodedata.normalize("NFKC", text).casefold().split():
        padded = f" {word} "
        for size in SIZES:
            counts.update(padded[i : i + size] for i in range(len(padded) - size + 1))
    return counts


def _idf(documents: Sequence[Counter[str]]) -> dict[str, float]:
    """Smoothed inverse document frequency, as scikit-learn computes it: ln((1 + n) / (1 + df)) + 1."""
    frequency = Counter(term for counts in documents for term in counts)
    return {term: math.log((1 + len(documents)) / (1 + df)) + 1 for term, df in frequency.items()}


def _vectorise(counts: Counter[str], idf: Mapping[str, float]) -> Vector:
    """TF-IDF weights scaled to unit length (the empty vector for a text with no n-grams)."""
    weights = {term: count * idf.get(term, 0.0) for term, count in counts.items()}
    norm = math.sqrt(sum(w * w for w in weights.values()))
    return {term: w / norm for term, w in weights.items()} if norm else {}


def _cosine(a: Vector, b: Vector) -> float:
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    return sum(w * large.get(term, 0.0) for term, w in small.items())


def _nearest(vector: Vector, profiles: Mapping[str, Vector]) -> str:
    """The id of the profile most similar to ``vector``; of equals, the lowest id."""
    return max(sorted(profiles), key=lambda p: _cosine(vector, profiles[p]))


@dataclass(frozen=True)
class SpeakerScore:
    speaker: str
    lines: int
    correct: int  # lines whose nearest profile is the speaker's own
    distinctness: float | None  # None with fewer than two lines, or no other persona's lines to compare with


@dataclass(frozen=True)
class TranscriptScores:
    speakers: tuple[SpeakerScore, ...]  # the personas that spoke, by id

    @property
    def lines(self) -> int:
        return sum(s.lines for s in self.speakers)

    @property
    def correct(self) -> int:
        return sum(s.correct for s in self.speakers)

    @property
    def accuracy(self) -> float | None:
        """Share of persona lines nearest their own speaker's profile; None with no persona line."""
        return self.correct / self.lines if self.lines else None

    @property
    def distinctness(self) -> float | None:
        """Mean over the speakers that have one; None when none has (fewer than two persona speakers)."""
        scores = [s.distinctness for s in self.speakers if s.distinctness is not None]
        return statistics.fmean(scores) if scores else None


def measure(transcript: Sequence[tuple[str, str]], profiles: Mapping[str, str]) -> TranscriptScores:
    """Speaker distinctness and persona accuracy of ``transcript`` ((speaker id, text) lines), against
    ``profiles`` (persona id to profile text). Speakers with no profile are not scored."""
    line_counts = [ngrams(text) for _, text in transcript]
    profile_ids = list(profiles)
    profile_counts = [ngrams(profiles[p]) for p in profile_ids]
    idf = _idf([*line_counts, *profile_counts])
    profile_vectors = {p: _vectorise(c, idf) for p, c in zip(profile_ids, profile_counts, strict=True)}
    spoken = [
        (speaker, _vectorise(counts, idf))
        for (speaker, _), counts in zip(transcript, line_counts, strict=True)
        if speaker in profiles
    ]

    similarity = [[0.0] * len(spoken) for _ in spoken]
    for i, (_, a) in enumerate(spoken):
        for j in range(i + 1, len(spoken)):
            similarity[i][j] = similarity[j][i] = _cosine(a, spoken[j][1])

    scores = []
    for speaker in sorted({speaker for speaker, _ in spoken}):
        own = [i for i, (s, _) in enumerate(spoken) if s == speaker]
        others = [j for j, (s, _) in enumerate(spoken) if s != speaker]
        correct = sum(1 for i in own if _nearest(spoken[i][1], profile_vectors) == speaker)
        distinctness = None
        if len(own) >= 2 and others:
            within = statistics.fmean(similarity[i][j] for i in own for j in own if i != j)
            between = statistics.fmean(similarity[i][j] for i in own for j in others)
            distinctness = within - between
        scores.append(SpeakerScore(speaker, len(own), correct, distinctness))
    return TranscriptScores(tuple(scores))
