"""Persona runtimes against a live arbiter, for the runtime tests.

The arbiter runs in process (SQLite, the real clock) and is served on a real localhost port; every persona
reaches it over HTTP through its own ``ArbiterClient`` on one shared ``aiohttp.ClientSession``, and posts to
an in-memory room. Humans speak through ``ArbiterService.record_message``, as the Discord arbiter bot does.

Nothing here replaces our code: ``RecordingProvider`` wraps a real provider (it counts, records, and can
hold a call at a gate so a test can act while a persona is generating); ``RequestLog`` watches the session's
real requests through aiohttp's tracing hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

import aiohttp
from aiohttp.test_utils import TestServer

from arbiter.contract import AuthorKind
from arbiter.server import open_arbiter
from bots.arbiter_client import ArbiterClient
from bots.llm.base import ChatProvider
from bots.persona import BigFive, Persona, Samples
from bots.platforms.memory import MemoryRoom
from bots.runtime import PersonaRuntime, RuntimeConfig, personas_stream
from tests.conftest import make_settings
from tests.support.eventually import PATIENCE_S, eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence

    from arbiter.contract import MessageView, StatusView
    from arbiter.server import Arbiter
    from bots.follower import StreamFollower
    from bots.llm.base import Completion, CompletionRequest, DecisionRequest, DecisionResult
    from bots.llm.pricing import ModelPrice
    from bots.mcp_host import ToolHost
    from bots.runtime import ChannelWorker

__all__ = (
    "FAST",
    "FLEET_TOKENS",
    "Live",
    "RecordingProvider",
    "RequestLog",
    "live_arbiter",
    "make_persona",
    "mentions_in",
)

# Personas the runtime tests use (besides tests.conftest's hana, kai and mio); "probe" is the test's own hand.
FLEET_TOKENS = {name: f"{name}-token-0123456789abcdef" for name in ("aoi", "ben", "cho", "probe")}

# Waits and back-offs a hundred times shorter than in production, so a turn takes milliseconds.
FAST = RuntimeConfig(base_delay_s=0.04, backoff_s=0.2, max_backoff_s=1.0, reconnect_s=0.05)

# Channel settings for tests: refunds in a fraction of a second, claims that outlast any generation here.
CHANNEL_DEFAULTS: dict[str, Any] = {
    "tiers": {tier: {"recovery_s": 0.15} for tier in ("aizuchi", "remark", "long")},
    "claim_ttl_s": 10.0,
    "priority_window_s": 5.0,
}


def mentions_in(text: str) -> bool:
    """Anything Discord would turn into a ping, checked independently of bots.language.text."""
    return any(marker in text for marker in ("<@", "@everyone", "@here"))


def make_persona(
    persona_id: str,
    *,
    name: str | None = None,
    language: str = "en",
    talkativeness: float = 0.8,
    openness: float = 0.0,
    extraversion: float = 0.8,
    agreeableness: float = 0.0,
    aizuchi: Sequence[str] = ("Right.", "I see.", "Mm-hm.", "Oh, nice.", "Fair.", "Huh."),
    remarks: Sequence[str] = (
        "I would rather walk there than take the bus.",
        "Honestly, the second one sounds more fun to me.",
        "That depends on how much time we have left.",
        "Let us try it next weekend and see what happens.",
        "My sister did exactly that and never regretted it.",
        "I am not convinced, but tell me more about it.",
    ),
) -> Persona:
    """A persona for the runtime tests. By default it never nods when it wanted to speak and never picks a long
    remark when addressed (openness 0, agreeableness 0), so an addressed persona always claims a remark."""
    return Persona(
        id=persona_id,
        display_name=name or persona_id.title(),
        language=cast("Literal['en', 'ja']", language),
        personality="Curious and direct.",
        background="Lives in the test suite.",
        speaking_style="Short plain sentences.",
        big_five=BigFive(
            openness=openness,
            conscientiousness=0.5,
            extraversion=extraversion,
            agreeableness=agreeableness,
            neuroticism=0.5,
        ),
        talkativeness=talkativeness,
        samples=Samples(aizuchi=list(aizuchi), remarks=list(remarks)),
    )


class RecordingProvider(ChatProvider):
    """A real provider, counted and recorded. ``hold()`` makes the next calls wait until ``open()``;
    ``fail_next(error)`` raises ``error`` on a coming call instead of asking the provider."""

    def __init__(self, inner: ChatProvider) -> None:
        self.inner = inner
        self.name = f"recording/{inner.name}"
        self.decisions: list[DecisionRequest] = []
        self.completions: list[CompletionRequest] = []
        self.answers: list[DecisionResult | Completion | BaseException] = []
        self.waiting = 0  # calls held at the gate right now
        self._gate = asyncio.Event()
        self._gate.set()
        self._failures: deque[BaseException] = deque()

    @property
    def price(self) -> ModelPrice | None:
        return self.inner.price

    @property
    def calls(self) -> int:
        return len(self.decisions) + len(self.completions)

    def hold(self) -> None:
        self._gate.clear()

    def open(self) -> None:
        self._gate.set()

    def fail_next(self, error: BaseException) -> None:
        self._failures.append(error)

    async def _enter(self) -> None:
        self.waiting += 1
        try:
            await self._gate.wait()
        finally:
            self.waiting -= 1
        if self._failures:
            failure = self._failures.popleft()
            self.answers.append(failure)
            raise failure

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        self.decisions.append(request)
        await self._enter()
        try:
            result = await self.inner.decide(request)
        except Exception as error:
            self.answers.append(error)
            raise
        self.answers.append(result)
        return result

    async def complete(self, request: CompletionRequest) -> Completion:
        self.completions.append(request)
        await self._enter()
        try:
            completion = await self.inner.complete(request)
        except Exception as error:
            self.answers.append(error)
            raise
        self.answers.append(completion)
        return completion

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class RequestLog:
    """Every request a persona made to the arbiter, in order: (persona, method, path after the channel). A test may
    also ``hold`` the requests of a kind before they are sent, to act while one is on its way."""

    tokens: Mapping[str, str]  # persona -> token
    entries: list[tuple[str, str, str]] = field(default_factory=list)
    _gates: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)

    def hold(self, method: str, kind: str) -> asyncio.Event:
        """Requests of ``kind`` (as ``of`` names them: "claims", "claims/speak"...) by ``method`` wait, once logged,
        until the returned event is set."""
        gate = self._gates[(method, kind)] = asyncio.Event()
        return gate

    def trace_config(self) -> aiohttp.TraceConfig:
        by_token = {f"Bearer {token}": persona for persona, token in self.tokens.items()}
        config = aiohttp.TraceConfig()

        async def started(
            _session: aiohttp.ClientSession, _context: Any, params: aiohttp.TraceRequestStartParams
        ) -> None:
            who = by_token.get(params.headers.get("Authorization", ""), "?")
            await self.record(who, params.method, params.url.path)

        config.on_request_start.append(started)
        return config

    async def record(self, who: str, method: str, path: str) -> tuple[str, str, str]:
        """A request about to go out, over HTTP or on the stream (its entry); held here while its kind is."""
        path = path.partition("?")[0]
        # "/v1/channels/<id>/claims/<claim>/speak" -> "claims/speak": what was asked, not of which channel.
        if path.startswith("/v1/channels/"):
            parts = path.split("/")[4:]
            kind = "/".join(part for index, part in enumerate(parts) if index % 2 == 0) or "channel"
        else:
            kind = path
        entry = (who, method, kind)
        self.entries.append(entry)
        gate = self._gates.get((method, kind))
        if gate is not None:
            await gate.wait()
        return entry

    def of(self, persona: str) -> list[tuple[str, str]]:
        """(method, kind) of one persona's requests, e.g. ("GET", "status"), ("POST", "claims")."""
        return [(method, kind) for who, method, kind in self.entries if who == persona]


