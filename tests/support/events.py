"""Reading the arbiter's WebSocket event stream in tests, each frame checked against the contract's event models."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType

from arbiter.contract import EVENT_MODELS, EndedEvent, StatusEvent

if TYPE_CHECKING:
    from collections.abc import Callable

    from aiohttp import ClientWebSocketResponse

__all__ = ("checked_event", "checked_frame", "next_event", "next_frame", "no_event_within", "read_until")

_MODELS = {model.model_fields["type"].default: model for model in EVENT_MODELS}
# The multiplexed stream's frames: the events, and its own.
_FRAMES = {**_MODELS, **{model.model_fields["type"].default: model for model in (StatusEvent, EndedEvent)}}


def checked_event(frame: Any, models: dict[str, Any] = _MODELS) -> dict[str, Any]:
    """The frame as a dict, after checking it is exactly one of the contract's event shapes."""
    assert isinstance(frame, dict), frame
    model = models.get(frame.get("type"))
    assert model is not None, f"unknown event type in {frame}"
    # A round trip through the model must give the frame back: no field missing, extra or of another type.
    assert model.model_validate(frame).model_dump(mode="json") == frame, frame
    return frame


async def next_event(ws: ClientWebSocketResponse[Any], within: float = 5.0) -> dict[str, Any]:
    message = await asyncio.wait_for(ws.receive(), within)
    assert message.type is WSMsgType.TEXT, f"expected an event, got {message.type}: {message.data!r}"
    return checked_event(json.loads(message.data))


def checked_frame(frame: Any) -> dict[str, Any]:
    """A frame of the multiplexed stream, checked like ``checked_event``."""
    return checked_event(frame, _FRAMES)


async def next_frame(ws: ClientWebSocketResponse[Any], within: float = 5.0) -> dict[str, Any]:
    message = await asyncio.wait_for(ws.receive(), within)
    assert message.type is WSMsgType.TEXT, f"expected a frame, got {message.type}: {message.data!r}"
    return checked_frame(json.loads(message.data))


async def read_until(
    ws: ClientWebSocketResponse[Any], done: Callable[[dict[str, Any]], bool], within: float = 5.0
) -> list[dict[str, Any]]:
    """Events up to and including the first one ``done`` accepts."""
    deadline = time.monotonic() + within
    events: list[dict[str, Any]] = []
    while True:
        event = await next_event(ws, max(0.01, deadline - time.monotonic()))
        events.append(event)
        if done(event):
            return events


async def no_event_within(ws: ClientWebSocketResponse[Any], seconds: float) -> None:
    """Nothing arrives for ``seconds``."""
    try:
        message = await asyncio.wait_for(ws.receive(), seconds)
    except TimeoutError:
        return
    raise AssertionError(f"unexpected frame: {message.type} {message.data!r}")
