"""A first conversation with the offline stand-ins, checked line by line, in English and in Japanese.

A person greets the room, asks one persona and then everyone questions of each kind (what, which, why, yes or no,
arithmetic), tells news, thanks and says good night; the three shipped personas of the language answer as the
runtime asks them: the one asked first (it has the floor), then the others, each on the tier the runtime would
claim. Every request is built as the runtime builds it (the prompt and the scene, :func:`bots.scene.scene_of`),
who is addressed is found by the arbiter's own rule, and every reply is checked for its kind: which of the
persona's (or the generic) sets of lines it comes from.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from arbiter.contract import AuthorKind, MessageView, Tier
from arbiter.core.addressing import addressed_personas
from bots.llm import DecisionRequest, ScriptedProvider
from bots.persona import Persona, load_persona
from bots.prompt import persona_prompt, rules_prompt, transcript_turn
from bots.scene import scene_of
from tests.support.lines import sets_of
from tests.support.status import DEFAULT_LENGTHS, status_for

PERSONAS = Path(__file__).resolve().parents[3] / "personas"
# What fits a person's news, or another persona's line: a nod, a remark, a question, a line on a word of it; or,
# where that line asks something, an answer. Never a greeting, a thanks or a goodbye to a persona.
REACTION = frozenset({"aizuchi", "remarks", "echoes", "questions", "answers", "unsure"})
NEWS = frozenset({"aizuchi", "remarks", "echoes", "questions"})
WINDOW = 24  # the runtime's window of messages


@dataclass(frozen=True)
class Say:
    """The person's line; ``asked``: the persona it names, answered first; ``fits``: the sets a reply to it may
    come from (for the one asked, or for everyone when nobody is); ``others``: for the rest when one is asked."""

    text: str
    fits: frozenset[str]
    asked: str | None = None
    others: frozenset[str] = field(default=REACTION)


ENGLISH = (
    Say("Hi everyone!", frozenset({"greetings"})),
    Say("Juno, what's your favourite book?", frozenset({"unsure"}), asked="juno"),
    Say("What's everyone doing this weekend?", frozenset({"unsure"})),
    Say("Theo, is it safe to deploy on a Friday?", frozenset({"answers"}), asked="theo"),
    Say("Does anyone here like jazz?", frozenset({"answers"})),
    Say("Rin, what's 17 times 3?", frozenset({"numbers"}), asked="rin"),
    Say("I baked sourdough yesterday.", NEWS),
    Say("I tried 抹茶 lattes at the new cafe.", NEWS),
    Say("Theo, why are you so wary of hype?", frozenset({"unsure"}), asked="theo"),
    Say("Which is better, tea or coffee?", frozenset({"unsure"})),
    Say("Thanks, Rin!", frozenset({"thanks"}), asked="rin"),
    Say("Thank you all, that was fun.", frozenset({"thanks"})),
    Say("Good night everyone!", frozenset({"farewells"})),
)
JAPANESE = (
    Say("こんにちは、みなさん!", frozenset({"greetings"})),
    Say("みおさん、おすすめの本は何ですか?", frozenset({"unsure"}), asked="mio"),
    Say("週末はみんな何するの?", frozenset({"unsure"})),
    Say("そらさん、金曜日にデプロイしても大丈夫?", frozenset({"answers"}), asked="sora"),
    Say("ジャズは好き?", frozenset({"answers"})),
    Say("はなちゃん、17×3は?", frozenset({"numbers"}), asked="hana"),
    Say("昨日サワードウを焼いたよ。", NEWS),
    Say("昨日、Catch Me If You Can を観たよ。", NEWS),
    Say("そらさん、どうして分散システムが好きなの?", frozenset({"unsure"}), asked="sora"),
    Say("コーヒーと紅茶、どっちが好き?", frozenset({"unsure"})),
    Say("ありがとう、はなちゃん!", frozenset({"thanks"}), asked="hana"),
    Say("みなさん、ありがとう。楽しかった!", frozenset({"thanks"})),
    Say("おやすみなさい!", frozenset({"farewells"})),
)


def shipped(persona_id: str) -> Persona:
    return load_persona(PERSONAS / f"{persona_id}.toml")


class Room:
    """One channel: a person, Ann, and three personas asked as the runtime asks them."""

    def __init__(self, persona_ids: tuple[str, ...], seed: int) -> None:
        self.personas = {persona_id: shipped(persona_id) for persona_id in persona_ids}
        self.providers = {
            persona_id: ScriptedProvider.for_persona(persona, seed=seed + index)
            for index, (persona_id, persona) in enumerate(self.personas.items())
        }
        self.window: list[MessageView] = []
        self.rng = random.Random(seed)
        self.transcript: list[str] = []

    def _add(self, author: str, kind: AuthorKind, name: str, text: str, tier: Tier | None = None) -> None:
        names = {persona_id: persona.names for persona_id, persona in self.personas.items()}
        addressed = list(addressed_personas(text, names)) if kind is AuthorKind.HUMAN else []
        seq = (self.window[-1].seq if self.window else 0) + 1
        message = MessageView(
            seq=seq,
            author_id=author,
            author_kind=kind,
            author_name=name,
            text=text,
            at=seq,
            tier=tier,
            addressed=addressed,
        )
        self.window = [*self.window, message][-WINDOW:]
        self.transcript.append(f"{name}: {text}")

    def person_says(self, text: str) -> list[str]:
        self._add("ann", AuthorKind.HUMAN, "Ann", text)
        return self.window[-1].addressed

    async def turn(self, persona_id: str, tier: Tier, *, asked: bool = False, allow_pass: bool = True) -> str | None:
        """The persona's move on a claim of ``tier``: its line (recorded), or None for a pass."""
        persona = self.personas[persona_id]
        status = status_for(persona_id, priority=[persona_id] if asked else [])
        offered = (
            (Tier.AIZUCHI,)
            if tier is Tier.AIZUCHI
            else tuple(t for t in Tier if Tier.AIZUCHI.rank < t.rank <= tier.rank)
        )
        lengths = {str(t): DEFAULT_LENGTHS[t] for t in offered}
        moves = ("pass", *lengths) if allow_pass else tuple(lengths)
        request = DecisionRequest(
            system=persona_prompt(persona) + "\n\n" + rules_prompt(persona, lengths, ""),
            turns=(transcript_turn(persona, self.window, status, moves=moves, max_lengths=lengths),),
            actions=tuple(lengths),  # type: ignore[arg-type]
            max_lengths=lengths,
            allow_pass=allow_pass,
            scene=scene_of(persona, self.window, status),
        )
        decision = (await self.providers[persona_id].decide(request)).decision
        if decision.action == "pass":
            return None
        self._add(persona_id, AuthorKind.PERSONA, persona.display_name, decision.text, Tier(decision.action))
        return decision.text


