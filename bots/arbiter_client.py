"""A typed client of the arbiter's HTTP API, speaking ``arbiter.contract``'s wire models.

One ``aiohttp.ClientSession`` (created by the caller, passed in) per process; each persona has its own token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
from pydantic import BaseModel, ValidationError

from arbiter import contract as wire
from bots.errors import ArbiterRejected, ArbiterUnavailable
from bots.frames import FrameCache

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

__all__ = ("ArbiterClient", "MultiplexedStream")

_log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


class ArbiterClient:
    """The arbiter as one persona sees it."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 10.0,
        frames: FrameCache | None = None,
    ) -> None:
        """``frames``: the process's cache of parsed stream frames, shared by its personas' clients."""
        self._session = session
        self._frames = frames or FrameCache()
        self._base = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    def _url(self, channel_id: str, path: str = "") -> str:
        return f"{self._base}/v1/channels/{channel_id}{path}"

    async def _call(
        self, method: str, url: str, model: type[M] | None, body: BaseModel | None = None, **params: Any
    ) -> M | None:
        data = None if body is None else body.model_dump_json(exclude_none=True)
        headers = self._headers if data is None else {**self._headers, "Content-Type": "application/json"}
        try:
            async with self._session.request(
                method, url, data=data, headers=headers, params=params or None, timeout=self._timeout
            ) as response:
                raw = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as error:
            raise ArbiterUnavailable(f"{method} {url}: {type(error).__name__}: {error}") from error
        if status >= 500:
            raise ArbiterUnavailable(f"{method} {url}: HTTP {status}")
        if status >= 400:
            raise _rejected(status, raw)
        if model is None or status == 204:
            return None
        try:
            return model.model_validate_json(raw)
        except ValidationError as error:
            raise ArbiterUnavailable(f"{method} {url}: unexpected answer: {error}") from error

    async def _expect(self, method: str, url: str, model: type[M], body: BaseModel | None = None, **params: Any) -> M:
        result = await self._call(method, url, model, body, **params)
        assert result is not None
        return result

    # --- the persona's calls ---------------------------------------------------------------------------

    async def status(self, channel_id: str) -> wire.StatusView:
        return await self._expect("GET", self._url(channel_id, "/status"), wire.StatusView)

    async def history(self, channel_id: str, *, after: int = 0, limit: int = 50) -> wire.HistoryPage:
        return await self._expect("GET", self._url(channel_id, "/history"), wire.HistoryPage, after=after, limit=limit)

    async def claim(self, channel_id: str, request: wire.ClaimRequest) -> wire.ClaimResult:
        return await self._expect("POST", self._url(channel_id, "/claims"), wire.ClaimResult, request)

    async def speak(self, channel_id: str, claim_id: str, request: wire.SpeakRequest) -> wire.SpeakResult:
        return await self._expect("POST", self._url(channel_id, f"/claims/{claim_id}/speak"), wire.SpeakResult, request)

    async def release(
        self, channel_id: str, claim_id: str, memory: wire.MemoryUpdate | None = None
    ) -> wire.ReleaseResult:
        body = None if memory is None else wire.ReleaseRequest(memory=memory)
        return await self._expect("DELETE", self._url(channel_id, f"/claims/{claim_id}"), wire.ReleaseResult, body)

    async def memory(self, channel_id: str) -> wire.MemoryUpdate | None:
        """The persona's own dialogue state here, as the arbiter keeps it (None before it has one)."""
        found = await self._expect("GET", self._url(channel_id, "/memory"), wire.MemoryList)
        return next((wire.MemoryUpdate(seq=m.seq, state=m.state) for m in found.memories), None)

    async def consume(self, channel_id: str, request: wire.ConsumeRequest) -> wire.SpeakResult:
        return await self._expect("POST", self._url(channel_id, "/consume"), wire.SpeakResult, request)

    async def report_usage(self, channel_id: str, report: wire.UsageReport) -> wire.UsageResult:
        return await self._expect("POST", self._url(channel_id, "/usage"), wire.UsageResult, report)

    async def retract(self, channel_id: str, seq: int) -> wire.RetractResult:
        return await self._expect("POST", self._url(channel_id, f"/messages/{seq}/retract"), wire.RetractResult)

    async def link(self, channel_id: str, seq: int, platform_message_id: str) -> wire.MessageView:
        body = wire.LinkRequest(platform_message_id=platform_message_id)
        return await self._expect("PUT", self._url(channel_id, f"/messages/{seq}/platform-id"), wire.MessageView, body)

    async def channels(self) -> wire.ChannelList:
        return await self._expect("GET", f"{self._base}/v1/channels", wire.ChannelList)

    async def register(self, persona_id: str, registration: wire.PersonaRegistration) -> None:
        await self._call("PUT", f"{self._base}/v1/personas/{persona_id}", None, registration)

    async def events(self, channel_id: str, *, after: int | None = None) -> AsyncIterator[wire.ArbiterEvent]:
        """The channel's event stream, from ``after`` (replayed from the history) onward, each frame as its model.
        Ends when the connection does (the arbiter drops a reader that fell behind); the caller reconnects with
        the last seq it saw, so nothing is missed. A frame of a kind this version does not know is skipped."""
        params = {} if after is None else {"after": str(after)}
        try:
            # The handshake gets the same time limit as any call; once open, heartbeats notice a dead stream.
            async with asyncio.timeout(self._timeout.total):
                socket = await self._session.ws_connect(
                    self._url(channel_id, "/events"), headers=self._headers, params=params, heartbeat=30
                )
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
        except aiohttp.WSServerHandshakeError as error:
            if 400 <= error.status < 500:
                raise ArbiterRejected(error.status, "stream_refused", error.message) from error
            raise ArbiterUnavailable(f"event stream of {channel_id}: HTTP {error.status}") from error
        except (aiohttp.ClientError, TimeoutError) as error:
            raise ArbiterUnavailable(f"event stream of {channel_id}: {type(error).__name__}: {error}") from error

    @contextlib.asynccontextmanager
    async def stream(self) -> AsyncIterator[MultiplexedStream]:
        """The multiplexed event stream (GET /v1/events): one connection for every channel the persona follows,
        with its status of each pushed after changes. Subscribe to channels on it, then iterate its frames."""
        try:
            async with asyncio.timeout(self._timeout.total):
                socket = await self._session.ws_connect(
                    f"{self._base}/v1/events", headers=self._headers, heartbeat=30, max_msg_size=0
                )
        except aiohttp.WSServerHandshakeError as error:
            if 400 <= error.status < 500:
                raise ArbiterRejected(error.status, "stream_refused", error.message) from error
            raise ArbiterUnavailable(f"multiplexed stream: HTTP {error.status}") from error
        except (aiohttp.ClientError, TimeoutError) as error:
            raise ArbiterUnavailable(f"multiplexed stream: {type(error).__name__}: {error}") from error
        async with socket:
            try:
                yield MultiplexedStream(socket, self._frames)
            except (aiohttp.ClientError, ConnectionResetError) as error:
                raise ArbiterUnavailable(f"multiplexed stream: {type(error).__name__}: {error}") from error


