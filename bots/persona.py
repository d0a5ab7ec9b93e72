"""Persona files: ``personas/<id>.toml``, validated on load with errors that name the file and the field.

A persona file holds who the persona is and how it talks - never a secret. It names the environment variable
that holds its Discord token and the provider profile it uses.
"""

from __future__ import annotations

import logging
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from arbiter.contract import Id
from bots.colors import persona_color
from bots.errors import BotError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = (
    "BigFive",
    "McpServer",
    "NodEmoji",
    "Persona",
    "PersonaError",
    "Samples",
    "load_persona",
    "load_personas",
)

_log = logging.getLogger(__name__)

Line = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=400)]
Trait = Annotated[float, Field(ge=0.0, le=1.0)]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Z_][A-Z0-9_]*$")]
_ID: TypeAdapter[str] = TypeAdapter(Id)


class PersonaError(BotError):
    """A persona file is missing, unreadable or invalid. The message names the file and the field."""


class BigFive(BaseModel):
    """Big Five traits, 0 (low) to 1 (high). Extraversion also sets how quickly the persona jumps in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    openness: Trait
    conscientiousness: Trait
    extraversion: Trait
    agreeableness: Trait
    neuroticism: Trait

    def describe(self) -> str:
        """The traits in words, for the prompt (models follow words better than numbers)."""

        def level(value: float) -> str:
            return (
                "very low"
                if value < 0.2
                else "low"
                if value < 0.4
                else "moderate"
                if value < 0.6
                else "high"
                if value < 0.8
                else "very high"
            )

        return ", ".join(f"{name} {level(getattr(self, name))}" for name in type(self).model_fields)


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def _placeholders(*allowed: str, required: str | None = None) -> Callable[[str], str]:
    """A check that a sample line holds only the ``allowed`` placeholders ({name}: whom the persona answers;
    {word}: a word of what they said), and ``required``. A line with a placeholder is used only when it is known."""

    def check(line: str) -> str:
        for name in _PLACEHOLDER.findall(line):
            if name not in allowed:
                hint = (
                    f"a line here may hold {' and '.join(f'{{{a}}}' for a in allowed)}"
                    if allowed
                    else "lines here hold no placeholder"
                )
                raise ValueError(f"unknown placeholder {{{name}}}; {hint}")
        if required is not None and f"{{{required}}}" not in line:
            raise ValueError(f"has no {{{required}}}: the line is built on it")
        return line

    return check


PlainLine = Annotated[Line, AfterValidator(_placeholders())]
NamedLine = Annotated[Line, AfterValidator(_placeholders("name"))]
WordedLine = Annotated[Line, AfterValidator(_placeholders("name", "word"))]
EchoLine = Annotated[Line, AfterValidator(_placeholders("name", "word", required="word"))]


class Samples(BaseModel):
    """The persona's voice. The prompt shows a few nods and remarks as examples of how it sounds; the scripted
    provider speaks all of them, each set where it fits. Only ``aizuchi`` and ``remarks`` are required: a set
    left out falls back to the scripted provider's generic lines in the persona's language."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    aizuchi: list[PlainLine] = Field(min_length=3, description="short nods in the persona's voice")
    remarks: list[PlainLine] = Field(min_length=3, description="typical remarks in the persona's voice")
    greetings: list[NamedLine] = Field(default_factory=list, description="hellos")
    farewells: list[NamedLine] = Field(default_factory=list, description="goodbyes")
    thanks: list[NamedLine] = Field(default_factory=list, description="answers to thanks")
    answers: list[WordedLine] = Field(
        default_factory=list, description="answers to a yes-or-no question, that fit without knowing the question"
    )
    unsure: list[WordedLine] = Field(
        default_factory=list,
        description="what it says, offline, to a question it cannot answer (what, which, why, how): honestly",
    )
    questions: list[NamedLine] = Field(default_factory=list, description="questions it asks everyone")
    echoes: list[EchoLine] = Field(default_factory=list, description="reactions built on a word of the message")


