"""Message kinds: greeting, farewell, thanks, question or statement, in English and Japanese; and whether a
question asks for an explanation."""

from __future__ import annotations

import pytest

from bots.language.kinds import Kind, asks_for_explanation, asks_yes_or_no, is_question, message_kind

KINDS = [
    # greetings
    ("Hi!", Kind.GREETING),
    ("Hello everyone", Kind.GREETING),
    ("hey Rin", Kind.GREETING),
    ("Good morning!", Kind.GREETING),
    ("How are you?", Kind.GREETING),
    ("what's up", Kind.GREETING),
    ("こんにちは!", Kind.GREETING),
    ("おはよう〜", Kind.GREETING),
    ("やあ", Kind.GREETING),
    ("こんばんは、みなさん", Kind.GREETING),
    ("はじめまして、ゆいです。", Kind.GREETING),
    ("元気?", Kind.GREETING),
    # farewells
    ("Bye!", Kind.FAREWELL),
    ("Good night, all", Kind.FAREWELL),
    ("gotta go, see you tomorrow", Kind.FAREWELL),
    ("Thanks, and good night!", Kind.FAREWELL),  # whoever leaves should hear goodbye
    ("Have a good weekend!", Kind.FAREWELL),
    ("またね!", Kind.FAREWELL),
    ("おやすみー", Kind.FAREWELL),
    ("じゃあね", Kind.FAREWELL),
    ("そろそろ寝ます。", Kind.FAREWELL),
    # thanks
    ("Thanks!", Kind.THANKS),
    ("thank you so much, Theo", Kind.THANKS),
    ("thx", Kind.THANKS),
    ("ありがとう!", Kind.THANKS),
    ("助かりました、ありがとうございます。", Kind.THANKS),
    # questions
    ("What's 17 times 3?", Kind.QUESTION),
    ("Rin, what are you building?", Kind.QUESTION),
    ("Hi Rin, what are you building?", Kind.QUESTION),  # the question wants the answer more than the hello
    ("Thanks, but why?", Kind.QUESTION),
    ("anyone up for ramen", Kind.QUESTION),  # chat drops the question mark
    ("Tell me about your job", Kind.QUESTION),
    ("17×3は？", Kind.QUESTION),
    ("これ何かな", Kind.QUESTION),
    ("何してるの", Kind.QUESTION),
    ("それ、どこで買ったんですか", Kind.QUESTION),
    ("分散システムについて教えて", Kind.QUESTION),
    ("本当にそう思う？", Kind.QUESTION),
    # statements
    ("I baked sourdough yesterday.", Kind.STATEMENT),
    ("What a day.", Kind.STATEMENT),
    ("Have fun!", Kind.STATEMENT),
    ("I said hello to her yesterday and she left.", Kind.STATEMENT),
    ("", Kind.STATEMENT),
    ("昨日パン焼いたよ。", Kind.STATEMENT),
    ("いやあ、疲れた", Kind.STATEMENT),  # "いやあ" is no "やあ"
    ("そうか", Kind.STATEMENT),
    ("そうなんです", Kind.STATEMENT),
    ("何もない", Kind.STATEMENT),
]


@pytest.mark.parametrize(("text", "kind"), KINDS, ids=[f"{kind}-{text or 'empty'}" for text, kind in KINDS])
def test_message_kind(text: str, kind: Kind) -> None:
    assert message_kind(text) is kind


EXPLANATIONS = [
    ("Why does it fail?", True),
    ("How do you make bread?", True),
    ("How does consensus work?", True),
    ("Tell me about your job", True),
    ("Can you explain the pool?", True),
    ("What do you think about remote work?", True),
    ("Thanks, but why?", True),
    ("なんで動かないの?", True),
    ("どうして空は青いの？", True),
    ("分散システムについて教えて", True),
    ("どうやって作ったんですか?", True),
    ("What's 17 times 3?", False),
    ("How many cats do you have?", False),
    ("How are you?", False),  # a greeting
    ("Rin, are you there?", False),
    ("17×3は？", False),
    ("そうなんですか", False),  # "なんです" is no "なんで"
    ("I wonder why.", True),
    ("Why not.", False),  # said, not asked
]


@pytest.mark.parametrize(("text", "explain"), EXPLANATIONS, ids=[text for text, _ in EXPLANATIONS])
def test_asks_for_explanation(text: str, explain: bool) -> None:
    assert asks_for_explanation(text) is explain


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("ok?", True),
        ("Is it raining", True),
        ("Do it!", False),
        ("Will do.", False),
        ("明日来るかな", True),
        ("そっか", False),
        ("", False),
    ],
)
def test_is_question(text: str, asks: bool) -> None:
    assert is_question(text) is asks


@pytest.mark.parametrize(
    ("text", "yes_or_no"),
    [
        ("Do you like jazz?", True),
        ("Is it raining?", True),
        ("Anyone tried the new cafe?", True),
        ("Did you sleep well?", True),
        ("What a day! Are you tired?", True),  # an exclamation, then a yes-or-no question
        ("行ったことある?", True),
        ("それって本当?", True),
        ("明日は晴れるかな", True),
        ("Juno, what's your favourite book?", False),
        ("Theo, what do you think about deploying on a Friday?", False),
        ("Why?", False),
        ("Tea or coffee?", False),
        ("Can you recommend a book?", False),
        ("Any book recommendations for a long train ride?", False),
        ("Do you know when it starts?", False),
        ("みおさん、おすすめの本は何ですか?", False),
        ("好きな本は?", False),
        ("コーヒーと紅茶、どっちが好き?", False),
        ("How are you?", False),  # a greeting, not a question to answer
        ("I baked bread.", False),  # no question at all
    ],
)
def test_asks_yes_or_no(text: str, yes_or_no: bool) -> None:
    assert asks_yes_or_no(text) is yes_or_no
