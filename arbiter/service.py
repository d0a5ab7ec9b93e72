"""ArbiterService: loads state, asks the core, persists, publishes. The only caller of ``arbiter.core``.

The HTTP API, the moderators' slash commands and the local room all call these methods: one code path.
Changes run through the BatchWriter (one locked transaction per batch); reads go straight to the database.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from arbiter import contract as wire
from arbiter.core import rules
from arbiter.core.addressing import addressed_personas
from arbiter.core.errors import InvalidRequest, NotFound
from arbiter.core.models import (
    AuthorKind,
    ChannelSettings,
    ChannelState,
    Message,
    PersonaInfo,
    PersonaPolicy,
    SpendState,
    Tier,
)
from arbiter.core.rules import Author, Transition
from arbiter.core.validation import patch_settings, validate_settings
from arbiter.events import Event, PersonaEvent
from arbiter.storage import repository as repo
from arbiter.views import claim_view, message_view, next_refund, persona_view, settings_view, status_view

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from arbiter.storage.database import Database
    from arbiter.storage.writer import BatchWriter, Clock, WriteTx

__all__ = ("ArbiterService", "IntakeMark")

_log = logging.getLogger(__name__)

T = TypeVar("T")


def _nothing(_tx: WriteTx) -> None:
    """A step that changes nothing: run through the writer, it returns once every step queued before it has."""


@dataclass(frozen=True, slots=True)
class IntakeMark:
    """Where reading a channel's platform history back (after a restart) starts: after ``after``, the platform id
    of the newest message recorded there, and nothing said before ``since`` (see ``ChannelState.history_since``)."""

    after: str | None
    since: float | None


class ArbiterService:
    def __init__(
        self,
        database: Database,
        writer: BatchWriter,
        *,
        clock: Clock,
        new_id: Callable[[], str],
        personas: Collection[str] = (),
        default_settings: ChannelSettings | None = None,
        wants_events: Callable[[str], bool] | None = None,
    ) -> None:
        """``wants_events(channel_id)``: whether anyone will hear that channel's events; building them is skipped
        when no one will (the common case on one SQLite process with no open streams). None: always build them
        (other arbiter processes may be listening)."""
        self._database = database
        self._writer = writer
        self._clock = clock
        self._new_id = new_id
        self._wants_events = wants_events
        self.personas = frozenset(personas)
        self._defaults = default_settings or ChannelSettings()
        validate_settings(self._defaults)
        # How each persona registered (names, colour, platform id). Writer steps read it from the writer's thread
        # while the event loop registers personas: a snapshot, replaced whole, never changed in place.
        self._registry: Mapping[str, PersonaInfo] = MappingProxyType({})

    def now(self) -> float:
        return self._clock()

    # --- plumbing ---------------------------------------------------------------------------------------

    async def _change(
        self, channel_id: str, step: Callable[[WriteTx, ChannelState], T], spend_ids: Sequence[str] = ()
    ) -> T:
        """Run ``step`` on the channel's locked state in the writer. Steps are synchronous (see storage.writer)."""

        def run(tx: WriteTx) -> T:
            state = tx.channel(channel_id, spend_ids=spend_ids)
            if state is None:
                raise NotFound(f"unknown channel {channel_id}", field="channel_id", code="unknown_channel")
            return step(tx, state)

        return await self._writer.run(run, (channel_id,))

    def _author(self, persona_id: str) -> Author:
        return Author(persona_id, self._name(persona_id), AuthorKind.PERSONA)

    def _name(self, persona_id: str) -> str:
        info = self._registry.get(persona_id)
        return persona_id if info is None else info.display_name

    def _require_persona(self, persona_id: str) -> None:
        if persona_id not in self.personas:
            raise NotFound(f"unknown persona {persona_id}", field="persona", code="unknown_persona")

    def _events(self, transition: Transition, now: float, before: ChannelState) -> list[Event]:
        """What the stream should hear about a transition."""
        channel_id = transition.state.channel_id
        events: list[Event] = [
            wire.MessageEvent(channel_id=channel_id, message=message_view(m)) for m in transition.new_messages
        ]
        events += [
            wire.RetractedEvent(channel_id=channel_id, seq=m.seq) for m in transition.changed_messages if m.retracted
        ]
        events += [
            wire.ClaimEvent(channel_id=channel_id, claim=claim_view(s, now))
            for s in (*transition.new_spends, *transition.changed_spends)
        ]
        after_level = rules.level(transition.state, now)
        if after_level != rules.level(before, now) or transition.new_spends or transition.changed_spends:
            events.append(self._level_event(transition.state, now))
        return events

    def _level_event(self, state: ChannelState, now: float) -> wire.LevelEvent:
        return wire.LevelEvent(
            channel_id=state.channel_id,
            level=rules.level(state, now),
            capacity=state.settings.capacity,
            at=now,
            next_refund_at=next_refund(state, now),
        )

    def _commit(self, tx: WriteTx, before: ChannelState, transition: Transition) -> None:
        if transition.changed:
            tx.apply(transition)
            if self._wants_events is None or self._wants_events(before.channel_id):
                tx.emit(*self._events(transition, tx.now(), before))

    def _verdict(self, state: ChannelState, now: float, outcome: Any, **extra: Any) -> dict[str, Any]:
        base: dict[str, Any] = {"level": rules.level(state, now), "capacity": state.settings.capacity}
        if isinstance(outcome, rules.Refusal):
            return {
                **base,
                "granted": False,
                "reason": outcome.reason,
                "detail": outcome.detail,
                "retry_after": outcome.retry_after,
                **extra,
            }
        return {**base, "granted": True, **extra}

    # --- speaking ---------------------------------------------------------------------------------------

    async def consume(
        self,
        channel_id: str,
        persona_id: str,
        text: str,
        *,
        tier: Tier | None = None,
        amount: int | None = None,
        based_on_seq: int | None = None,
    ) -> wire.SpeakResult:
        self._require_persona(persona_id)

        def step(tx: WriteTx, state: ChannelState) -> wire.SpeakResult:
            now = tx.now()
            transition = rules.consume(
                state, self._author(persona_id), text, now,
                spend_id=self._new_id(), tier=tier, amount=amount, based_on_seq=based_on_seq,
            )  # fmt: skip
            self._commit(tx, state, transition)
            message = transition.outcome.message if isinstance(transition.outcome, rules.SpeechGranted) else None
            view = None if message is None else message_view(message)
            return wire.SpeakResult(**self._verdict(transition.state, now, transition.outcome, message=view))

        return await self._change(channel_id, step)

    async def claim(
        self, channel_id: str, persona_id: str, tier: Tier, *, based_on_seq: int | None = None
    ) -> wire.ClaimResult:
        self._require_persona(persona_id)

        def step(tx: WriteTx, state: ChannelState) -> wire.ClaimResult:
            now = tx.now()
            transition = rules.claim(state, persona_id, tier, now, claim_id=self._new_id(), based_on_seq=based_on_seq)
            self._commit(tx, state, transition)
            outcome = transition.outcome
            view = claim_view(outcome.spend, now) if isinstance(outcome, rules.ClaimGranted) else None
            return wire.ClaimResult(**self._verdict(transition.state, now, outcome, claim=view))

        return await self._change(channel_id, step)

    async def speak(
        self,
        channel_id: str,
        persona_id: str,
        claim_id: str,
        text: str,
        *,
        tier: Tier | None = None,
        based_on_seq: int | None = None,
    ) -> wire.SpeakResult:
        self._require_persona(persona_id)

        def step(tx: WriteTx, state: ChannelState) -> wire.SpeakResult:
            now = tx.now()
            replay = self._replayed_speech(tx, state, persona_id, claim_id, text=text, now=now)
            if replay is not None:
                return replay
            transition = rules.speak(
                state, self._author(persona_id), claim_id, text, now, tier=tier, based_on_seq=based_on_seq
            )
            self._commit(tx, state, transition)
            outcome = transition.outcome
            if isinstance(outcome, rules.SpeechGranted):
                extra = {"message": message_view(outcome.message), "refunded": outcome.refunded}
            else:
                extra = {}
            return wire.SpeakResult(**self._verdict(transition.state, now, outcome, **extra))

        return await self._change(channel_id, step, spend_ids=[claim_id])

    def _replayed_speech(
        self, tx: WriteTx, state: ChannelState, persona_id: str, claim_id: str, *, text: str, now: float
    ) -> wire.SpeakResult | None:
        """A speak repeated after a lost answer gets the same answer, not a second message."""
        spend = state.spend(claim_id)
        if spend is None or spend.persona_id != persona_id or spend.state is not SpendState.SPOKEN:
            return None
        if spend.message_seq is None:
            return None
        message = tx.message(state.channel_id, spend.message_seq)
        if message is None or message.text != text or not message.visible:
            return None
        return wire.SpeakResult(**self._verdict(state, now, None, message=message_view(message)))

    async def release(self, channel_id: str, persona_id: str, claim_id: str) -> wire.ReleaseResult:
        self._require_persona(persona_id)

        def step(tx: WriteTx, state: ChannelState) -> wire.ReleaseResult:
            now = tx.now()
            transition = rules.release(state, persona_id, claim_id, now)
            self._commit(tx, state, transition)
            outcome = transition.outcome
            assert isinstance(outcome, rules.Released)
            return wire.ReleaseResult(
                **self._verdict(transition.state, now, outcome, claim=claim_view(outcome.spend, now))
            )

        return await self._change(channel_id, step, spend_ids=[claim_id])

    async def retract(self, channel_id: str, persona_id: str, seq: int) -> wire.RetractResult:
        """Take back a granted message whose platform post failed, refunding its cost at once."""
        self._require_persona(persona_id)

        def step(tx: WriteTx, state: ChannelState) -> wire.RetractResult:
            message = self._message(tx, channel_id, seq)
            if message.spend_id:
                state = tx.channel(channel_id, spend_ids=[message.spend_id]) or state
            now = tx.now()
            spend = state.spend(message.spend_id) if message.spend_id else None
            outstanding = spend.cost if spend is not None and spend.active(now) and message.visible else 0
            transition = rules.retract(state, persona_id, message, now)
            self._commit(tx, state, transition)
            return wire.RetractResult(seq=seq, refunded=outstanding, level=rules.level(transition.state, now))

        return await self._change(channel_id, step)

    async def link(self, channel_id: str, persona_id: str, seq: int, platform_message_id: str) -> wire.MessageView:
        """Attach the platform's message id to a message the persona posted."""
        self._require_persona(persona_id)

        def step(tx: WriteTx, state: ChannelState) -> wire.MessageView:
            message = self._message(tx, channel_id, seq)
            other = tx.message_by_platform_id(channel_id, platform_message_id)
            if other is not None and other.seq != seq:
                raise InvalidRequest(
                    f"platform message {platform_message_id} is already message {other.seq}",
                    field="platform_message_id",
                )
            transition = rules.link_platform_id(state, persona_id, message, platform_message_id)
            self._commit(tx, state, transition)
            assert isinstance(transition.outcome, Message)
            return message_view(transition.outcome)

        return await self._change(channel_id, step)

    def _message(self, tx: WriteTx, channel_id: str, seq: int) -> Message:
        message = tx.message(channel_id, seq)
        if message is None:
            raise NotFound(f"no message {seq} in channel {channel_id}", field="seq", code="unknown_message")
        return message

    # --- observing --------------------------------------------------------------------------------------

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
    ) -> wire.ObserveResult:
        """Record a message seen on the platform. Humans never pay; the same platform id is recorded once.

        ``at``: when it was said, for a message recorded late (read back from the platform after a restart);
        by default, now. It is kept within bounds: never after now, never before the channel's newest message
        (the history's times follow its order). See ``rules.observe`` for what a late message still does.
        """

        def step(tx: WriteTx, state: ChannelState) -> wire.ObserveResult:
            if platform_message_id is not None:
                known = tx.message_by_platform_id(channel_id, platform_message_id)
                if known is not None:
                    return wire.ObserveResult(seq=known.seq, created=False)
                if author_kind is AuthorKind.PERSONA:
                    granted = self._unlinked(tx, channel_id, author_id)
                    if granted is not None:
                        # Our persona's own post, seen before the persona linked it: the same message.
                        linked = rules.link_platform_id(state, author_id, granted, platform_message_id)
                        self._commit(tx, state, linked)
                        return wire.ObserveResult(seq=granted.seq, created=False)
            addressed: tuple[str, ...] = ()
            if author_kind is AuthorKind.HUMAN:
                registry = self._registry  # one snapshot for the whole step
                candidates = {pid: info.names for pid, info in registry.items() if pid in self.personas}
                candidates.update({pid: () for pid in self.personas if pid not in candidates})
                addressed = addressed_personas(text, candidates, mentions)
            author = Author(author_id, author_name, author_kind)
            now = tx.now()
            said = None if at is None else max(at, self._newest_time(tx, state))
            transition = rules.observe(
                state, author, text, now, platform_message_id=platform_message_id, addressed=addressed, at=said
            )
            self._commit(tx, state, transition)
            assert isinstance(transition.outcome, Message)
            return wire.ObserveResult(seq=transition.outcome.seq, created=True)

        return await self._change(channel_id, step)

    @staticmethod
    def _newest_time(tx: WriteTx, state: ChannelState) -> float:
        """When the channel's newest message was said (-inf when its history is empty)."""
        newest = tx.message(state.channel_id, state.last_seq) if state.last_seq else None
        return float("-inf") if newest is None else newest.created_at

    async def intake_mark(self, channel_id: str) -> IntakeMark:
        """Where to start reading the channel's platform history back after a restart. ``after`` is a numeric
        platform id (a Discord snowflake): the newest message's by seq that has one, deleted ones included; the
        ids of emoji reactions that stand in for a persona's nod (``reaction-...``) are not messages."""
        state = await self._read_state(channel_id, self.now())
        ids = await self._database.read(repo.recent_platform_ids, channel_id, 50)
        return IntakeMark(after=next((pid for pid in ids if pid.isdigit()), None), since=state.history_since)

    async def report_usage(
        self, channel_id: str, persona_id: str, prompt_tokens: int, completion_tokens: int
    ) -> wire.UsageResult:
        self._require_persona(persona_id)

        def step(tx: WriteTx, state: ChannelState) -> wire.UsageResult:
            now = tx.now()
            repo.add_usage(
                tx.conn,
                channel_id,
                persona_id,
                day=rules.utc_day(now),
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
            )
            transition = rules.record_usage(state, prompt_tokens + completion_tokens, now)
            tx.replace_state(transition.state)
            return wire.UsageResult(
                tokens_today=rules.tokens_today(transition.state, now),
                daily_token_budget=state.settings.daily_token_budget,
            )

        return await self._change(channel_id, step)

    def _unlinked(self, tx: WriteTx, channel_id: str, persona_id: str) -> Message | None:
        """The persona's newest granted message that has no platform id yet. A persona posts one message at a
        time, so that is the one just seen; the platform may have changed its text a little (formatting), so
        the text is not compared."""
        for message in reversed(repo.recent_history(tx.conn, channel_id, 20)):
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
        def step(tx: WriteTx, state: ChannelState) -> wire.MessageView:
            message = tx.message_by_platform_id(channel_id, platform_message_id)
            if message is None:
                raise NotFound(
                    f"no message with platform id {platform_message_id} in channel {channel_id}",
                    field="platform_message_id",
                    code="unknown_message",
                )
            now = tx.now()
            transition = rules.delete(state, message) if text is None else rules.edit(state, message, text, now)
            assert isinstance(transition.outcome, Message)
            view = message_view(transition.outcome)
            if transition.changed:
                tx.apply(transition)
                if text is None:
                    tx.emit(wire.DeletedEvent(channel_id=channel_id, seq=message.seq))
                else:
                    tx.emit(wire.EditedEvent(channel_id=channel_id, message=view))
            return view

        return await self._change(channel_id, step)

    async def register_persona(
        self,
        persona_id: str,
        display_name: str,
        aliases: Sequence[str] = (),
        *,
        color: str | None = None,
        platform_user_id: str | None = None,
    ) -> None:
        """Remember how a persona presents itself: its names (messages that name it give it the floor), its
        colour (the local room) and its platform account (its own messages there are recognised)."""
        self._require_persona(persona_id)
        info = PersonaInfo(persona_id, display_name, tuple(aliases), color, platform_user_id)

        def step(tx: WriteTx) -> None:
            repo.upsert_persona(tx.conn, info, tx.now())
            tx.emit(PersonaEvent(**persona_view(info).model_dump()))

        await self._writer.run(step)

    def on_event(self, event: Event) -> None:
        """Keep the registry current, also when another arbiter process registered the persona."""
        if isinstance(event, PersonaEvent):
            info = PersonaInfo(event.id, event.display_name, tuple(event.aliases), event.color, event.platform_user_id)
            self._registry = MappingProxyType({**self._registry, info.id: info})

    async def load_personas(self) -> None:
        infos = await self._database.read(repo.persona_infos)
        self._registry = MappingProxyType({**self._registry, **{info.id: info for info in infos}})

    def personas_info(self, *, former: bool = False) -> wire.PersonaList:
        """Every persona with a token here, as registered (or by its id until it registers); with ``former``, also
        those registered before that have no token now (the local room shows their old messages in their colour)."""
        ids = set(self.personas) | (set(self._registry) if former else set())
        infos = [self._registry.get(pid, PersonaInfo(pid, pid)) for pid in sorted(ids)]
        return wire.PersonaList(personas=[persona_view(info) for info in infos])

    def persona_of_platform_user(self, platform_user_id: str) -> str | None:
        """The persona whose platform account this is, if any."""
        return next((i.id for i in self._registry.values() if i.platform_user_id == platform_user_id), None)

    # --- reading ----------------------------------------------------------------------------------------

    async def _read_state(self, channel_id: str, now: float) -> ChannelState:
        state = self._writer.cached(channel_id)
        if state is not None:
            return state
        state = await self._database.read(repo.load_channel, channel_id, now)
        if state is None:
            raise NotFound(f"unknown channel {channel_id}", field="channel_id", code="unknown_channel")
        return state

    async def status(self, channel_id: str, persona_id: str | None = None) -> wire.StatusView:
        now = self.now()
        state = await self._read_state(channel_id, now)
        name = None if persona_id is None else self._name(persona_id)
        return status_view(state, now, persona_id=persona_id, display_name=name)

    async def level_event(self, channel_id: str) -> wire.LevelEvent:
        now = self.now()
        return self._level_event(await self._read_state(channel_id, now), now)

    async def stream_start(self, channel_id: str) -> tuple[wire.LevelEvent, int]:
        """Where a stream that has just subscribed to the channel's events starts: the channel's level, and its last
        seq (every message after it reaches the subscription). Raises NotFound for an unknown channel.

        When events are built only for channels someone watches (``wants_events``), a change decided before the
        subscription, but committed after, publishes none: its message would be neither in a history read now
        nor among the events to come. So this first waits until the writer has committed (and published) every
        change it had begun: an empty step goes through it, after them."""
        if self._wants_events is not None:
            await self._writer.run(_nothing)
        now = self.now()
        state = await self._read_state(channel_id, now)
        return self._level_event(state, now), state.last_seq

    async def history(self, channel_id: str, *, after: int = 0, limit: int = 50) -> wire.HistoryPage:
        await self._read_state(channel_id, self.now())
        messages = await self._database.read(repo.history, channel_id, after, limit + 1)
        page = messages[:limit]
        return wire.HistoryPage(
            channel_id=channel_id,
            messages=[message_view(m) for m in page],
            next_after=page[-1].seq if page else after,
            has_more=len(messages) > limit,
        )

    async def recent(self, channel_id: str, limit: int) -> list[wire.MessageView]:
        """The last ``limit`` messages, oldest first."""
        return [message_view(m) for m in await self._database.read(repo.recent_history, channel_id, limit)]

    # --- administration ---------------------------------------------------------------------------------

    async def channels(self) -> wire.ChannelList:
        rows = await self._database.read(repo.channel_ids)
        return wire.ChannelList(
            channels=[wire.ChannelSummary(channel_id=cid, enabled=enabled, last_seq=seq) for cid, enabled, seq in rows]
        )

    async def settings(self, channel_id: str) -> wire.SettingsView:
        state = await self._read_state(channel_id, self.now())
        return self._settings_view(state)

    def _settings_view(self, state: ChannelState) -> wire.SettingsView:
        names = {pid: self._name(pid) for pid in self.personas}
        return settings_view(state.channel_id, state.settings, names)

    async def ensure_channel(self, channel_id: str, changes: Mapping[str, Any] | None = None) -> wire.SettingsView:
        """Create the channel with the default settings plus ``changes``; if it exists, apply ``changes`` to it."""
        settings = patch_settings(self._defaults, changes or {})

        def run(tx: WriteTx) -> wire.SettingsView:
            state = tx.channel(channel_id)
            if state is not None:
                if not changes:
                    return self._settings_view(state)
                return self._save_settings(tx, state, patch_settings(state.settings, changes))
            created = tx.create_channel(ChannelState(channel_id, settings, history_since=tx.now()))
            view = self._settings_view(created)
            tx.emit(wire.SettingsEvent(channel_id=channel_id, settings=view))
            return view

        return await self._writer.run(run, (channel_id,))

    async def update_settings(self, channel_id: str, changes: Mapping[str, Any]) -> wire.SettingsView:
        """Change settings; the result is checked as a whole, and nothing changes if any part is invalid."""

        def step(tx: WriteTx, state: ChannelState) -> wire.SettingsView:
            return self._save_settings(tx, state, patch_settings(state.settings, changes))

        return await self._change(channel_id, step)

    async def set_persona(
        self, channel_id: str, persona_id: str, *, enabled: bool | None = None, muted: bool | None = None
    ) -> wire.SettingsView:
        self._require_persona(persona_id)

        def step(tx: WriteTx, state: ChannelState) -> wire.SettingsView:
            policy = state.settings.policy(persona_id)
            policy = PersonaPolicy(
                enabled=policy.enabled if enabled is None else enabled, muted=policy.muted if muted is None else muted
            )
            return self._save_settings(tx, state, state.settings.with_policy(persona_id, policy))

        return await self._change(channel_id, step)

    def _save_settings(self, tx: WriteTx, state: ChannelState, settings: ChannelSettings) -> wire.SettingsView:
        now = tx.now()
        before = rules.level(state, now)
        next_state = replace(state, settings=settings)
        if settings.enabled and not state.settings.enabled:
            # What was said while the fleet was off here is not read back by a catch-up after a restart.
            next_state = replace(next_state, history_since=now)
        tx.replace_state(next_state)
        view = self._settings_view(next_state)
        tx.emit(wire.SettingsEvent(channel_id=state.channel_id, settings=view))
        if rules.level(next_state, now) != before or settings.capacity != state.settings.capacity:
            tx.emit(self._level_event(next_state, now))
        return view

    async def clear_history(self, channel_id: str) -> int:
        """Delete the channel's messages (settings and the spend ledger stay). Returns how many were deleted."""

        def step(tx: WriteTx, state: ChannelState) -> int:
            deleted = tx.delete_history(channel_id)
            transition = rules.clear_history(state, tx.now())
            tx.replace_state(transition.state)
            tx.emit(wire.ClearedEvent(channel_id=channel_id, last_seq=state.last_seq))
            return deleted

        return await self._change(channel_id, step)