ToolName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class McpServer(BaseModel):
    """An MCP server whose tools the persona may call during its turn: a command run over stdio, or a Streamable
    HTTP ``url``. ``tools`` names the tools it may use (others the server has are not offered). ``env`` names
    variables of this process's environment handed to a command (it gets none of the others but the basics such as
    PATH and HOME): their names only, never their values, belong in the file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Id
    command: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=400)] | None = None
    args: list[Annotated[str, StringConstraints(max_length=400)]] = Field(default_factory=list, max_length=40)
    url: Annotated[str, StringConstraints(pattern=r"^https?://\S+$", max_length=400)] | None = None
    tools: list[ToolName] = Field(min_length=1, max_length=20, description="the tools the persona may use")
    env: list[EnvName] = Field(default_factory=list, max_length=20, description="variables handed to the command")
    timeout_s: float = Field(5.0, gt=0.0, le=30.0, description="the longest one call may take")

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a server run over stdio) or url (Streamable HTTP), not both")
        if self.url is not None and (self.args or self.env):
            raise ValueError("args and env are for a command, a url server takes neither")
        return self


# Discord's rules for an application emoji: its name, and an image of at most 256 KiB in one of the formats it takes
# (AVIF too, but discord.py cannot upload that).
EmojiName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_]{2,32}$")]
EMOJI_MAX_BYTES = 256 * 1024
_IMAGE_KINDS = {b"\x89PNG\r\n\x1a\n": "PNG", b"\xff\xd8\xff": "JPEG", b"GIF87a": "GIF", b"GIF89a": "GIF"}


def _image_kind(head: bytes) -> str | None:
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "WebP"
    return next((kind for magic, kind in _IMAGE_KINDS.items() if head.startswith(magic)), None)


class NodEmoji(BaseModel):
    """An image the persona nods with on Discord: uploaded as an emoji of its bot's application under ``name``, and
    said as ``:name:``. ``image`` is relative to the persona file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: EmojiName
    image: Path

    @property
    def said(self) -> str:
        return f":{self.name}:"

    def checked(self, directory: Path | None) -> NodEmoji:
        """The emoji with its image found from ``directory`` (the persona file's), once the image would be taken."""
        image = self.image if directory is None or self.image.is_absolute() else directory / self.image
        try:
            with image.open("rb") as file:
                head = file.read(16)
                size = file.seek(0, 2)
        except OSError as error:
            raise ValueError(f"{self.name}: cannot read {image}: {error.strerror or error}") from None
        if _image_kind(head) is None:
            raise ValueError(f"{self.name}: {image} is not a PNG, JPEG, GIF or WebP image")
        if size > EMOJI_MAX_BYTES:
            raise ValueError(f"{self.name}: {image} is {size} bytes; Discord takes at most {EMOJI_MAX_BYTES} (256 KiB)")
        return self.model_copy(update={"image": image})


# An image's address, as Discord takes a webhook message's avatar_url.
AvatarUrl = Annotated[str, StringConstraints(strip_whitespace=True, pattern=r"^https?://\S+$", max_length=2048)]


