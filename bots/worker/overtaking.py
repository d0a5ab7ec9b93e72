"""What makes an answer being written unpostable: the arbiter's staleness and floor rules, as a persona can tell them
from the messages it hears. Pure; ``tests/bots/worker/test_overtaking.py`` holds it to the arbiter's own rules."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from arbiter.contract import AuthorKind, Tier

if TYPE_CHECKING:
    from collections.abc import Iterable

    from arbiter.contract import MessageView, StatusView

__all__ = ("Overtaking",)


@dataclass(frozen=True, slots=True)
class Overtaking:
    """What would make the arbiter refuse the answer ``persona_id`` is writing on a claim of ``tier``, fed the
    messages that arrive meanwhile (``after``). A nod is for the latest message; a remark is stale after more than
    ``tolerance`` remarks or human messages came after the one it answers; and a person asking others something
    gives them the floor, unless this persona has the floor too (then its answer is one of those awaited)."""

    persona_id: str
    tier: Tier
    addressed: bool  # it has the floor
    tolerance: int
    # When its floor ends, on the arbiter's clock (as messages' ``at``); None: not before the answer is written (it
    # was asked while it wrote, and a status does not say how long a floor lasts).
    floor_until: float | None = None
    newer: int = 0  # remarks and human messages by others after the one it answers, so far
    overtaken: bool = False  # once so, so it stays: the call is stopped then

    @classmethod
    def from_status(cls, persona_id: str, tier: Tier, status: StatusView) -> Overtaking:
        """For a claim of ``tier`` planned from ``status``: the floor it had then, the channel's tolerance."""
        addressed = persona_id in status.priority
        until = status.priority_until if addressed else None
        return cls(persona_id, tier, addressed, status.stale_tolerance, until)

    def after(self, message: MessageView) -> Overtaking:
        """What it knows once ``message`` has been said."""
        if self.overtaken or message.author_id == self.persona_id:
            return self
        if self.tier is Tier.AIZUCHI:
            return replace(self, overtaken=True)
        human = message.author_kind is AuthorKind.HUMAN
        newer = self.newer + 1 if human or message.tier in (Tier.REMARK, Tier.LONG) else self.newer
        addressed, until = self.addressed, self.floor_until
        if addressed and until is not None and message.at >= until:
            addressed = False  # its floor ran out before this message: a question to others now takes the floor
        if human and self.persona_id in message.addressed:
            # Asked now, it has the floor with the others asked (the arbiter adds them to it).
            addressed, until = True, None
        floor = not addressed and human and bool(message.addressed)
        overtaken = floor or newer > self.tolerance
        return replace(self, newer=newer, addressed=addressed, floor_until=until, overtaken=overtaken)

    def after_all(self, messages: Iterable[MessageView]) -> Overtaking:
        found = self
        for message in messages:
            found = found.after(message)
        return found
