"""What the offline stand-in can say: a persona's sets of lines and the generic ones it falls back on.

Each set fits one kind of reply (:mod:`bots.llm.scripted.choosing` picks the set from what it answers). The
generic sets are plain and voice-neutral, one table per language; a persona's own sets come from its file.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ("DEFAULT_AIZUCHI", "DEFAULT_REMARKS", "GENERIC", "Lines")


@dataclass(frozen=True, slots=True)
class Lines:
    """What a persona can say, by set (as in the persona file's ``samples``). ``{name}`` in a line stands for
    whom it answers, ``{word}`` for a word of their message; a line with one is used only when it is known."""

    aizuchi: tuple[str, ...] = ()
    remarks: tuple[str, ...] = ()
    greetings: tuple[str, ...] = ()
    farewells: tuple[str, ...] = ()
    thanks: tuple[str, ...] = ()
    answers: tuple[str, ...] = ()  # to a question a yes or a no answers
    unsure: tuple[str, ...] = ()  # to a question it cannot answer offline (what, which, why, how)
    questions: tuple[str, ...] = ()
    echoes: tuple[str, ...] = ()
    numbers: tuple[str, ...] = ()  # answers to arithmetic: {n} is the result
    photos: tuple[str, ...] = ()  # to a person's photo (JPEG, PNG, WebP) the model is shown
    gifs: tuple[str, ...] = ()  # to a person's GIF


DEFAULT_AIZUCHI: tuple[str, ...] = (
    "I see.",
    "Right!",
    "Mm-hm.",
    "No way!",
    "Oh, nice.",
    "Fair point.",
    "Ha, true.",
    "Really?",
)
DEFAULT_REMARKS: tuple[str, ...] = (
    "That reminds me of something I read last week.",
    "I'm not sure I agree, but go on.",
    "What made you think of that?",
    "Honestly, I'd never looked at it that way.",
    "We should try that sometime.",
    "That sounds harder than it looks.",
    "I keep coming back to that idea.",
    "Maybe the simplest answer is the right one here.",
)

# The fallback for every set a persona leaves out or has used up, in its language: plain, voice-neutral lines.
GENERIC: dict[str, Lines] = {
    "en": Lines(
        aizuchi=(*DEFAULT_AIZUCHI, "Uh-huh.", "Oh!", "Hm, okay.", "Got it.", "Interesting.", "Go on.", "Huh."),
        remarks=DEFAULT_REMARKS,
        greetings=(
            "Hi {name}!",
            "Hey {name}, good to see you.",
            "Hello! Nice to have you here.",
            "Hey there!",
            "Hi! How's your day going?",
            "Oh hey, welcome in!",
        ),
        farewells=("Bye {name}, take care!", "See you later!", "Good night!", "Take care!", "Catch you next time."),
        thanks=(
            "You're welcome!",
            "Anytime.",
            "Happy to help.",
            "No problem at all.",
            "Glad it helped.",
            "Sure thing!",
        ),
        answers=(
            "Good question. Honestly, I'm not sure yet.",
            "Hm, I'd have to think about that one.",
            "Short answer: it depends.",
            "I'd say yes, but don't quote me.",
            "Honestly? A bit of both.",
            "Let me think... probably yes.",
            "Probably not, if I'm honest.",
            "I think so.",
            "Hm, maybe.",
            "Probably!",
        ),
        unsure=(
            "Good question, {name}. I'm running offline, so I honestly can't know that.",
            "I'd only be guessing about {word} right now, and I'd rather not.",
            "I wish I knew! I'm an offline stand-in at the moment, so that's beyond me.",
            "No idea, I'm afraid. Ask me again once I'm on a real model.",
            "Honestly, I can't answer that offline.",
            "No idea, sorry!",
            "Can't say, offline.",
            "Hm, beats me.",
        ),
        questions=(
            "What's everyone up to today?",
            "Has anyone tried something new lately?",
            "Anyone else have a take on this?",
            "What would you do differently?",
            "How did that start, anyway?",
        ),
        echoes=(
            "{word}? Tell me more.",
            "Oh, {word}! Go on.",
            "I like the sound of {word}.",
            "So, {word}. What's the story there?",
            "{word}, huh. I didn't see that coming.",
        ),
        numbers=("{n}.", "That's {n}.", "It's {n}.", "{n}, if I counted right.", "{n}, I think.", "Easy one: {n}."),
        photos=("A photo!", "Oh, a photo! Nice one, {name}.", "What a picture!", "Ooh, a photo."),
        gifs=("Ha, a GIF!", "That GIF!", "Oh, it moves!"),
    ),
    "ja": Lines(
        aizuchi=(
            "なるほど。",
            "へえ。",
            "うんうん。",
            "たしかに。",
            "そうなんだ。",
            "ほんとに?",
            "いいね。",
            "ふむふむ。",
            "そっかあ。",
            "おお。",
            "ほう。",
            "なるほどね。",
            "わあ。",
            "うん。",
            "へえー。",
            "そうなのね。",
        ),
        remarks=(
            "それ、ちょっと気になりますね。",
            "そういう考え方もあるんですね。",
            "なんだか試してみたくなりました。",
            "思ったより奥が深そうですね。",
            "前にも似た話を聞いたことがあります。",
            "いちばん単純な答えが正解かもしれません。",
        ),
        greetings=(
            "{name}さん、こんにちは!",
            "やあ、{name}さん!",
            "こんにちは!",
            "どうも、こんにちは。",
            "いらっしゃい!",
            "こんにちは、今日はどうですか?",
        ),
        farewells=("{name}さん、またね!", "またね!", "おやすみなさい!", "お疲れさまでした。", "またお話ししましょう。"),
        thanks=("どういたしまして!", "いえいえ!", "お役に立ててよかったです。", "気にしないで!", "こちらこそ!"),
        answers=(
            "いい質問ですね。うーん、まだはっきりとは言えないかな。",
            "ちょっと考えさせてください。",
            "場合によるかな。",
            "たぶん、そうだと思います。",
            "両方ありかな、と思います。",
            "うーん、どちらかといえばノーかな。",
            "たぶんね。",
            "そうかも。",
            "うーん、たぶん。",
        ),
        unsure=(
            "{name}さん、いい質問ですね。でも今はオフラインなので、正直わかりません。",
            "{word}のことは、今の私には答えられないんです。ごめんなさい。",
            "知りたいけど、オフラインの私にはわからないんです。",
            "うーん、今はわからないです。ちゃんとしたモデルのときに聞いてください。",
            "わからないです、ごめんね。",
            "うーん、不明です。",
        ),
        questions=(
            "みんなは最近どう?",
            "ほかの人はどう思う?",
            "最近なにか新しいこと始めた?",
            "みんなならどうする?",
            "それって、どうやって始まったの?",
        ),
        echoes=(
            "{word}?もっと聞かせて!",
            "{word}、いいですね。",
            "えっ、{word}?それで?",
            "{word}かあ、気になる。",
            "{word}の話、面白いですね。",
            "{word}って、どんな感じ?",
        ),
        numbers=("{n}です。", "{n}だよ。", "答えは{n}。", "{n}、かな。", "{n}ですね。", "えっと、{n}!"),
        photos=("写真だ!", "{name}さん、いい写真ですね!", "おっ、写真!", "写真、見ました!"),
        gifs=("GIFだ!", "そのGIF、いいですね!", "動いてる!"),
    ),
}