class Persona(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Id
    display_name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80)]
    aliases: list[Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80)]] = Field(
        default_factory=list, max_length=10, description="other names people call the persona by"
    )
    language: Literal["en", "ja"]
    personality: Line
    background: Line
    speaking_style: Line
    big_five: BigFive
    talkativeness: Trait = Field(description="0 (rarely speaks) to 1 (speaks whenever it can)")
    samples: Samples
    provider: Annotated[str, StringConstraints(min_length=1, max_length=64)] = Field(
        "scripted", description="name of a provider profile"
    )
    discord_token_env: EnvName | None = Field(None, description="environment variable holding its Discord token")
    color: Annotated[str, StringConstraints(pattern=r"^#[0-9a-fA-F]{6}$")] = Field(
        # None given: one made from the id, as `aizuchi personas import` writes it (bots/colors.py says how).
        default_factory=lambda data: persona_color(str(data.get("id", ""))),
        description="its name chip's colour in the local room",
    )
    avatar_url: (
        Annotated[str, StringConstraints(strip_whitespace=True, pattern=r"^https?://\S+$", max_length=2048)] | None
    ) = Field(
        None,
        description="its picture on Discord when it posts through a webhook (one-application mode): an http(s) address "
        "of an image",
    )
    react_with_emoji: bool = Field(False, description="on Discord, give aizuchi as an emoji reaction when it fits")
    nod_emojis: list[NodEmoji] = Field(
        default_factory=list, max_length=5, description="its own emoji images, to nod with as reactions on Discord"
    )
    mcp_servers: list[McpServer] = Field(
        default_factory=list, max_length=5, description="MCP servers whose tools it may call during its turn"
    )

    @field_validator("aliases")
    @classmethod
    def _names_distinct(cls, aliases: list[str], info: ValidationInfo) -> list[str]:
        # A field validator (not a model one), so the error names the field; display_name is validated before.
        display_name = info.data.get("display_name")
        names = [*([display_name.casefold()] if display_name else []), *(alias.casefold() for alias in aliases)]
        if len(names) != len(set(names)):
            raise ValueError("aliases repeat the display name or each other")
        return aliases

    @field_validator("nod_emojis")
    @classmethod
    def _emojis_usable(cls, emojis: list[NodEmoji], info: ValidationInfo) -> list[NodEmoji]:
        if not emojis:
            return emojis
        if not info.data.get("react_with_emoji"):
            raise ValueError("they are nods given as reactions: set react_with_emoji = true")
        names = [emoji.name for emoji in emojis]
        if len(names) != len(set(names)):
            raise ValueError("two emojis have the same name")
        directory = info.context.get("directory") if isinstance(info.context, dict) else None
        return [emoji.checked(directory) for emoji in emojis]

    @field_validator("mcp_servers")
    @classmethod
    def _servers_distinct(cls, servers: list[McpServer]) -> list[McpServer]:
        names = [server.name for server in servers]
        if len(names) != len(set(names)):
            raise ValueError("two servers have the same name")
        tools = [tool for server in servers for tool in server.tools]
        if "decide" in tools:
            raise ValueError("a tool may not be called 'decide': the persona's decision goes by that name")
        twice = sorted({tool for tool in tools if tools.count(tool) > 1})
        if twice:
            raise ValueError(f"tools listed twice (by one server or two): {', '.join(twice)}")
        return servers

    @property
    def names(self) -> tuple[str, ...]:
        return (self.display_name, *self.aliases)

    @property
    def emoji_nods(self) -> tuple[str, ...]:
        """Its own emoji as it says them (``:name:``): each a reaction on Discord once uploaded."""
        return tuple(emoji.said for emoji in self.nod_emojis)


def _field_path(location: tuple[int | str, ...]) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(file)"


def load_persona(path: Path) -> Persona:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PersonaError(f"{path}: no such persona file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise PersonaError(f"{path}: cannot read: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise PersonaError(f"{path}: not valid TOML: {error}") from None
    try:
        persona = Persona.model_validate(data, context={"directory": path.parent})
    except ValidationError as error:
        problems = "; ".join(f"{_field_path(e['loc'])}: {e['msg']}" for e in error.errors(include_url=False))
        raise PersonaError(f"{path}: {problems}") from None
    if persona.id != path.stem:
        raise PersonaError(f"{path}: id: {persona.id!r} must match the file name {path.stem!r}")
    return persona


def load_personas(directory: Path, only: list[str] | None = None) -> list[Persona]:
    """Every persona in ``directory`` (sorted by id), or just those in ``only`` (in that order)."""
    if not directory.is_dir():
        raise PersonaError(f"{directory}: no such persona directory")
    if only:
        for persona_id in only:
            try:
                _ID.validate_python(persona_id)
            except ValidationError:
                raise PersonaError(f"{persona_id!r} is not a valid persona id") from None
        return [load_persona(directory / f"{persona_id}.toml") for persona_id in only]
    personas = [load_persona(path) for path in sorted(directory.glob("*.toml"))]
    if not personas:
        raise PersonaError(f"{directory}: no persona files (*.toml)")
    return personas
