"""Reading a Tavern character card: V1, V2 or V3 JSON, or the PNG that embeds one in a text chunk.

Specs: github.com/malfoyslastname/character-card-spec-v2 (V1 and V2), github.com/kwaroran/character-card-spec-v3
(V3). A PNG's chunks are read with the standard library: a card needs only its text chunks (PNG spec, 11.3.4).
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from bots.errors import BotError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ("Card", "CardData", "CardError", "parse_card", "read_card")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CARD_CHUNKS = ("ccv3", "chara")  # the spec: when both are there, ccv3 (V3) wins over chara (V2)
_MAX_TEXT_BYTES = 32 * 1024 * 1024  # a compressed text chunk is not inflated past this (a zip bomb stops here)
_SPECS = {"chara_card_v2": "Character Card V2", "chara_card_v3": "Character Card V3"}


class CardError(BotError):
    """The file is not a character card this can read, or its persona cannot be made; the message says why."""


def _text(value: object) -> object:
    return "" if value is None else value  # some writers put null where the spec says an empty string


Text = Annotated[str, BeforeValidator(_text)]


class CardData(BaseModel):
    """The fields this maps, as V2's ``data`` (V1's top level) names them; the rest is kept to be reported."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: Text
    description: Text = ""
    personality: Text = ""
    scenario: Text = ""
    first_mes: Text = ""
    mes_example: Text = ""
    alternate_greetings: list[str] = Field(default_factory=list)
    # V3
    nickname: Text = ""
    group_only_greetings: list[str] = Field(default_factory=list)
    # SillyTavern's own field (its group chats' "how often it speaks"), in V1's top level or V2/V3's extensions
    talkativeness: Any = None
    extensions: Any = None


@dataclass(frozen=True, slots=True)
class Card:
    data: CardData
    spec: str  # "Character Card V1", "... V2", "... V3"
    container: str  # "JSON" or "PNG"

    def describe(self) -> str:
        return f"a {self.spec} in {self.container}"


def read_card(path: Path) -> Card:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CardError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CardError(f"{path}: is a directory, not a card") from None
    except OSError as error:
        raise CardError(f"{path}: cannot read: {error.strerror or error}") from None
    try:
        return parse_card(raw)
    except CardError as error:
        raise CardError(f"{path}: {error}") from None


def parse_card(raw: bytes) -> Card:
    """A card from a file's bytes: a PNG (by its signature) with the card in a text chunk, else JSON."""
    if raw.startswith(_PNG_SIGNATURE):
        keyword, text = _png_card_chunk(raw)
        try:
            decoded = base64.b64decode("".join(text.split()), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise CardError(f"the PNG's {keyword!r} chunk is not valid base64 of UTF-8 text") from None
        return _card(_json(decoded, f"the PNG's {keyword!r} chunk"), "PNG")
    try:
        decoded = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CardError("not a character card: neither a PNG nor JSON (UTF-8) text") from None
    return _card(_json(decoded, "the file"), "JSON")


def _json(text: str, what: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise CardError(f"{what} is not JSON ({error.msg} at line {error.lineno} column {error.colno})") from None


def _png_card_chunk(raw: bytes) -> tuple[str, str]:
    """The keyword and text of the card's chunk (``ccv3`` before ``chara``), from tEXt, zTXt or iTXt chunks."""
    found: dict[str, str] = {}
    offset = len(_PNG_SIGNATURE)
    while offset < len(raw):
        if offset + 8 > len(raw):
            raise CardError("a truncated PNG (a chunk header is cut off)")
        length, kind = struct.unpack(">I4s", raw[offset : offset + 8])
        body = raw[offset + 8 : offset + 8 + length]
        if offset + 12 + length > len(raw):
            raise CardError(f"a truncated PNG (its {kind.decode('latin-1')!r} chunk is cut off)")
        (crc,) = struct.unpack(">I", raw[offset + 8 + length : offset + 12 + length])
        offset += 12 + length
        if kind == b"IEND":
            break
        if kind in (b"tEXt", b"zTXt", b"iTXt"):
            keyword, _, rest = body.partition(b"\0")
            name = keyword.decode("latin-1").lower()
            if name in _CARD_CHUNKS and name not in found:
                if zlib.crc32(kind + body) != crc:
                    raise CardError(f"the PNG's {name!r} chunk is damaged (its checksum does not match)")
                found[name] = _chunk_text(kind, rest, name)
    for name in _CARD_CHUNKS:
        if name in found:
            return name, found[name]
    raise CardError("a PNG with no character card in it (no 'ccv3' or 'chara' text chunk)")


def _chunk_text(kind: bytes, rest: bytes, name: str) -> str:
    """A text chunk's text after its keyword (PNG spec, 11.3.4): tEXt is Latin-1, zTXt compressed Latin-1,
    iTXt UTF-8, compressed or not. Base64 is ASCII, so the encodings only matter for a broken chunk."""
    try:
        if kind == b"tEXt":
            return rest.decode("latin-1")
        if kind == b"zTXt":
            return _inflate(rest[1:]).decode("latin-1")  # rest[0] is the method: 0, zlib, the only one
        compressed, rest = rest[0], rest[2:]  # the compression flag, then the method
        _language, _, rest = rest.partition(b"\0")
        _translated, _, text = rest.partition(b"\0")
        return (_inflate(text) if compressed else text).decode("utf-8")
    except (IndexError, UnicodeDecodeError, zlib.error):
        raise CardError(f"the PNG's {name!r} chunk is damaged") from None


def _inflate(data: bytes) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, _MAX_TEXT_BYTES)
    if inflater.unconsumed_tail:
        raise zlib.error("too large")
    return out


def _card(document: object, container: str) -> Card:
    if not isinstance(document, dict):
        raise CardError(f"not a character card: the JSON is {_kind(document)}, not an object")
    spec = document.get("spec")
    if spec is None:
        if "name" not in document:
            raise CardError("not a character card: no 'spec' and no 'name'")
        return Card(_data(document, ""), "Character Card V1", container)
    if spec not in _SPECS:
        raise CardError(f"unknown card spec {spec!r} (this reads chara_card_v2 and chara_card_v3, and V1)")
    data = document.get("data")
    if not isinstance(data, dict):
        raise CardError(f"a {spec} card needs a 'data' object; it has {_kind(data)}")
    return Card(_data(data, "data."), _SPECS[spec], container)


def _data(fields: dict[str, Any], prefix: str) -> CardData:
    if not str(fields.get("name") or "").strip():
        raise CardError(f"the card has no name ({prefix}name is missing or empty)")
    try:
        return CardData.model_validate(fields)
    except ValidationError as error:
        problems = "; ".join(
            f"{prefix}{'.'.join(str(part) for part in e['loc'])}: {e['msg']}"
            for e in error.errors(include_url=False, include_input=False)
        )
        raise CardError(f"not a valid card: {problems}") from None


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "text", type(None): "null", bool: "true or false"}.get(
        type(value), "a number"
    )
