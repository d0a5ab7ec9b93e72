"""Stream frames parsed once per process.

Every persona of a process follows the same channels on its own multiplexed stream, so each of a channel's events
arrives as the same text on every stream within moments. Parsed once, the frames (immutable models) are shared:
one parse instead of one per persona, and one copy of each message in memory, held by every persona's window.
"""

from __future__ import annotations

from arbiter import contract as wire

__all__ = ("FrameCache",)

_KEPT = 512  # frames remembered: several bursts of every stream of the process


class FrameCache:
    def __init__(self, kept: int = _KEPT) -> None:
        self._kept = kept
        self._parsed: dict[str, wire.StreamFrame] = {}  # by the frame's text, oldest first

    def parse(self, raw: str) -> wire.StreamFrame:
        """The frame as its model (raises pydantic's ValidationError as ``wire.parse_stream_frame`` does)."""
        frame = self._parsed.get(raw)
        if frame is None:
            frame = wire.parse_stream_frame(raw)
            if isinstance(frame, wire.StatusEvent):
                return frame  # a persona's own: no other stream sends it
            if len(self._parsed) >= self._kept:
                del self._parsed[next(iter(self._parsed))]
            self._parsed[raw] = frame
        return frame