@dataclass(frozen=True)
class LoggedCalls:
    """The personas' stream carrying a persona's calls, each logged (and held) first as its HTTP request would be:
    the log tells what a persona asked, whichever way it went."""

    stream: StreamFollower
    log: RequestLog

    def carries(self, token: str, base: str) -> bool:
        return self.stream.carries(token, base)

    async def call(
        self, persona_id: str, method: str, path: str, body: str | None, *, within: float
    ) -> tuple[int, str] | None:
        entry = await self.log.record(persona_id, method, path)
        answer = await self.stream.call(persona_id, method, path, body, within=within)
        if answer is None:  # not sent: it goes over HTTP, and is logged there
            entries = self.log.entries
            del entries[len(entries) - 1 - entries[::-1].index(entry)]
        return answer


@dataclass
class Live:
    """A served arbiter with runtimes attached. ``service`` is the arbiter's own, for the test's hand."""

    arbiter: Arbiter
    session: aiohttp.ClientSession
    tokens: dict[str, str]
    log: RequestLog
    room: MemoryRoom = field(default_factory=MemoryRoom)
    runtimes: list[PersonaRuntime] = field(default_factory=list)
    # The personas' one event stream, as in a fleet: opened with the first one's token, acting for each one's after.
    stream: StreamFollower | None = None
    server: TestServer | None = None
    port: int = 0

    @property
    def service(self) -> Any:
        return self.arbiter.service

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self) -> None:
        """Start serving (again, on the same port after ``stop``: the personas' URL stays valid)."""
        self.server = TestServer(self.arbiter.app, host="127.0.0.1", port=self.port or None)
        # The shutdown timeout goes to start_server (TestServer's constructor drops it); it bounds a stop that
        # would otherwise wait up to a minute for open streams.
        await self.server.start_server(shutdown_timeout=0.2)
        self.port = self.server.port or 0

    async def stop(self) -> None:
        """Stop serving, as when the arbiter goes down: the event streams end, new connections are refused."""
        if self.server is not None:
            # End the streams first (the personas reconnect only after a pause, by then nothing listens).
            self.arbiter.hub.close_all()
            await self.server.close()
            self.server = None

    def client(self, persona_id: str) -> ArbiterClient:
        return ArbiterClient(self.session, self.url, self.tokens[persona_id], timeout_s=5.0)

    async def channel(self, channel_id: str, **changes: Any) -> None:
        """Create a channel with the fast test defaults, ``changes`` merged over them (tiers per tier)."""
        settings = {**CHANNEL_DEFAULTS, **changes}
        tiers = {tier: dict(values) for tier, values in CHANNEL_DEFAULTS["tiers"].items()}
        for tier, values in (changes.get("tiers") or {}).items():
            tiers.setdefault(tier, {}).update(values)
        settings["tiers"] = tiers
        await self.service.ensure_channel(channel_id, settings)

    async def say(
        self, channel_id: str, text: str, *, author: str = "yui", mentions: Iterable[str] = (), bot: bool = False
    ) -> int:
        """A human (or, with ``bot``, a foreign bot) speaks; returns the message's seq."""
        result = await self.service.record_message(
            channel_id,
            author_id=author,
            author_name=author.title(),
            text=text,
            author_kind=AuthorKind.BOT if bot else AuthorKind.HUMAN,
            mentions=tuple(mentions),
        )
        return int(result.seq)

    async def start(
        self,
        persona: Persona,
        provider: ChatProvider,
        channel_id: str,
        *,
        kind: type[PersonaRuntime] = PersonaRuntime,
        config: RuntimeConfig = FAST,
        seed: int = 0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        tools: ToolHost | None = None,
    ) -> PersonaRuntime:
        """A runtime for ``persona``, registered, in the channel and following its events (on the personas' one
        stream)."""
        client = self.client(persona.id)
        if self.stream is None:
            self.stream = personas_stream(client, name="live personas", config=config, sleep=sleep)
        else:
            self.stream.act_for(self.tokens[persona.id])
        runtime = kind(
            persona,
            provider,
            client,
            self.room.platform(persona.id),
            config=config,
            rng=random.Random(seed),
            sleep=sleep,
            tools=tools,
            follower=self.stream,
        )
        client.carry_calls_on(LoggedCalls(self.stream, self.log), persona.id)
        self.runtimes.append(runtime)
        await runtime.start()
        await asyncio.wait_for(runtime.join(channel_id).ready(), 5.0)
        return runtime

    async def status(self, channel_id: str, persona_id: str | None = None) -> StatusView:
        status: StatusView = await self.service.status(channel_id, persona_id)
        return status

    async def history(self, channel_id: str) -> list[MessageView]:
        page = await self.service.history(channel_id, after=0, limit=500)
        return list(page.messages)

    async def settled(self, channel_id: str, *, within: float = PATIENCE_S) -> None:
        """Wait until every runtime is idle (nothing under way or scheduled), has dealt with every message from
        others, and holds no claim: from then on nothing happens until someone speaks."""

        def caught_up(worker: ChannelWorker) -> bool:
            others = [m.seq for m in worker.window if m.author_id != worker.persona.id]
            return worker.idle and (not others or max(others) <= worker.answered)

        async def quiet() -> bool:
            workers = [runtime.join(channel_id) for runtime in self.runtimes]
            if not all(caught_up(w) for w in workers):
                return False
            return all(claim is None for claim in await self._claims(channel_id))

        await eventually(quiet, within=within, what="the channel settles")

    async def _claims(self, channel_id: str) -> list[Any]:
        return [(await self.status(channel_id, r.persona.id)).claim for r in self.runtimes]

    async def close(self) -> None:
        for runtime in self.runtimes:
            await runtime.close()
            await runtime.provider.aclose()
        if self.stream is not None:
            await self.stream.close()
        await self.stop()


@contextlib.asynccontextmanager
async def live_arbiter(
    database_url: str | None = None,
    *,
    extra_tokens: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
) -> AsyncIterator[Live]:
    """An arbiter served on a real port, a session for the personas; everything closed on exit. ``clock`` is the
    arbiter's (the personas wait on the event loop's clock whatever it is). ``database_url`` None: on the in-memory
    twin of the storage."""
    tokens = {**FLEET_TOKENS, **(extra_tokens or {})}
    log = RequestLog(tokens)
    async with (
        open_arbiter(
            make_settings(database_url), clock=clock, extra_personas=tokens, in_memory=database_url is None
        ) as arbiter,
        aiohttp.ClientSession(trace_configs=[log.trace_config()]) as session,
    ):
        live = Live(arbiter, session, tokens, log)
        await live.serve()
        try:
            yield live
        finally:
            await live.close()
