"""ArbiterService: loads state, asks the core, persists, publishes. The only caller of ``arbiter.core``.

The HTTP API, the moderators' slash commands and the local room all call these methods: one code path.
Changes run through the storage's writer (one transaction per batch); reads go straight to storage (both typed
against ``arbiter.storage.port``). The service is assembled from its parts: the shared plumbing (``service_core``),
observing the platform (``intake``) administering channels (``administration``) and the personas' memories
(``memories``); speaking and reading are here.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from arbiter import contract as wire
from arbiter.administration import ChannelAdministration
from arbiter.core import rules
from arbiter.core.errors import InvalidRequest
from arbiter.core.models import Message, PersonaInfo, SpendState, Tier
from arbiter.core.usage import DEFAULT_READ_RATE, DEFAULT_WRITE_RATE, budget_tokens
from arbiter.events import PersonaEvent
from arbiter.intake import IntakeMark, PlatformIntake
from arbiter.memories import PersonaMemory
from arbiter.views import (
    claim_result,
    level_event,
    memory_view,
    message_view,
    persona_view,
    release_result,
    speak_result,
    status_event_json,
    status_view,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from arbiter.core.models import ChannelState
    from arbiter.storage.port import StepTx

__all__ = ("ArbiterService", "IntakeMark")

_log = logging.getLogger(__name__)


def _nothing(_tx: StepTx) -> None:
    """A step that changes nothing: run through the writer, it returns once every step queued before it has."""


class ArbiterService(PlatformIntake, ChannelAdministration, PersonaMemory):
    """Turn-taking for every channel: what personas and agents spend and say, what they read, what the platform
    shows (``PlatformIntake``), what admins set (``ChannelAdministration``) and what each persona remembers of a
    conversation (``PersonaMemory``)."""

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
        self.registry.require(persona_id)

        def step(tx: StepTx, state: ChannelState) -> wire.SpeakResult:
            now = tx.now()
            transition = rules.consume(
                state, self.registry.author(persona_id), text, now,
                spend_id=self._new_id(), tier=tier, amount=amount, based_on_seq=based_on_seq,
            )  # fmt: skip
            self._commit(tx, state, transition)
            return speak_result(transition.state, now, transition.outcome)

        return await self._change(channel_id, step)

    async def claim(
        self,
        channel_id: str,
        persona_id: str,
        tier: Tier,
        *,
        based_on_seq: int | None = None,
        notes: bool = False,
        own_lines: int = 0,
    ) -> wire.ClaimResult:
        """Hold a tier's cost. A granted claim comes with what the persona's first generation here needs, saving it
        requests: ``notes``, its notes here; ``own_lines``, up to that many of its own last lines."""
        self.registry.require(persona_id)

        def step(tx: StepTx, state: ChannelState) -> wire.ClaimResult:
            now = tx.now()
            transition = rules.claim(state, persona_id, tier, now, claim_id=self._new_id(), based_on_seq=based_on_seq)
            self._commit(tx, state, transition)
            result = claim_result(transition.state, now, transition.outcome)
            if result.granted:
                found: dict[str, object] = {}
                if notes:
                    memories = tx.memories(channel_id, persona_id)
                    found["memory"] = memory_view(memories[0]) if memories else None
                if own_lines:
                    said = tx.said_by(channel_id, persona_id, own_lines)
                    found["own_lines"] = [message_view(message) for message in said]
                return result.model_copy(update=found) if found else result
            # The persona planned from a status a claim has since moved: the fresh one saves it asking (or planning
            # the same refusal again) on its next look.
            name = self.registry.name(persona_id)
            status = status_view(transition.state, now, persona_id=persona_id, display_name=name)
            return result.model_copy(update={"status": status})

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
        memory: wire.MemoryUpdate | None = None,
    ) -> wire.SpeakResult:
        """Speak on a claim. ``memory``: the persona's new dialogue state, stored with the message if it is granted
        (a refused persona gives its claim back, and its state with it)."""
        self.registry.require(persona_id)

        def step(tx: StepTx, state: ChannelState) -> wire.SpeakResult:
            now = tx.now()
            replay = self._replayed_speech(tx, state, persona_id, claim_id, text=text)
            if replay is not None:
                return speak_result(state, now, replay)
            self._check_memory(state, memory)
            transition = rules.speak(
                state, self.registry.author(persona_id), claim_id, text, now, tier=tier, based_on_seq=based_on_seq
            )
            granted = isinstance(transition.outcome, rules.SpeechGranted)
            if granted:
                self._check_not_cleared(state, memory)  # (a refused speech keeps no notes: the refusal says why)
            self._commit(tx, state, transition)
            if granted:
                self._store_memory(tx, channel_id, persona_id, memory)
            return speak_result(transition.state, now, transition.outcome)

        return await self._change(channel_id, step, spend_ids=[claim_id])

    @staticmethod
    def _replayed_speech(
        tx: StepTx, state: ChannelState, persona_id: str, claim_id: str, *, text: str
    ) -> rules.SpeechGranted | None:
        """A speak repeated after a lost answer gets the same answer, not a second message."""
        spend = state.spend(claim_id)
        if spend is None or spend.persona_id != persona_id or spend.state is not SpendState.SPOKEN:
            return None
        if spend.message_seq is None:
            return None
        message = tx.message(state.channel_id, spend.message_seq)
        if message is None or message.text != text or not message.visible:
            return None
        return rules.SpeechGranted(spend, message)

    async def release(
        self, channel_id: str, persona_id: str, claim_id: str, *, memory: wire.MemoryUpdate | None = None
    ) -> wire.ReleaseResult:
        """Give a claim back (a pass); ``memory``, the persona's new dialogue state, is stored with it."""
        self.registry.require(persona_id)

        def step(tx: StepTx, state: ChannelState) -> wire.ReleaseResult:
            now = tx.now()
            self._check_memory(state, memory)
            self._check_not_cleared(state, memory)
            transition = rules.release(state, persona_id, claim_id, now)
            self._commit(tx, state, transition)
            self._store_memory(tx, channel_id, persona_id, memory)
            return release_result(transition.state, now, transition.outcome)

        return await self._change(channel_id, step, spend_ids=[claim_id])

    async def retract(self, channel_id: str, persona_id: str, seq: int) -> wire.RetractResult:
        """Take back a granted message whose platform post failed, refunding its cost at once."""
        self.registry.require(persona_id)

        def step(tx: StepTx, state: ChannelState) -> wire.RetractResult:
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
        self.registry.require(persona_id)

        def step(tx: StepTx, state: ChannelState) -> wire.MessageView:
            message = self._message(tx, channel_id, seq)
            other = tx.message_by_platform_id(channel_id, platform_message_id)
            if other is not None and other.seq != seq:
                raise InvalidRequest(
                    f"platform message {platform_message_id} is already message {other.seq}",
                    field="platform_message_id",
                )
            transition = self._linked(tx, state, persona_id, message, platform_message_id)
            self._commit(tx, state, transition)
            assert isinstance(transition.outcome, Message)
            return message_view(transition.outcome)

        return await self._change(channel_id, step)

    async def report_usage(
        self,
        channel_id: str,
        persona_id: str,
        prompt_tokens: int,
        completion_tokens: int,
        *,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        cache_read_rate: float = DEFAULT_READ_RATE,
        cache_write_rate: float = DEFAULT_WRITE_RATE,
    ) -> wire.UsageResult:
        """Count one call's tokens: as reported, for the persona's usage; at their prices, against the budget
        (``prompt_tokens`` is every input token, the prompt cache's reads and writes among them)."""
        self.registry.require(persona_id)
        weighed = budget_tokens(
            prompt_tokens,
            completion_tokens,
            cache_read=cache_read_tokens,
            cache_write=cache_write_tokens,
            read_rate=cache_read_rate,
            write_rate=cache_write_rate,
        )

        def step(tx: StepTx, state: ChannelState) -> wire.UsageResult:
            now = tx.now()
            tokens = (prompt_tokens, completion_tokens, cache_read_tokens, cache_write_tokens)
            tx.add_usage(channel_id, persona_id, day=rules.utc_day(now), tokens=tokens)
            transition = rules.record_usage(state, weighed, now)
            tx.replace_state(transition.state)
            return wire.UsageResult(
                tokens_today=rules.tokens_today(transition.state, now),
                daily_token_budget=state.settings.daily_token_budget,
            )

        return await self._change(channel_id, step)

    # --- personas -----------------------------------------------------------------------------------------

    async def register_persona(
        self,
        persona_id: str,
        display_name: str,
        aliases: Sequence[str] = (),
        *,
        color: str | None = None,
        platform_user_id: str | None = None,
        cannot_speak: str | None = None,
    ) -> None:
        """Remember how a persona presents itself: its names (messages that name it give it the floor), its
        colour (the local room), its platform account (its own messages there are recognised), and why it cannot
        speak, if it cannot (then no message addresses it, and the room and the moderators see why)."""
        self.registry.require(persona_id)
        info = PersonaInfo(persona_id, display_name, tuple(aliases), color, platform_user_id, cannot_speak)

        def step(tx: StepTx) -> None:
            tx.save_persona(info)
            view = persona_view(info, kind=self.registry.kind(persona_id))
            tx.emit(PersonaEvent.model_validate(view, from_attributes=True))

        await self._writer.run(step)

    async def load_personas(self) -> None:
        self.registry.update(await self._reads.persona_infos())

    # --- reading ----------------------------------------------------------------------------------------

    async def status(self, channel_id: str, persona_id: str | None = None) -> wire.StatusView:
        now = self.now()
        state = await self._read_state(channel_id, now)
        name = None if persona_id is None else self.registry.name(persona_id)
        return status_view(state, now, persona_id=persona_id, display_name=name)

    async def status_frame(self, channel_id: str, persona_id: str) -> str:
        """The ``StatusEvent`` the multiplexed stream sends for ``status(channel_id, persona_id)``, as its JSON text:
        written in one pass, with no model validated only to be dumped (``views.status_event_json``)."""
        now = self.now()
        state = await self._read_state(channel_id, now)
        name = self.registry.name(persona_id)
        return status_event_json(state, now, channel_id=channel_id, persona_id=persona_id, display_name=name)

    async def usage_today(self, channel_id: str) -> wire.UsageList:
        """Each persona's tokens in the channel today (UTC), the prompt cache's reads and writes apart."""
        used = await self._reads.usage(channel_id, rules.utc_day(self.now()))
        return wire.UsageList(
            channel_id=channel_id,
            personas=[
                wire.PersonaUsageView(
                    persona=persona_id,
                    prompt_tokens=prompt,
                    completion_tokens=completion,
                    requests=requests,
                    cache_read_tokens=read,
                    cache_write_tokens=written,
                )
                for persona_id, (prompt, completion, requests, read, written) in sorted(used.items())
            ],
        )

    async def level_event(self, channel_id: str) -> wire.LevelEvent:
        now = self.now()
        return level_event(await self._read_state(channel_id, now), now)

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
        return level_event(state, now), state.last_seq

    async def history(self, channel_id: str, *, after: int = 0, limit: int = 50) -> wire.HistoryPage:
        messages = await self._reads.history(channel_id, after, limit + 1)
        if not messages:
            # Only a channel that exists has messages: it is looked up only when there are none.
            await self._read_state(channel_id, self.now())
        page = messages[:limit]
        return wire.HistoryPage(
            channel_id=channel_id,
            messages=[message_view(m) for m in page],
            next_after=page[-1].seq if page else after,
            has_more=len(messages) > limit,
        )

    async def recent(self, channel_id: str, limit: int) -> list[wire.MessageView]:
        """The last ``limit`` messages, oldest first."""
        return [message_view(m) for m in await self._reads.recent_history(channel_id, limit)]
