"""What kind of message a message is - a greeting, a farewell, thanks, a question or a statement - and whether
a question asks for an explanation. English and Japanese. Pure: text in, kind out, by small word tables.

A message can be several things at once ("Hi Rin, what are you building?"); it gets the one that most wants
an answer: a farewell first (whoever leaves should hear goodbye), then a greeting formula that is a question
("how are you?", "元気?"), then a question, thanks, a greeting, and otherwise a statement.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from enum import StrEnum

__all__ = ("Kind", "asks_for_explanation", "asks_yes_or_no", "is_question", "message_kind")


class Kind(StrEnum):
    GREETING = "greeting"
    FAREWELL = "farewell"
    THANKS = "thanks"
    QUESTION = "question"
    STATEMENT = "statement"


def _words(*phrases: str) -> str:
    """An alternation of English phrases, each matched as whole words ("hi" not in "this")."""
    return r"\b(?:" + "|".join(phrase.replace(" ", r"\s+") for phrase in phrases) + r")\b"


# --- English ---------------------------------------------------------------------------------------------

# A greeting word opening a clause, followed by at most a few words (names, "everyone"): "hey all", "hi Rin".
_EN_GREETING_CLAUSE = re.compile(
    r"^(?:oh\s+|well\s+)?"
    r"(?:hi|hello|hey|heya|hiya|yo|howdy|greetings|hallo|morning|evening|welcome|"
    r"good\s+(?:morning|afternoon|evening|day)|hi\s+there|hello\s+there|hey\s+there)"
    r"(?:\s+\S+){0,2}$"
)
# Greeting formulas wherever they stand, questions or not.
_EN_GREETING_FORMULA = re.compile(
    _words(
        "how are you",
        "how are you doing",
        "how's it going",
        "hows it going",
        "how is it going",
        "how have you been",
        "how are things",
        "how's everyone",
        "how is everyone",
        "what's up",
        "whats up",
        "wassup",
        "nice to meet you",
        "long time no see",
        "good to see you",
        "nice to see you",
        "great to see you",
        "glad to see you",
    )
)
_EN_FAREWELL = re.compile(
    # "I'm off" says goodbye; "I'm off to the mountains this weekend" is news.
    r"\b(?:i'?m|i\s+am)\s+off\b(?!\s+(?:to|on|for\s+a)\b)|"
    + _words(
        "bye",
        "bye bye",
        "byebye",
        "goodbye",
        "good bye",
        "see you",
        "see ya",
        "cya",
        "good night",
        "goodnight",
        "nighty night",
        "gotta go",
        "got to go",
        "have to go",
        "need to go",
        "must go",
        "i'm off now",
        "im off now",
        "i am off now",
        "i'm off for the night",
        "i'm off for today",
        "take care",
        "catch you later",
        "talk to you later",
        "talk later",
        "ttyl",
        "farewell",
        "signing off",
        "logging off",
        "heading out",
        "heading off",
        "off to bed",
        "going to bed",
        "later all",
        "later everyone",
        "have a good night",
        "have a good one",
        "have a good weekend",
        "have a nice day",
    )
)
_EN_THANKS = re.compile(
    _words(
        "thanks", "thank you", "thank u", "thx", "ty", "tysm", "much appreciated", "appreciate it", "cheers", "thank"
    )
)
# A clause that opens like a question, even without its question mark (chat often drops it).
_EN_QUESTION_OPENING = re.compile(
    r"^(?:so\s+|and\s+|but\s+|ok\s+|okay\s+|hey\s+|also\s+)?"
    r"(?:what|why|how|who|whom|whose|when|where|which|do|does|did|can|could|would|should|will|shall|is|are|"
    r"am|was|were|have|has|had|may|might|isn't|aren't|don't|doesn't|didn't|won't|wouldn't|can't|couldn't|"
    r"shouldn't|anyone|anybody)\b"
)
# Exclamations that open like a question: "What a day!", "How cool is that".
_EN_EXCLAMATION = re.compile(
    r"^(?:what\s+an?\b|how\s+(?:cool|nice|lovely|great|fun|sad|weird|funny)\b|have\s+(?:a|an|fun|some)\b|"
    r"do\s+it\b|can't\s+wait\b|will\s+do\b)"
)
# Requests to tell, which want an answer as much as a question does.
_EN_REQUEST = re.compile(
    _words(
        "tell me",
        "tell us",
        "explain",
        "describe",
        "walk me through",
        "teach me",
        "show me",
        "i wonder",
        "i'm wondering",
        "wondering if",
        "any idea",
        "any ideas",
        "thoughts on",
        "what about",
        "how about",
    )
)
_EN_EXPLANATION = re.compile(
    r"\bwhy\b|\bhow\s+come\b|\bexplain|\btell\s+(?:me|us)\s+(?:about|more|how|why|what)\b|\bdescribe\b|"
    r"\bwalk\s+me\s+through\b|\bteach\s+me\b|\bwhat\s+do\s+you\s+(?:think|mean)\b|\bwhat\s+does\b.*\bmean\b|"
    r"\bhow\s+(?:do|does|did|can|could|would|should|is|are|was|were|to)\b(?!\s+(?:you|u)\s+do(?:ing)?\b)"
)

# What makes a question more than a yes or a no: a question word, a choice, a request for an idea or a name.
_EN_OPEN = re.compile(
    _words(
        "what",
        "what's",
        "whats",
        "which",
        "why",
        "how",
        "how's",
        "who",
        "who's",
        "whom",
        "whose",
        "where",
        "where's",
        "when",
        "recommend",
        "recommendation",
        "recommendations",
        "suggest",
        "suggestion",
        "suggestions",
        "any ideas",
        "any idea",
        "any tips",
        "any advice",
        "favourite",
        "favorite",
    )
    + r"|\bor\b"
)

# --- Japanese --------------------------------------------------------------------------------------------

_JA_GREETING = re.compile(
    r"こんにちは|こんちは|こんにちわ|こんばんは|こんばんわ|おはよ|はじめまして|初めまして|ひさしぶり|久しぶり|"
    r"ハロー|ただいま|よろしく(?:ね|です|お願い)?[!！。]*$|^(?:やあ|どうも|おっす|ちわ|もしもし|おつかれ(?:さま)?です)"
)
_JA_GREETING_FORMULA = re.compile(r"元気(?:\?|？|です(?:か)?|だった|してる|してた)|調子(?:は|どう)")
_JA_FAREWELL = re.compile(
    r"またね|また明日|またあした|また今度|またあとで|また後で|じゃあね|じゃあまた|じゃね|じゃまた|"
    r"おやすみ|さようなら|さよなら|バイバイ|ばいばい|お先に|おさきに|お疲れ(?:様|さま)でした|"
    r"おつかれ(?:さま)?でした|落ちます|落ちるね|寝ます|寝るね|もう寝る|帰ります|帰るね|失礼します|行ってきます"
)
_JA_THANKS = re.compile(
    r"ありがと|有難う|有り難う|サンキュ|さんきゅ|感謝|助かり|助かる|助かった|あざす|あざっす|恩に着"
)
_JA_QUESTION_END = re.compile(r"(?:か|かな|かね|かしら|っけ|でしょうか|だろうか|の|のか|んですか)$")
_JA_QUESTION_WORD = re.compile(
    r"何(?!も|か|とか|度も|でも|だか)|なに(?!も|か)|なんで(?!す|し)|なんの|なんだろ|誰(?!も|か)|だれ(?!も|か)|"
    r"どこ(?!も|か)|いつ(?!も|か)|どう(?!も|せ)|どれ|どの|どんな|どっち|どちら|なぜ|いくつ|いくら"
)
_JA_REQUEST = re.compile(r"教えて|おしえて|説明して|聞かせて|話して(?:ください|くれ|よ|ほしい)|知りたい")
# "好きな本は?", "それって?": a topic left open asks what it is.
_JA_OPEN_ENDING = re.compile(r"(?:は|って|とか|なら)[?？]*$")
_JA_OPEN = re.compile(r"おすすめ|オススメ|お勧め|お薦め|それとも|か、.*か[?？]?$")
_JA_NOT_QUESTION = re.compile(
    r"(?:そうか|そっか|そうですか|そうでしたか|そうなんですか|そうだったんですか|なるほどか|いいか)$"
)
_JA_EXPLANATION = re.compile(
    r"なぜ|なんで(?!す|し)|どうして|どうやって|どうすれば|どうしたら|どういう(?:こと|意味|仕組み|風|ふう)|教えて|おしえて|"
    r"説明|詳しく|くわしく|仕組み|って何|ってなに|とは何|とは[?？]"
)

# Trailing marks that say nothing about the kind: laughter, tildes, ellipses, emoji.
_TAIL = " \t。．.!！~〜ー…wｗ笑♪☆★" + "".join(chr(code) for code in range(0x1F300, 0x1F650))
_CLAUSES = re.compile(r"[,，、.。!！?？;；:：~〜\n]+|\s+-\s+")


def _normal(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    return text.replace("’", "'").replace("‘", "'").strip()


def _clauses(text: str) -> list[str]:
    return [clause.strip() for clause in _CLAUSES.split(text) if clause.strip()]


def _english_question(clause: str) -> bool:
    return bool(_EN_QUESTION_OPENING.match(clause)) and not _EN_EXCLAMATION.match(clause)


@functools.lru_cache(maxsize=1024)  # asked of the same message at every look and decision
def is_question(text: str) -> bool:
    """Whether ``text`` asks something: a question mark, a question's opening or ending, or a request to tell."""
    normal = _normal(text)
    if not normal:
        return False
    if "?" in normal:
        return True
    if _EN_REQUEST.search(normal) or _JA_REQUEST.search(normal):
        return True
    stripped = normal.rstrip(_TAIL)
    ends_flat = normal.endswith((".", "!", "。", "！"))
    clauses = _clauses(normal)
    if clauses and _english_question(clauses[-1]) and not ends_flat:
        return True
    if _JA_NOT_QUESTION.search(stripped):
        return False
    if _JA_QUESTION_END.search(stripped) and (not stripped.endswith("の") or _JA_QUESTION_WORD.search(stripped)):
        return not ends_flat or stripped.endswith(("か", "かな", "っけ"))
    return bool(_JA_QUESTION_WORD.search(stripped)) and not ends_flat


