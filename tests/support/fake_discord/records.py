"""What the fake keeps for tests to read: recorded REST calls, failure rules, interaction results."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from tests.support.eventually import PATIENCE_S

if TYPE_CHECKING:
    from .model import FakeBot, FakeChannel, FakeMessage, FakeUser

__all__ = (
    "ApiError",
    "FailureRule",
    "InteractionNotAnswered",
    "InteractionResult",
    "PathPattern",
    "RecordedRequest",
)


class ApiError(Exception):
    """A Discord JSON error response: ``{"message": ..., "code": ...}`` with an HTTP status."""

    def __init__(self, status: int, code: int, message: str, *, errors: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code} {message}")
        self.status = status
        self.body: dict[str, Any] = {"message": message, "code": code}
        if errors:
            self.body["errors"] = errors


class PathPattern:
    """A path to match: literal (``/channels/123/messages``) or with ``{name}`` placeholders, each one segment
    (``/channels/{channel_id}/messages``); ``*`` matches anything, slashes included."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        regex = ""
        for piece in re.split(r"(\{\w+\}|\*)", pattern):
            if piece == "*":
                regex += ".*"
            elif piece.startswith("{") and piece.endswith("}"):
                regex += f"(?P<{piece[1:-1]}>[^/]+)"
            else:
                regex += re.escape(piece)
        self._regex = re.compile(regex)

    def match(self, path: str) -> dict[str, str] | None:
        found = self._regex.fullmatch(path)
        return None if found is None else found.groupdict()

    def __repr__(self) -> str:
        return f"PathPattern({self.pattern!r})"


@dataclass(eq=False)
class RecordedRequest:
    """One REST call as the fake received it. ``path`` is without the ``/api/v10`` prefix and percent-decoded;
    ``route`` is the template it matched (None: the fake has no such route, and answered 404); ``json`` is the
    JSON body, or a multipart body's ``payload_json``; ``bot`` is the caller (from its token, or for interaction
    and webhook-token routes, the bot the interaction went to). ``at`` is when it came (the rate limits' clock);
    ``bucket`` the rate-limit bucket it counted against (``messages:<channel id>``, ``global``) or None;
    ``retry_after`` and ``scope`` ("user", "global") are set when the fake answered it 429 for its limits."""

    method: str
    path: str
    route: str | None
    bot: FakeBot | None
    json: Any
    query: dict[str, str]
    files: list[str] = field(default_factory=list)
    status: int = 0
    response: Any = None
    injected: bool = False  # answered by a fail_next rule
    at: float = 0.0
    bucket: str | None = None
    retry_after: float | None = None
    scope: str | None = None

    def __repr__(self) -> str:
        who = self.bot.name if self.bot is not None else "-"
        return f"<{self.method} {self.path} by {who} -> {self.status}>"


@dataclass(eq=False)
class FailureRule:
    """Made by ``FakeDiscord.fail_next``: the next ``times`` matching calls get ``status`` and ``body``."""

    method: str
    path: PathPattern
    status: int
    body: dict[str, Any]
    headers: dict[str, str]
    remaining: int
    bot: FakeBot | None = None
    hits: list[RecordedRequest] = field(default_factory=list)

    def matches(self, method: str, path: str, bot: FakeBot | None) -> bool:
        return (
            self.remaining > 0
            and self.method == method.upper()
            and self.path.match(path) is not None
            and (self.bot is None or self.bot is bot)
        )

    @property
    def used(self) -> int:
        return len(self.hits)


class InteractionNotAnswered(AssertionError):
    """The bot did not answer an interaction within the time allowed ("The application did not respond")."""


@dataclass(eq=False)
class InteractionResult:
    """What a bot answered to one interaction, kept up to date as it edits its response or sends followups.

    ``callback_type`` is the interaction callback type (4 message, 5 deferred "thinking", 6/7 component
    updates, 8 autocomplete choices, 9 modal); ``callback`` is the callback's ``data``; ``message`` is the
    response message (for 4/5; ephemeral ones included, though they never reach the channel);
    ``followups`` are the followup messages, in order."""

    id: int
    token: str
    kind: int  # 2 application command, 4 autocomplete
    bot: FakeBot
    user: FakeUser
    channel: FakeChannel
    command: str
    payload: dict[str, Any]  # the INTERACTION_CREATE data the bot received
    callback_type: int | None = None
    callback: dict[str, Any] | None = None
    message: FakeMessage | None = None
    followups: list[FakeMessage] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def answered(self) -> bool:
        return self.callback_type is not None

    @property
    def content(self) -> str | None:
        """The response message's content now (after edits); None without a response message."""
        return None if self.message is None else self.message.content

    @property
    def ephemeral(self) -> bool:
        return self.message is not None and self.message.ephemeral

    @property
    def thinking(self) -> bool:
        """Deferred, and neither edited nor followed up yet."""
        return self.message is not None and bool(self.message.flags & self.message.LOADING)

    @property
    def embeds(self) -> list[dict[str, Any]]:
        return [] if self.message is None else self.message.embeds

    @property
    def choices(self) -> list[dict[str, Any]]:
        """An autocomplete answer's choices."""
        return list((self.callback or {}).get("choices") or [])

    @property
    def texts(self) -> list[str]:
        """Everything the bot said to the invoker: the response, then the followups."""
        said = [] if self.message is None or self.thinking else [self.message.content]
        return said + [message.content for message in self.followups]

    def changed(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def settled(self, within: float = PATIENCE_S) -> Self:
        """Wait until a deferred response has been completed (edited, or followed up)."""
        async with asyncio.timeout(within):
            while self.thinking or not self.answered:
                await self._changed.wait()
        return self

    async def wait_for(self, count: int, within: float = PATIENCE_S) -> Self:
        """Wait until the bot has said ``count`` things (response included, see ``texts``)."""
        async with asyncio.timeout(within):
            while len(self.texts) < count:
                await self._changed.wait()
        return self