def check(reply: str, persona: Persona, fits: frozenset[str], room: Room, answering: str) -> None:
    found = sets_of(reply, persona)
    context = "\n".join(room.transcript[-8:])
    assert found & fits, f"{persona.id}'s {reply!r} (from {sorted(found)}) does not fit {answering!r}:\n{context}"
    others = [p.display_name for p in room.personas.values() if p.id != persona.id]
    if found & {"greetings", "farewells", "thanks"}:
        assert not any(name in reply for name in others), f"{persona.id} greets a persona: {reply!r}\n{context}"
    # A name is a name in any language; any other word is in the persona's.
    words = reply.replace("Ann", "")
    foreign = r"[A-Za-z]" if persona.language == "ja" else r"[\u3040-\u30ff\u4e00-\u9fff]"
    assert not re.search(foreign, words), f"{persona.id} carries a word over into its language: {reply!r}"


async def converse(persona_ids: tuple[str, ...], script: tuple[Say, ...], seed: int) -> Room:
    room = Room(persona_ids, seed)
    for step in script:
        addressed = room.person_says(step.text)
        assert addressed == ([step.asked] if step.asked else []), (step.text, addressed)
        order = list(persona_ids)
        room.rng.shuffle(order)
        if step.asked is not None:
            order.remove(step.asked)
            # Asked, it answers on a remark; a pass is followed by a second try that must say something.
            reply = await room.turn(step.asked, Tier.REMARK, asked=True)
            reply = reply or await room.turn(step.asked, Tier.REMARK, asked=True, allow_pass=False)
            assert reply is not None
            check(reply, room.personas[step.asked], step.fits, room, step.text)
        for persona_id in order:
            tier = room.rng.choice((Tier.AIZUCHI, Tier.REMARK, Tier.REMARK, Tier.LONG))
            reply = await room.turn(persona_id, tier)
            if reply is not None:
                check(reply, room.personas[persona_id], step.others if step.asked else step.fits, room, step.text)
    return room


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(
    ("persona_ids", "script"),
    [(("rin", "theo", "juno"), ENGLISH), (("hana", "mio", "sora"), JAPANESE)],
    ids=["en", "ja"],
)
async def test_every_reply_in_a_first_conversation_fits_what_it_answers(
    persona_ids: tuple[str, ...], script: tuple[Say, ...], seed: int
) -> None:
    room = await converse(persona_ids, script, seed)

    assert len(room.transcript) >= 30, room.transcript
    # Everyone answered the questions put to everyone: a question to the room is never left hanging.
    for step in script:
        if step.asked is None and step.fits & {"unsure", "answers"}:
            start = room.transcript.index(f"Ann: {step.text}")
            replies = room.transcript[start + 1 : start + 1 + len(persona_ids)]
            assert replies and not any(line.startswith("Ann:") for line in replies), (step.text, replies)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(
    ("persona_ids", "script"), [(("rin", "theo", "juno"), ENGLISH), (("hana", "mio", "sora"), JAPANESE)]
)
async def test_once_the_person_has_said_good_night_the_goodbyes_stop(
    persona_ids: tuple[str, ...], script: tuple[Say, ...], seed: int
) -> None:
    room = await converse(persona_ids, script, seed)
    night = room.transcript.index(f"Ann: {script[-1].text}")
    answered = {line.partition(": ")[0] for line in room.transcript[night + 1 :]}

    # However often the runtime offers them a turn from now on, each says one goodbye at most (if it has not yet),
    # and then nothing: no goodbyes to each other.
    for _ in range(5):
        for persona_id, persona in room.personas.items():
            for tier in Tier:
                reply = await room.turn(persona_id, tier)
                if reply is None:
                    continue
                assert persona.display_name not in answered, room.transcript[night:]
                check(reply, persona, frozenset({"farewells"}), room, script[-1].text)
                answered.add(persona.display_name)
    assert len(room.transcript) - night - 1 <= len(persona_ids)