def _greets(normal: str) -> bool:
    if _JA_GREETING.search(normal):
        return True
    return any(_EN_GREETING_CLAUSE.match(clause) for clause in _clauses(normal)[:2])


@functools.lru_cache(maxsize=1024)  # each persona of a process reads each message: once for all of them
def message_kind(text: str) -> Kind:
    """The kind of ``text``, the one that most wants an answer when it is several (see the module's doc)."""
    normal = _normal(text)
    if not normal:
        return Kind.STATEMENT
    # "Good to see you" greets; "see you" alone says goodbye.
    if _EN_FAREWELL.search(_EN_GREETING_FORMULA.sub(" ", normal)) or _JA_FAREWELL.search(normal):
        return Kind.FAREWELL
    if _EN_GREETING_FORMULA.search(normal) or _JA_GREETING_FORMULA.search(normal):
        return Kind.GREETING
    if is_question(normal):
        return Kind.QUESTION
    if _EN_THANKS.search(normal) or _JA_THANKS.search(normal):
        return Kind.THANKS
    if _greets(normal):
        return Kind.GREETING
    return Kind.STATEMENT


@functools.lru_cache(maxsize=1024)  # asked of the same message at every look and decision
def asks_for_explanation(text: str) -> bool:
    """Whether ``text`` asks for an explanation (why, how, explain, tell me about, なぜ, どうして, 教えて...):
    a question that deserves a longer answer than a nod or a line."""
    normal = _normal(text)
    if message_kind(normal) is not Kind.QUESTION:
        return False
    return bool(_EN_EXPLANATION.search(normal) or _JA_EXPLANATION.search(normal))


@functools.lru_cache(maxsize=1024)  # asked of the same message at every look and decision
def asks_yes_or_no(text: str) -> bool:
    """Whether ``text`` is a question that a yes or a no answers ("Do you like jazz?", "行ったことある?"), not one
    that asks what, which, why or how, to choose, for an idea or to be told something."""
    normal = _normal(text)
    if message_kind(normal) is not Kind.QUESTION or _EN_REQUEST.search(normal) or _JA_REQUEST.search(normal):
        return False
    clauses = [clause for clause in _clauses(normal) if not _EN_EXCLAMATION.match(clause)]
    if any(_EN_OPEN.search(clause) for clause in clauses):
        return False
    stripped = normal.rstrip(_TAIL).rstrip("?？")
    return not (_JA_QUESTION_WORD.search(stripped) or _JA_OPEN.search(stripped) or _JA_OPEN_ENDING.search(stripped))
