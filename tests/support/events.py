"""Reading the arbiter's WebSocket event stream in tests, each frame checked against the contract's event models."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType

from arbiter.api.stream import FELL_BEHIND
from arbiter.contract import EVENT_MODELS, EndedEvent, ReplyEvent, StatusEvent
from tests.support.eventually import PATIENCE_S

if TYPE_CHECKING:
    from collections.abc import Callable

    from aiohttp import ClientWebSocketResponse

__all__ = (
    "Follower",
    "checked_event",
    "checked_frame",
    "frames_until",
    "next_event",
    "next_frame",
    "no_event_within",
    "read_until",
    "told_after",
)

_MODELS = {model.model_fields["type"].default: model for model in EVENT_MODELS}
# The multiplexed stream's frames: the events, and its own.
_FRAMES = {**_MODELS, **{model.model_fields["type"].default: model for model in (StatusEvent, EndedEvent, ReplyEvent)}}
_NOTICE = re.compile(r"^fell behind; reconnect with \?after=(\d+)$")


def checked_event(frame: Any, models: dict[str, Any] = _MODELS) -> dict[str, Any]:
    """The frame as a dict, after checking it is exactly one of the contract's event shapes."""
    assert isinstance(frame, dict), frame
    model = models.get(frame.get("type"))
    assert model is not None, f"unknown event type in {frame}"
    # A round trip through the model must give the frame back: no field missing, extra or of another type.
    assert model.model_validate(frame).model_dump(mode="json") == frame, frame
    return frame


async def _next(
    ws: ClientWebSocketResponse[Any], within: float, check: Callable[[Any], dict[str, Any]]
) -> dict[str, Any]:
    message = await asyncio.wait_for(ws.receive(), within)
    assert message.type is WSMsgType.TEXT, f"expected a frame, got {message.type}: {message.data!r}"
    return check(json.loads(message.data))


async def _until(
    ws: ClientWebSocketResponse[Any],
    done: Callable[[dict[str, Any]], bool],
    within: float,
    check: Callable[[Any], dict[str, Any]],
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + within
    frames: list[dict[str, Any]] = []
    while not frames or not done(frames[-1]):
        frames.append(await _next(ws, max(0.01, deadline - time.monotonic()), check))
    return frames


async def next_event(ws: ClientWebSocketResponse[Any], within: float = PATIENCE_S) -> dict[str, Any]:
    """The next frame of a channel's stream, checked; ``TimeoutError`` after ``within`` seconds."""
    return await _next(ws, within, checked_event)


def checked_frame(frame: Any) -> dict[str, Any]:
    """A frame of the multiplexed stream, checked like ``checked_event``."""
    return checked_event(frame, _FRAMES)


async def next_frame(ws: ClientWebSocketResponse[Any], within: float = PATIENCE_S) -> dict[str, Any]:
    """The next frame of the multiplexed stream, checked; ``TimeoutError`` after ``within`` seconds."""
    return await _next(ws, within, checked_frame)


async def read_until(
    ws: ClientWebSocketResponse[Any], done: Callable[[dict[str, Any]], bool], within: float = PATIENCE_S
) -> list[dict[str, Any]]:
    """Events of a channel's stream up to and including the first one ``done`` accepts; ``TimeoutError`` if that
    does not come within ``within`` seconds in all."""
    return await _until(ws, done, within, checked_event)


async def frames_until(
    ws: ClientWebSocketResponse[Any], done: Callable[[dict[str, Any]], bool], within: float = PATIENCE_S
) -> list[dict[str, Any]]:
    """``read_until`` for the multiplexed stream's frames."""
    return await _until(ws, done, within, checked_frame)


async def no_event_within(ws: ClientWebSocketResponse[Any], seconds: float) -> None:
    """Nothing arrives for ``seconds``."""
    try:
        message = await asyncio.wait_for(ws.receive(), seconds)
    except TimeoutError:
        return
    raise AssertionError(f"unexpected frame: {message.type} {message.data!r}")


def told_after(reason: str | None) -> int:
    """The seq a fell-behind notice tells the client to resume after."""
    notice = _NOTICE.match(reason or "")
    assert notice is not None, f"not the fell-behind notice: {reason!r}"
    return int(notice.group(1))


@dataclasses.dataclass
class Follower:
    """One connection to a channel's event stream, opened with ``?after=<after>``, and what a client following it
    knows from the stream alone: the messages that came (each checked to come once and in order), and its view of
    the history after ``after``, kept up to date by the edited, deleted, retracted and cleared events."""

    ws: ClientWebSocketResponse[Any]
    after: int
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # the message views, as they came
    view: dict[int, str] = dataclasses.field(default_factory=dict)  # seq -> text
    # The edited, deleted, retracted and cleared events, in order: ("edited", seq, text), ("deleted", seq),
    # ("retracted", seq), ("cleared", last_seq).
    changes: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    # Where to resume, once the arbiter dropped the stream for falling behind: the last message seq that came, or
    # later when the messages after it are no longer in the history (the replay read up to there without them).
    told_after: int | None = None

    @property
    def last_seq(self) -> int:
        """The last message seq that came (or ``after``)."""
        return self.messages[-1]["seq"] if self.messages else self.after

    @property
    def resume_after(self) -> int:
        """Where a client resumes and loses nothing: what the arbiter told it, or the last message seq that came."""
        return self.last_seq if self.told_after is None else self.told_after

    @property
    def open(self) -> bool:
        return self.told_after is None

    def take(self, event: dict[str, Any]) -> None:
        match event["type"]:
            case "message":
                message = event["message"]
                # Messages come in seq order, each once, all after the seq the stream was opened after.
                assert message["seq"] > self.last_seq, (message["seq"], self.last_seq, self.after)
                self.messages.append(message)
                self.view[message["seq"]] = message["text"]
            case "edited":
                message = event["message"]
                self.changes.append(("edited", message["seq"], message["text"]))
                if message["seq"] in self.view:
                    self.view[message["seq"]] = message["text"]
            case "deleted" | "retracted":
                self.changes.append((event["type"], event["seq"]))
                self.view.pop(event["seq"], None)
            case "cleared":
                self.changes.append(("cleared", event["last_seq"]))
                self.view = {seq: text for seq, text in self.view.items() if seq > event["last_seq"]}
            case _:
                pass

    async def read_until(self, done: Callable[[dict[str, Any]], bool], within: float = PATIENCE_S) -> bool:
        """Take events up to and including the first one ``done`` accepts (True), or until the arbiter drops the
        stream for falling behind (False: ``told_after`` says where to resume, never before ``last_seq``)."""
        assert self.open, "the arbiter dropped this stream"
        deadline = time.monotonic() + within
        while True:
            try:
                frame = await asyncio.wait_for(self.ws.receive(), max(0.01, deadline - time.monotonic()))
            except TimeoutError:
                raise AssertionError(
                    f"the stream sent nothing awaited for {within}s (after seq {self.last_seq})"
                ) from None
            if frame.type is WSMsgType.TEXT:
                event = checked_event(json.loads(frame.data))
                self.take(event)
                if done(event):
                    return True
            elif frame.type is WSMsgType.CLOSE and frame.data == FELL_BEHIND:
                self.told_after = told_after(frame.extra)
                assert self.told_after >= self.last_seq, (self.told_after, self.last_seq)
                return False
            else:
                raise AssertionError(f"the stream ended with {frame.type} {frame.data!r} {frame.extra!r}")
