"""Whether a Discord bot's sessions work: each shard's failed sessions since it was last ready, the back-off before
the next one, and when to give up. Pure: time and chance are passed in (``aizuchi.connection`` feeds it from
discord.py).

A try is an IDENTIFY. It fails if the session ends or breaks before discord.py says it is ready (or resumed): an
event discord.py cannot read in every READY, a close code it retries forever, an IDENTIFY refused every time. Such a
loop would spend Discord's daily session starts and hear nothing; a session lost after it was ready (a network
drop, one unreadable event) is not a failed try.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import random

__all__ = ("Cause", "Kind", "ReadinessWatch", "Shard", "Verdict", "give_up_message", "unreadable")

_MAX_BACKOFF_S = 60.0
# Which shard a session belongs to: its id for a sharded client, None for a plain one.
Shard = int | None


class Kind(enum.Enum):
    """What kind of failure a session met, for the hint in the message that ends the bot."""

    UNREADABLE = "unreadable"  # discord.py could not read an event the server sent
    REFUSED = "refused"  # the server answered INVALID_SESSION
    CLOSED = "closed"  # the server closed the connection with a code discord.py retries
    LOST = "lost"  # anything else: the connection went away before the session was ready


@dataclass(frozen=True, slots=True)
class Cause:
    """Why one session failed, in words that read after "every" and "the last": ``READY`` + ``lacked 'shard'
    (KeyError)``, ``session`` + ``was refused by the server (INVALID_SESSION)``."""

    subject: str
    predicate: str
    kind: Kind


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a failed session means: back off ``delay_s`` and try again, or give up."""

    give_up: bool
    tries: int  # failed sessions in a row since the shard was last ready, this one included
    elapsed_s: float  # since the first of them started
    delay_s: float  # the back-off before the next connection to the gateway (0 when giving up)
    causes: tuple[Cause, ...]


class _Phase(enum.Enum):
    DOWN = "down"  # no session under way: before the first IDENTIFY, or after a failure
    IDENTIFYING = "identifying"  # IDENTIFY sent, no READY read yet
    CONNECTED = "connected"  # READY read, not ready yet (discord.py waits for the servers' GUILD_CREATEs)
    UP = "up"  # ready, or resumed


@dataclass
class _Streak:
    phase: _Phase = _Phase.DOWN
    started: float = 0.0  # when the first failed session of the streak was identified
    causes: list[Cause] = field(default_factory=list)  # one per failed session since the shard was last ready


@dataclass
class ReadinessWatch:
    """Counts, for each shard, the sessions that failed since it was last ready; says how long to back off before
    the next one, and when to give up.

    A try is an IDENTIFY (``identifying``). It fails if the session ends or breaks (``failed``) before discord.py
    says it is ready (``ready``, after READY and its servers) or resumed. A failure outside a try is not counted:
    a ready session lost (the network, one event it could not read), or a connection that never got as far as an
    IDENTIFY (the server unreachable: discord.py retries that by itself, and nothing here could do better). A
    late ``ready`` for a session that has already failed is ignored: discord.py announces it on a timer, even
    after the socket closed. It gives up at ``tries`` failed sessions in a row, or at one that fails ``within_s``
    or more after the first of them started."""

    tries: int
    within_s: float
    backoff_s: float = 1.0  # the first back-off; doubled for each further failure, up to _MAX_BACKOFF_S
    _shards: dict[Shard, _Streak] = field(default_factory=dict)

    def identifying(self, shard: Shard, now: float) -> None:
        streak = self._streak(shard)
        if not streak.causes:
            streak.started = now
        streak.phase = _Phase.IDENTIFYING

    def connected(self, shard: Shard) -> None:
        """READY was read (the session exists; it is not ready until its servers have come)."""
        streak = self._streak(shard)
        if streak.phase is _Phase.IDENTIFYING:
            streak.phase = _Phase.CONNECTED

    def ready(self, shard: Shard) -> None:
        if self._streak(shard).phase is _Phase.CONNECTED:
            self._shards[shard] = _Streak(phase=_Phase.UP)

    def resumed(self, shard: Shard) -> None:
        """A RESUME was answered: the session works, whatever happened before."""
        self._shards[shard] = _Streak(phase=_Phase.UP)

    def failed(self, shard: Shard, now: float, cause: Cause, rng: random.Random) -> Verdict | None:
        """The shard's connection ended or broke; a verdict if that was a failed try, else None."""
        streak = self._streak(shard)
        trying = streak.phase in (_Phase.IDENTIFYING, _Phase.CONNECTED)
        streak.phase = _Phase.DOWN
        if not trying:
            return None
        streak.causes.append(cause)
        tries, elapsed = len(streak.causes), now - streak.started
        if tries >= self.tries or elapsed >= self.within_s:
            return Verdict(True, tries, elapsed, 0.0, tuple(streak.causes))
        # Jittered, so that several bots failing together do not come back in step.
        delay = min(_MAX_BACKOFF_S, self.backoff_s * 2.0 ** (tries - 1)) * rng.uniform(0.8, 1.2)
        return Verdict(False, tries, elapsed, delay, tuple(streak.causes))

    def identifying_shards(self) -> list[Shard]:
        return [shard for shard, streak in self._shards.items() if streak.phase is _Phase.IDENTIFYING]

    def _streak(self, shard: Shard) -> _Streak:
        return self._shards.setdefault(shard, _Streak())


def give_up_message(who: str, verdict: Verdict, *, server: str | None, library: str) -> str:
    """The one line that ends the bot: who, how many tries in how long, what went wrong, what to look at.
    ``server`` is the Discord-compatible server's address (None for Discord itself); ``library`` discord.py's
    version."""
    last = verdict.causes[-1]
    if len(verdict.causes) == 1:
        what = f"its {last.subject} {last.predicate}"
    elif all(cause == last for cause in verdict.causes):
        what = f"every {last.subject} {last.predicate}"
    else:
        what = f"the last {last.subject} {last.predicate}"
    tries = "1 try" if verdict.tries == 1 else f"{verdict.tries} tries"
    elapsed = f"{verdict.elapsed_s:.0f} s" if verdict.elapsed_s >= 10 else f"{verdict.elapsed_s:.1f} s"
    if server is None:
        source = "Discord"
        hint = (
            f"discord.py {library} cannot read what Discord sends now: update aizuchi"
            if last.kind is Kind.UNREADABLE
            else "Discord may be having trouble (https://discordstatus.com): start it again later"
        )
    else:
        source = f"the server at {server}"
        hint = (
            f"is this a Discord-compatible server discord.py {library} supports?"
            if last.kind is Kind.UNREADABLE
            else "does the server accept this bot's sessions? Its log should say why"
        )
    return f"{who} could not get a working session from {source} after {tries} in {elapsed}: {what} - {hint}"


def unreadable(event: str, error: Exception) -> Cause:
    """An event discord.py's parser raised on: a missing field (KeyError) is said as such."""
    if isinstance(error, KeyError) and len(error.args) == 1:
        return Cause(event, f"lacked {error.args[0]!r} (KeyError)", Kind.UNREADABLE)
    return Cause(event, f"could not be read by discord.py ({type(error).__name__}: {error})", Kind.UNREADABLE)
