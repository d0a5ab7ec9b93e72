"""Character cards as front ends write them: V2 and V3 JSON, a Japanese card, and real PNG files that embed them."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(*extra: bytes) -> bytes:
    """A valid 1x1 grey PNG (IHDR, IDAT, IEND), with ``extra`` chunks between the image data and the end."""
    header = chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))  # 8-bit greyscale, no interlace
    image = chunk(b"IDAT", zlib.compress(b"\x00\x80"))  # one scanline: filter type 0, one grey pixel
    return SIGNATURE + header + image + b"".join(extra) + chunk(b"IEND", b"")


def text_chunk(keyword: str, card: dict[str, Any]) -> bytes:
    """A tEXt chunk as SillyTavern writes it: the keyword, a NUL, the card's JSON in base64."""
    return chunk(b"tEXt", keyword.encode("latin-1") + b"\0" + encoded(card))


def encoded(card: dict[str, Any]) -> bytes:
    return base64.b64encode(json.dumps(card, ensure_ascii=False).encode("utf-8"))


def v2_card(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "Seraphina",
        "description": "{{char}} is the guardian of the Eldoria forest. She heals whoever wanders in hurt.",
        "personality": "Kind, gentle, protective and wise.",
        "scenario": "{{user}} wakes up in {{char}}'s glade after a storm.",
        "first_mes": "*You wake to the smell of herbs.* Oh, {{user}}, you're awake! I'm {{char}}.",
        "mes_example": (
            "<START>\n"
            "{{user}}: Where am I?\n"
            "{{char}}: *She smiles.* You are safe in my glade. The forest guards its own.\n"
            "{{user}}: Thank you.\n"
            "{{char}}: Of course.\n"
            "<START>\n"
            "{{user}}: Who are you?\n"
            "Seraphina: I keep this forest.\n"
            "I have kept it for a very long time.\n"
            "{{char}}: Rest now, {{user}}.\n"
            "<START>\n"
            "{{char}}: Mm-hm.\n"
            "{{char}}: The herbs need another hour. Then we eat.\n"
        ),
        "creator_notes": "Works best with a warm model.",
        "system_prompt": "You are {{char}}. Never break character.",
        "post_history_instructions": "",
        "alternate_greetings": ["Welcome back, {{user}}. {{random:The tea is ready,The herbs are dry}}."],
        "character_book": {"entries": [{"keys": ["glade"], "content": "The glade is old.", "extensions": {}}]},
        "tags": ["fantasy", "healer"],
        "creator": "someone",
        "character_version": "1.2",
        "extensions": {"talkativeness": "0.7", "fav": False, "world": "Eldoria"},
    }
    data.update(changes)
    # SillyTavern also copies the V1 fields to the top level; a reader takes data's.
    return {"spec": "chara_card_v2", "spec_version": "2.0", "name": "stale top-level copy", "data": data}


def v3_card(**changes: Any) -> dict[str, Any]:
    data = v2_card()["data"] | {
        "name": "Seraphina Vale",
        "nickname": "Sera",
        "group_only_greetings": ["Oh, more of you! Come in, {{user}}, all of you."],
        "assets": [{"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"}],
        "creator_notes_multilingual": {"en": "Works best with a warm model.", "ja": "温かいモデル向け。"},
        "source": ["https://example.org/cards/sera"],
        "creation_date": 1700000000,
        "modification_date": 0,
    }
    data.update(changes)
    return {"spec": "chara_card_v3", "spec_version": "3.0", "data": data}


def ja_card(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "月見 ゆい",
        "description": "{{char}}は町の小さな喫茶店の店主。常連客の話を聞くのが好き。",
        "personality": "穏やかで聞き上手。少し天然。",
        "scenario": "雨の日の午後、{{user}}が店に入ってくる。",
        "first_mes": "いらっしゃいませ、{{user}}さん。今日は何にしますか?",
        "mes_example": (
            "<START>\n"
            "{{user}}: こんにちは\n"
            "{{char}}: あら、こんにちは。今日は雨ですね、傘は大丈夫でしたか?\n"
            "{{user}}: 大丈夫です\n"
            "{{char}}: なるほど〜。\n"
            "{{char}}: 新しいブレンドを試してみたんです。少し苦めですけど、香りがいいんですよ。\n"
            "{{char}}: ふふ、それは楽しみですね。また聞かせてください。\n"
        ),
    }
    data.update(changes)
    return {"spec": "chara_card_v2", "spec_version": "2.0", "data": data}


def isolde_card(**changes: Any) -> dict[str, Any]:
    """A V2 card as many are written: a title in the name, and actions in asterisks around what the character says."""
    data: dict[str, Any] = {
        "name": "Captain Isolde Varga",
        "description": "{{char}} commands the airship Kestrel. She trusts her crew and no one else.",
        "personality": "Dry, fearless, fiercely loyal.",
        "scenario": "{{user}} has just signed on as navigator.",
        "first_mes": '*She looks up from the charts.* "You\'re the new navigator, {{user}}? Sit down."',
        "mes_example": (
            "<START>\n"
            "{{user}}: Are we in danger?\n"
            "{{char}}: *She grins.* Always. That's what makes it fun.\n"
            "{{user}}: Should I worry?\n"
            "{{char}}: *shrugs*\n"
            "{{char}}: I *really* mean it: the storm is coming.\n"
            "{{char}}: (laughs) Not yet.\n"
            "{{char}}: Hm. *nods*\n"
            "{{char}}: We climb at dawn. Hold on to something, and don't look down.\n"
        ),
    }
    data.update(changes)
    return {"spec": "chara_card_v2", "spec_version": "2.0", "data": data}
