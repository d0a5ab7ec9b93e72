"""The channels' states as this process last committed them: what the batch writer reuses instead of reading."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from arbiter.core.ledger import active

if TYPE_CHECKING:
    from collections.abc import Mapping

    from arbiter.core.models import ChannelState

__all__ = ("Remembered", "without_expired")


class Remembered:
    """The channels' states as this process last committed them. ``owned``: no other process writes the database
    (SQLite), so they are current as they are; else (PostgreSQL) each is current only while the channel's version
    is the one in ``versions``: a channel another process changed is forgotten when this one hears of it, and
    ``heard`` says whether it hears of every such change (its relay listens).

    Only :meth:`remember` adds to it, with what a transaction committed: a batch that rolls back, or a step that
    fails, changes nothing here (the states are frozen values, never changed in place)."""

    def __init__(self, *, owned: bool) -> None:
        self.owned = owned
        self.states: dict[str, ChannelState] = {}
        self.versions: dict[str, int] = {}
        self.heard = False
        # Channels another process saved at a version newer than the one remembered, heard of while a batch of this
        # one's was on its way: the state that batch committed is out of date when it comes back.
        self._newer: dict[str, int] = {}

    def remember(self, states: Mapping[str, ChannelState], versions: Mapping[str, int]) -> None:
        if self.owned:
            self.states.update(states)
            return
        for channel_id, version in versions.items():
            if self._newer.get(channel_id, -1) > version:
                continue
            self._newer.pop(channel_id, None)
            self.states[channel_id] = states[channel_id]
            self.versions[channel_id] = version

    def changed_elsewhere(self, versions: Mapping[str, int]) -> None:
        """Another process saved these channels at these versions."""
        for channel_id, version in versions.items():
            if self.versions.get(channel_id, -1) < version:
                self.states.pop(channel_id, None)
                self.versions.pop(channel_id, None)
                self._newer[channel_id] = max(version, self._newer.get(channel_id, -1))

    def clear(self) -> None:
        self.states.clear()
        self.versions.clear()
        self._newer.clear()


def without_expired(state: ChannelState, now: float) -> ChannelState:
    """Drop what was refunded by ``now`` (spends are sorted, so a look at the front says whether any are)."""
    spends_expired = bool(state.spends) and state.spends[0].refund_at <= now
    claims_expired = any(claim.refund_at <= now for claim in state.claims)
    if not spends_expired and not claims_expired:
        return state
    return replace(
        state,
        spends=active(state.spends, now) if spends_expired else state.spends,
        claims=tuple(claim for claim in state.claims if claim.refund_at > now) if claims_expired else state.claims,
    )
