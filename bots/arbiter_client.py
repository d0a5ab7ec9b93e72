"""A typed client of the arbiter's HTTP API, speaking ``arbiter.contract``'s wire models.

One ``aiohttp.ClientSession`` (created by the caller, passed in) per process; each persona has its own token.
With several arbiter processes (on one PostgreSQL database) each channel's calls go to one of them, chosen by the
channel (``bots.affinity``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import urlencode

import aiohttp
from pydantic import BaseModel, ValidationError

from arbiter import contract as wire
from bots.affinity import Affinity, parse_arbiter_urls
from bots.errors import ArbiterRejected, ArbiterUnavailable

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

__all__ = ("ArbiterClient", "CallCarrier", "MultiplexedStream")

_log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

# Seconds to open a connection to an arbiter process (on a working network, milliseconds).
CONNECT_TIMEOUT_S = 3.0

# A request that fails with one of these was never sent (no connection was made): it may go to another process.
_CONNECT_ERRORS = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


class CallCarrier(Protocol):
    """What carries a persona's channel calls instead of HTTP (the process's multiplexed stream:
    ``bots.follower.StreamFollower``)."""

    def carries(self, token: str, base: str) -> bool:
        """Whether a call of the persona whose token this is, to the arbiter process at ``base``, can go on it."""
        ...

    async def call(
        self, persona_id: str, method: str, path: str, body: str | None, *, within: float
    ) -> tuple[int, str] | None:
        """The answer's status and body; None when the call was not sent (send it over HTTP then). Raises
        ArbiterUnavailable when it was sent and no answer came (as an HTTP request that timed out)."""
        ...


class ArbiterClient:
    """The arbiter as one persona sees it."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str | Sequence[str],
        token: str,
        *,
        timeout_s: float = 10.0,
        own_process: int | None = None,
    ) -> None:
        """``base_url``: the arbiter's URL, or several arbiter processes' (a list, or one string of them separated
        by commas, as ``AIZUCHI_ARBITER_URL`` gives them): each channel's calls then go to one of them
        (``bots.affinity``), to the next when it cannot be reached. ``own_process``: the index of the one that
        takes the calls of no channel (the multiplexed stream, the registration); by default one at random, so a
        fleet's streams spread over the processes."""
        urls = parse_arbiter_urls(base_url) if isinstance(base_url, str) else tuple(u.rstrip("/") for u in base_url)
        own = random.randrange(len(urls)) if own_process is None and urls else (own_process or 0)
        self._affinity = Affinity(urls, own=own)
        self._session = session
        self._token = token
        self._headers = {"Authorization": f"Bearer {token}"}
        # A connection that is not made within a few seconds fails as a connect timeout, which moves on to the next
        # arbiter process: a host cut off without a word (a partition drops the SYN, nothing refuses it) would
        # otherwise hold every call for the whole timeout and then fail it, never trying the others.
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s, CONNECT_TIMEOUT_S))
        self._carrier: CallCarrier | None = None
        self._persona: str | None = None

    @property
    def token(self) -> str:
        return self._token

    def carry_calls_on(self, carrier: CallCarrier, persona_id: str) -> None:
        """Send the persona's (``persona_id``: whose token this client holds) channel calls on ``carrier`` while it
        can carry them; over HTTP otherwise. One frame each way instead of a request and its answer."""
        self._carrier, self._persona = carrier, persona_id

    @property
    def urls(self) -> tuple[str, ...]:
        return self._affinity.urls

    def _path(self, channel_id: str, path: str = "") -> str:
        return f"/v1/channels/{channel_id}{path}"

    async def _call(
        self,
        method: str,
        channel_id: str | None,
        path: str,
        model: type[M] | None,
        body: BaseModel | None = None,
        **params: Any,
    ) -> M | None:
        """One request, to the channel's arbiter process (or this client's own, for ``channel_id`` None); to the
        next when one cannot be connected to. Only a refused or timed-out connection moves on: the request was
        not sent, so sending it elsewhere cannot do it twice."""
        data = None if body is None else body.model_dump_json(exclude_none=True)
        carried = None
        if channel_id is not None and self._carrier is not None:
            carried = await self._carried(method, channel_id, path, data, params)
        if carried is not None:
            status, text = carried
            url = f"{path} (on the stream)"
            return _answer(method, url, status, text, model)
        headers = self._headers if data is None else {**self._headers, "Content-Type": "application/json"}
        unreachable: list[str] = []
        for base in self._affinity.order(channel_id):
            url = base + path
            try:
                async with self._session.request(
                    method, url, data=data, headers=headers, params=params or None, timeout=self._timeout
                ) as response:
                    raw = await response.read()
                    status = response.status
            except _CONNECT_ERRORS as error:
                self._affinity.unreachable(base)
                unreachable.append(f"{method} {url}: {type(error).__name__}: {error}")
                continue
            except (aiohttp.ClientError, TimeoutError) as error:
                raise ArbiterUnavailable(f"{method} {url}: {type(error).__name__}: {error}") from error
            if unreachable:
                self._affinity.reachable(base)
                _log.info("%s; sent to %s instead", unreachable[-1], base)
            break
        else:
            raise ArbiterUnavailable("; ".join(unreachable))
        return _answer(method, url, status, raw, model)

    async def _carried(
        self, method: str, channel_id: str, path: str, data: str | None, params: dict[str, Any]
    ) -> tuple[int, str] | None:
        """The call sent on the carrier, if it carries calls to the channel's arbiter process now; None if not."""
        assert self._carrier is not None and self._persona is not None
        home = self._affinity.order(channel_id)[0]
        if not self._carrier.carries(self._token, home):
            return None
        if params:
            path = f"{path}?{urlencode(params)}"
        assert self._timeout.total is not None
        return await self._carrier.call(self._persona, method, path, data, within=self._timeout.total)

    async def _expect(
        self,
        method: str,
        channel_id: str | None,
        path: str,
        model: type[M],
        body: BaseModel | None = None,
        **params: Any,
    ) -> M:
        result = await self._call(method, channel_id, path, model, body, **params)
        assert result is not None
        return result

    async def _channel(
        self, method: str, channel_id: str, path: str, model: type[M], body: BaseModel | None = None, **params: Any
    ) -> M:
        """A call on one channel (``path`` under ``/v1/channels/<id>``), to the channel's arbiter process."""
        return await self._expect(method, channel_id, self._path(channel_id, path), model, body, **params)

    async def _connect(
        self, channel_id: str | None, path: str, what: str, **options: Any
    ) -> tuple[aiohttp.ClientWebSocketResponse, str]:
        """A WebSocket to the channel's arbiter process (or this client's own, for None); to the next when one
        cannot be connected to, as for a call."""
        unreachable: list[str] = []
        for base in self._affinity.order(channel_id):
            try:
                # The handshake gets the same time limit as any call; once open, heartbeats notice a dead stream.
                async with asyncio.timeout(self._timeout.total):
                    socket: aiohttp.ClientWebSocketResponse = await self._session.ws_connect(
                        base + path, headers=self._headers, heartbeat=30, **options
                    )
            except aiohttp.WSServerHandshakeError as error:
                if 400 <= error.status < 500:
                    raise ArbiterRejected(error.status, "stream_refused", error.message) from error
                raise ArbiterUnavailable(f"{what}: HTTP {error.status}") from error
            except _CONNECT_ERRORS as error:
                self._affinity.unreachable(base)
                where = what if len(self.urls) == 1 else f"{what} at {base}"
                unreachable.append(f"{where}: {type(error).__name__}: {error}")
                continue
            except (aiohttp.ClientError, TimeoutError) as error:
                raise ArbiterUnavailable(f"{what}: {type(error).__name__}: {error}") from error
            if unreachable:
                self._affinity.reachable(base)
                _log.info("%s; connected to %s instead", unreachable[-1], base)
            return socket, base
        raise ArbiterUnavailable("; ".join(unreachable))

    # --- the persona's calls ---------------------------------------------------------------------------

    async def status(self, channel_id: str) -> wire.StatusView:
        return await self._channel("GET", channel_id, "/status", wire.StatusView)

    async def history(self, channel_id: str, *, after: int = 0, limit: int = 50) -> wire.HistoryPage:
        return await self._channel("GET", channel_id, "/history", wire.HistoryPage, after=after, limit=limit)

    async def claim(self, channel_id: str, request: wire.ClaimRequest) -> wire.ClaimResult:
        return await self._channel("POST", channel_id, "/claims", wire.ClaimResult, request)

    async def speak(self, channel_id: str, claim_id: str, request: wire.SpeakRequest) -> wire.SpeakResult:
        return await self._channel("POST", channel_id, f"/claims/{claim_id}/speak", wire.SpeakResult, request)

    async def release(
        self, channel_id: str, claim_id: str, memory: wire.MemoryUpdate | None = None
    ) -> wire.ReleaseResult:
        body = None if memory is None else wire.ReleaseRequest(memory=memory)
        return await self._channel("DELETE", channel_id, f"/claims/{claim_id}", wire.ReleaseResult, body)

    async def memory(self, channel_id: str) -> wire.MemoryUpdate | None:
        """The persona's own dialogue state here, as the arbiter keeps it (None before it has one)."""
        found = await self._channel("GET", channel_id, "/memory", wire.MemoryList)
        return next((wire.MemoryUpdate(seq=m.seq, state=m.state) for m in found.memories), None)

    async def consume(self, channel_id: str, request: wire.ConsumeRequest) -> wire.SpeakResult:
        return await self._channel("POST", channel_id, "/consume", wire.SpeakResult, request)

    async def report_usage(self, channel_id: str, report: wire.UsageReport) -> wire.UsageResult:
        return await self._channel("POST", channel_id, "/usage", wire.UsageResult, report)

    async def stand(self, channel_id: str, cannot_post: str | None) -> wire.PersonaView:
        """Tell the arbiter whether the persona can post in the channel (``cannot_post``: why not, or None)."""
        body = wire.StandingReport(cannot_post=cannot_post)
        return await self._channel("PUT", channel_id, "/standing", wire.PersonaView, body)

    async def retract(self, channel_id: str, seq: int) -> wire.RetractResult:
        return await self._channel("POST", channel_id, f"/messages/{seq}/retract", wire.RetractResult)

    async def link(self, channel_id: str, seq: int, platform_message_id: str) -> wire.MessageView:
        body = wire.LinkRequest(platform_message_id=platform_message_id)
        return await self._channel("PUT", channel_id, f"/messages/{seq}/platform-id", wire.MessageView, body)

    async def channels(self) -> wire.ChannelList:
        return await self._expect("GET", None, "/v1/channels", wire.ChannelList)

    async def register(self, persona_id: str, registration: wire.PersonaRegistration) -> None:
        await self._call("PUT", None, f"/v1/personas/{persona_id}", None, registration)

    async def events(self, channel_id: str, *, after: int | None = None) -> AsyncIterator[wire.ArbiterEvent]:
        """The channel's event stream, from ``after`` (replayed from the history) onward, each frame as its model.
        Ends when the connection does (the arbiter drops a reader that fell behind); the caller reconnects with
        the last seq it saw, so nothing is missed. A frame of a kind this version does not know is skipped."""
        params = {} if after is None else {"after": str(after)}
        what = f"event stream of {channel_id}"
        socket, _ = await self._connect(channel_id, self._path(channel_id, "/events"), what, params=params)
        try:
            async with socket:
                while True:
                    frame = await socket.receive()
                    if frame.type is aiohttp.WSMsgType.TEXT:
                        event = _event(channel_id, frame.data)
                        if event is not None:
                            yield event
                    elif frame.type is aiohttp.WSMsgType.CLOSE:
                        # Why the arbiter ended it, when it was not a plain goodbye: "fell behind; reconnect with
                        # ?after=41" (the caller resumes after its last seq, which is that one).
                        level = logging.DEBUG if frame.data == aiohttp.WSCloseCode.OK else logging.INFO
                        _log.log(
                            level,
                            "event stream of %s closed by the arbiter: %s %s",
                            channel_id,
                            frame.data,
                            frame.extra,
                        )
                        return
                    elif frame.type in (aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                        return
        except (aiohttp.ClientError, TimeoutError) as error:
            raise ArbiterUnavailable(f"{what}: {type(error).__name__}: {error}") from error

    @contextlib.asynccontextmanager
    async def stream(self) -> AsyncIterator[MultiplexedStream]:
        """The multiplexed event stream (GET /v1/events): one connection for every channel the persona (and the
        personas whose tokens a command adds) follows, on which each asks for its status. Send commands on it,
        then iterate its frames. With several arbiter processes it goes to this client's own (any process streams
        any channel: events cross between them through the database)."""
        socket, base = await self._connect(None, "/v1/events", "multiplexed stream", max_msg_size=0)
        async with socket:
            try:
                yield MultiplexedStream(socket, base)
            except (aiohttp.ClientError, ConnectionResetError) as error:
                raise ArbiterUnavailable(f"multiplexed stream: {type(error).__name__}: {error}") from error


# The close codes with which the arbiter refuses a command (a malformed one, a token it does not know, a status of a
# persona the stream does not act for): connecting again and sending the same would be refused again.
_REFUSED = {4400: "bad_command", 4401: "unauthorized", 4403: "forbidden"}


class MultiplexedStream:
    """An open multiplexed event stream (``ArbiterClient.stream``): send commands (channels to follow, statuses to
    send), iterate the frames."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse, base: str) -> None:
        self._socket = socket
        self.base = base  # the arbiter process it is connected to
        self.skipped = 0  # channels' events dropped unparsed (``frames``)

    async def subscribe(self, subscriptions: Sequence[wire.Subscribe]) -> None:
        await self.command(wire.StreamCommand(subscribe=list(subscriptions)))

    async def unsubscribe(self, channel_ids: Sequence[str]) -> None:
        await self.command(wire.StreamCommand(unsubscribe=list(channel_ids)))

    async def command(self, command: wire.StreamCommand) -> None:
        try:
            await self._socket.send_str(command.model_dump_json(exclude_defaults=True))
        except (aiohttp.ClientError, ConnectionResetError) as error:
            raise ArbiterUnavailable(f"multiplexed stream: {type(error).__name__}: {error}") from error

    def __aiter__(self) -> AsyncIterator[wire.StreamFrame]:
        return self.frames()

    async def frames(self, follows: Callable[[str], bool] | None = None) -> AsyncIterator[wire.StreamFrame]:
        """Every frame, as its model, until the connection ends (a frame of a kind this version does not know, or
        a malformed one, is skipped as on a channel's stream). Raises ArbiterRejected when the arbiter closes it
        refusing a command. ``follows``: whether a channel's events are wanted; the events of one that is not (left
        a moment ago, its unsubscribing not yet arrived) are dropped unparsed (``skipped`` counts them)."""
        while True:
            frame = await self._socket.receive()
            if frame.type is aiohttp.WSMsgType.TEXT:
                if follows is not None and not _wanted(frame.data, follows):
                    self.skipped += 1
                    continue
                event = _frame(frame.data)
                if event is not None:
                    yield event
            elif frame.type is aiohttp.WSMsgType.CLOSE:
                if frame.data in _REFUSED:
                    raise ArbiterRejected(frame.data, _REFUSED[frame.data], frame.extra or "command refused")
                level = logging.DEBUG if frame.data == aiohttp.WSCloseCode.OK else logging.WARNING
                _log.log(level, "the multiplexed stream was closed by the arbiter: %s %s", frame.data, frame.extra)
                return
            elif frame.type in (aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                return


# How the arbiter writes a channel's event (its wire model's first two fields, as pydantic dumps them): enough to
# tell whose frame it is without parsing the rest. A frame written otherwise is parsed whole.
_HEAD = re.compile(r'\{"type":"([a-z_]+)","channel_id":"([^"\\]*)"')
# The stream's own frames: answers to what was asked, wanted whatever the channel.
_ANSWERS = frozenset({"status", "ended", "reply"})


def _wanted(raw: str, follows: Callable[[str], bool]) -> bool:
    """Whether a frame is worth parsing: not a channel's event for a channel not followed. Parsing every frame
    with pydantic was the largest cost of a frame to a process whose personas do not follow its channel."""
    head = _HEAD.match(raw)
    return head is None or head.group(1) in _ANSWERS or follows(head.group(2))


def _frame(raw: str) -> wire.StreamFrame | None:
    try:
        return wire.parse_stream_frame(raw)
    except ValidationError as error:
        if any(detail["type"] == "union_tag_invalid" for detail in error.errors()):
            _log.debug("multiplexed stream: skipping a frame of an unknown kind")
        else:
            _log.warning("multiplexed stream: skipping a malformed frame: %s", error)
        return None


def _event(channel_id: str, raw: str) -> wire.ArbiterEvent | None:
    """A frame as its event model; None for one to skip. A kind this version does not know is a newer arbiter's:
    skipped quietly. A frame that is not what the contract says is skipped with a warning, rather than ending the
    stream: reconnecting would replay the same frame."""
    try:
        return wire.parse_event(raw)
    except ValidationError as error:
        if any(detail["type"] == "union_tag_invalid" for detail in error.errors()):
            _log.debug("event stream of %s: skipping an event of an unknown kind", channel_id)
        else:
            _log.warning("event stream of %s: skipping a malformed event: %s", channel_id, error)
        return None


def _reason(raw: bytes | str) -> str:
    """What an error's body says (its code and message), to follow its status: a 503 that names the database
    tells the owner where to look."""
    try:
        error = wire.ErrorBody.model_validate_json(raw).error
    except ValidationError:
        return ""
    return f" {error.code}: {error.message}"


def _answer(method: str, url: str, status: int, raw: bytes | str, model: type[M] | None) -> M | None:
    """An answer (over HTTP or on the stream) as its model; the error it says, raised."""
    if status >= 500:
        raise ArbiterUnavailable(f"{method} {url}: HTTP {status}{_reason(raw)}")
    if status >= 400:
        raise _rejected(status, raw)
    if model is None or status == 204:
        return None
    try:
        return model.model_validate_json(raw, context=wire.FROM_THE_ARBITER)
    except ValidationError as error:
        raise ArbiterUnavailable(f"{method} {url}: unexpected answer: {error}") from error


def _rejected(status: int, raw: bytes | str) -> ArbiterRejected:
    try:
        error = wire.ErrorBody.model_validate_json(raw).error
    except ValidationError:
        text = raw if isinstance(raw, str) else raw.decode(errors="replace")
        return ArbiterRejected(status, "http_error", text[:200])
    return ArbiterRejected(status, error.code, error.message, error.field)