class MultiplexedStream:
    """An open multiplexed event stream (``ArbiterClient.stream``): ``subscribe`` channels, iterate the frames."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse, frames: FrameCache) -> None:
        self._socket = socket
        self._frames = frames

    async def subscribe(self, subscriptions: Sequence[wire.Subscribe]) -> None:
        await self._command(wire.StreamCommand(subscribe=list(subscriptions)))

    async def unsubscribe(self, channel_ids: Sequence[str]) -> None:
        await self._command(wire.StreamCommand(unsubscribe=list(channel_ids)))

    async def _command(self, command: wire.StreamCommand) -> None:
        try:
            await self._socket.send_str(command.model_dump_json(exclude_defaults=True))
        except (aiohttp.ClientError, ConnectionResetError) as error:
            raise ArbiterUnavailable(f"multiplexed stream: {type(error).__name__}: {error}") from error

    async def __aiter__(self) -> AsyncIterator[wire.StreamFrame]:
        """Every frame, as its model, until the connection ends (a frame of a kind this version does not know, or
        a malformed one, is skipped as on a channel's stream)."""
        while True:
            frame = await self._socket.receive()
            if frame.type is aiohttp.WSMsgType.TEXT:
                event = self._frame(frame.data)
                if event is not None:
                    yield event
            elif frame.type is aiohttp.WSMsgType.CLOSE:
                level = logging.DEBUG if frame.data == aiohttp.WSCloseCode.OK else logging.WARNING
                _log.log(level, "the multiplexed stream was closed by the arbiter: %s %s", frame.data, frame.extra)
                return
            elif frame.type in (aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                return

    def _frame(self, raw: str) -> wire.StreamFrame | None:
        try:
            return self._frames.parse(raw)
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


def _rejected(status: int, raw: bytes) -> ArbiterRejected:
    try:
        error = wire.ErrorBody.model_validate_json(raw).error
    except ValidationError:
        return ArbiterRejected(status, "http_error", raw[:200].decode(errors="replace"))
    return ArbiterRejected(status, error.code, error.message, error.field)
