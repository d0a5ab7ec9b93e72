"""Observing the platform: messages people (and other bots) said there, their edits and deletions, and where to
start reading a channel back after a restart."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from arbiter import contract as wire
from arbiter.core import rules
from arbiter.core.addressing import addressed_personas
from arbiter.core.errors import NotFound
from arbiter.core.images import ImageRef, bounded
from arbiter.core.models import AuthorKind, ChannelState, Message
from arbiter.core.rules import Author
from arbiter.service_core import ServiceCore, platform_place
from arbiter.views import message_view

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from arbiter.core.rules import Transition
    from arbiter.storage.port import StepTx

__all__ = ("IntakeMark", "PlatformIntake")

# How many of a channel's newest messages a catch-up compares with what the platform shows (it reads back a hundred).
_RECONCILED = 200
# How far back a message heard late looks for persona messages the platform shows after it (they were granted a moment
# before: a few messages at most).
_LOOK_BACK = 50


@dataclass(frozen=True, slots=True)
class IntakeMark:
    """Where reading a channel's platform history back (after a restart) starts: after ``after``, the platform id
    of the newest message recorded there, and nothing said before ``since`` (see ``ChannelState.history_since``)."""

    after: str | None
    since: float | None


class PlatformIntake(ServiceCore):
    async def record_message(
        self,
        channel_id: str,
        *,
        author_id: str,
        author_name: str,
        text: str,
        author_kind: AuthorKind = AuthorKind.HUMAN,
        platform_message_id: str | None = None,
        mentions: Sequence[str] = (),
        at: float | None = None,
        images: Sequence[ImageRef] = (),
    ) -> wire.ObserveResult:
        """Record a message seen on the platform. Humans never pay; the same platform id is recorded once.

        ``at``: when it was said, for a message recorded late (read back from the platform after a restart);
        by default, now. It is kept within bounds: never after now, never before the channel's newest message
        (the history's times follow its order). See ``rules.observe`` for what a late message still does.
        ``images``: shown with it; the history keeps those within the arbiter's bounds (``ImageBounds``).
        """
        kept = bounded(images, self.image_bounds) if author_kind is not AuthorKind.PERSONA else ()

        def step(tx: StepTx, state: ChannelState) -> wire.ObserveResult:
            if platform_message_id is not None:
                known = tx.message_by_platform_id(channel_id, platform_message_id)
                if known is not None:
                    return wire.ObserveResult(seq=known.seq, created=False)
                if author_kind is AuthorKind.PERSONA:
                    granted = self._unlinked(tx, channel_id, author_id)
                    if granted is not None:
                        # Our persona's own post, seen before the persona linked it: the same message.
                        linked = self._linked(tx, state, author_id, granted, platform_message_id)
                        self._commit(tx, state, linked)
                        assert isinstance(linked.outcome, Message)
                        return wire.ObserveResult(seq=linked.outcome.seq, created=False)
            addressed: tuple[str, ...] = ()
            if author_kind is AuthorKind.HUMAN:
                addressed = addressed_personas(text, self.registry.names(), mentions)
            author = Author(author_id, author_name, author_kind)
            now = tx.now()
            said = None if at is None else max(at, self._newest_time(tx, state))
            transition = rules.observe(
                state,
                author,
                text,
                now,
                platform_message_id=platform_message_id,
                addressed=addressed,
                at=said,
                images=kept,
            )
            self._commit(tx, state, transition)
            assert isinstance(transition.outcome, Message)
            if state.bot_streak:  # bots spoke since a person last did: one of theirs may have been posted after this
                self._after_it(tx, transition.state, transition.outcome, since=state.last_human_seq)
            return wire.ObserveResult(seq=transition.outcome.seq, created=True)

        return await self._change(channel_id, step)

    def _after_it(self, tx: StepTx, state: ChannelState, message: Message, *, since: int) -> None:
        """The messages recorded after seq ``since`` and before ``message`` that the platform shows after it (it was
        heard late, while they were on their way: a persona's) move to the end of the history, in the platform's
        order (``rules.move_to_end``)."""
        said = platform_place(message)
        if said is None:
            return
        later: list[tuple[int, Message]] = []
        for seq in range(max(since + 1, message.seq - _LOOK_BACK), message.seq):
            found = tx.message(state.channel_id, seq)
            posted = platform_place(found)
            if found is not None and posted is not None and posted > said:
                later.append((posted, found))
        for posted, moved in sorted(later, key=lambda pair: pair[0]):
            tx.require_lock()  # the moved message hands its platform id on: the locked way writes that in order
            transition = rules.move_to_end(
                state, moved, platform_message_id=str(posted), said_at=self._newest_time(tx, state)
            )
            self._commit(tx, state, transition)
            state = transition.state

    async def intake_mark(self, channel_id: str) -> IntakeMark:
        """Where to start reading the channel's platform history back after a restart. ``after`` is a numeric
        platform id (a Discord snowflake): the newest message's by seq that has one, deleted ones included; the
        ids of emoji reactions that stand in for a persona's nod (``reaction-...``) are not messages."""
        state = await self._read_state(channel_id, self.now())
        ids = await self._reads.recent_platform_ids(channel_id, 50)
        return IntakeMark(after=next((pid for pid in ids if pid.isdigit()), None), since=state.history_since)

    def _unlinked(self, tx: StepTx, channel_id: str, persona_id: str) -> Message | None:
        """The persona's newest granted message that has no platform id yet. A persona posts one message at a
        time, so that is the one just seen; the platform may have changed its text a little (formatting), so
        the text is not compared."""
        for message in reversed(tx.recent_history(channel_id, 20)):
            if message.author_id == persona_id and message.author_kind is AuthorKind.PERSONA:
                return message if message.platform_message_id is None else None
        return None

    async def edit_message(self, channel_id: str, platform_message_id: str, text: str) -> wire.MessageView:
        """A message was edited on the platform."""
        return await self._on_platform_message(channel_id, platform_message_id, text)

    async def delete_message(self, channel_id: str, platform_message_id: str) -> wire.MessageView:
        """A message was deleted on the platform."""
        return await self._on_platform_message(channel_id, platform_message_id, None)

    async def _on_platform_message(
        self, channel_id: str, platform_message_id: str, text: str | None
    ) -> wire.MessageView:
        def step(tx: StepTx, state: ChannelState) -> wire.MessageView:
            message = tx.message_by_platform_id(channel_id, platform_message_id)
            if message is None:
                raise NotFound(
                    f"no message with platform id {platform_message_id} in channel {channel_id}",
                    field="platform_message_id",
                    code="unknown_message",
                )
            outcome = self._platform_changed(tx, state, message, text).outcome
            assert isinstance(outcome, Message)
            return message_view(outcome)

        return await self._change(channel_id, step)

    def _platform_changed(self, tx: StepTx, state: ChannelState, message: Message, text: str | None) -> Transition:
        """``message`` as the platform shows it now: deleted (``text`` None), or with ``text``."""
        transition = rules.delete(state, message) if text is None else rules.edit(state, message, text, tx.now())
        if transition.changed:
            self._commit(tx, state, transition)  # a deletion's event comes with it
            if text is not None and self._heard(state.channel_id):
                assert isinstance(transition.outcome, Message)
                tx.emit(wire.EditedEvent(channel_id=state.channel_id, message=message_view(transition.outcome)))
        return transition

    async def reconcile(self, channel_id: str, shown: Mapping[str, str], *, after: int, until: int) -> tuple[int, int]:
        """Bring the recorded messages said on the platform after id ``after`` and up to ``until`` in line with what
        it shows now, as a catch-up read it back (``shown``: the text of each message it shows there, by platform
        id): one it no longer shows was deleted, one whose text differs was edited, while the bot was away or could not
        read the change. A persona's own message is only ever deleted (nobody else may edit it, and the platform
        may show its text formatted). Returns how many were (edited, deleted)."""

        def step(tx: StepTx, state: ChannelState) -> tuple[int, int]:
            edited = deleted = 0
            for message in tx.recent_history(channel_id, _RECONCILED):
                place = platform_place(message)
                if place is None or not after < place <= until:
                    continue
                assert message.platform_message_id is not None
                text = shown.get(message.platform_message_id)
                if text is not None and (text == message.text or message.author_kind is AuthorKind.PERSONA):
                    continue
                state = self._platform_changed(tx, state, message, text).state
                edited, deleted = (edited + 1, deleted) if text is not None else (edited, deleted + 1)
            return edited, deleted

        return await self._change(channel_id, step)
