"""Channel administration: the channels, their settings, which personas take part, clearing the history. What
the admin endpoints, the moderators' slash commands and the local room's settings panel call."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from arbiter import contract as wire
from arbiter.core import rules
from arbiter.core.models import ChannelSettings, ChannelState
from arbiter.core.validation import patch_settings
from arbiter.service_core import ServiceCore
from arbiter.views import level_event, settings_view

if TYPE_CHECKING:
    from collections.abc import Mapping

    from arbiter.storage.port import StepTx

__all__ = ("ChannelAdministration",)


class ChannelAdministration(ServiceCore):
    async def channels(self) -> wire.ChannelList:
        rows = await self._reads.channel_ids()
        return wire.ChannelList(
            channels=[wire.ChannelSummary(channel_id=cid, enabled=enabled, last_seq=seq) for cid, enabled, seq in rows]
        )

    async def settings(self, channel_id: str) -> wire.SettingsView:
        state = await self._read_state(channel_id, self.now())
        return self._settings_view(state)

    def _settings_view(self, state: ChannelState) -> wire.SettingsView:
        return settings_view(state.channel_id, state.settings, self.registry.display_names())

    async def ensure_channel(self, channel_id: str, changes: Mapping[str, Any] | None = None) -> wire.SettingsView:
        """Create the channel with the default settings plus ``changes``; if it exists, apply ``changes`` to it."""
        settings = patch_settings(self._defaults, changes or {})

        def run(tx: StepTx) -> wire.SettingsView:
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

        def step(tx: StepTx, state: ChannelState) -> wire.SettingsView:
            return self._save_settings(tx, state, patch_settings(state.settings, changes))

        return await self._change(channel_id, step)

    async def set_persona(
        self, channel_id: str, persona_id: str, *, enabled: bool | None = None, muted: bool | None = None
    ) -> wire.SettingsView:
        self.registry.require(persona_id)

        def step(tx: StepTx, state: ChannelState) -> wire.SettingsView:
            policy = state.settings.policy(persona_id)
            policy = replace(
                policy,
                enabled=policy.enabled if enabled is None else enabled,
                muted=policy.muted if muted is None else muted,
            )
            return self._save_settings(tx, state, state.settings.with_policy(persona_id, policy))

        return await self._change(channel_id, step)

    async def set_standing(self, channel_id: str, persona_id: str, cannot_post: str | None) -> wire.PersonaView:
        """The persona says whether it can post in the channel (``cannot_post``: why not, or None): moderators see
        it in the settings, and one that cannot hands back any floor it has (``rules.stand``)."""
        self.registry.require(persona_id)

        def step(tx: StepTx, state: ChannelState) -> wire.PersonaView:
            transition = rules.stand(state, persona_id, cannot_post)
            if transition.state is not state:
                self._save_settings(tx, state, transition.state.settings, next_state=transition.state)
            return self._settings_view(transition.state).personas[persona_id]

        return await self._change(channel_id, step)

    def _save_settings(
        self, tx: StepTx, state: ChannelState, settings: ChannelSettings, *, next_state: ChannelState | None = None
    ) -> wire.SettingsView:
        """Save ``settings`` (in ``next_state``, when a rule changed more than the settings) and tell the streams."""
        now = tx.now()
        before = rules.level(state, now)
        next_state = replace(next_state or state, settings=settings)
        if settings.enabled and not state.settings.enabled:
            # What was said while the fleet was off here is not read back by a catch-up after a restart.
            next_state = replace(next_state, history_since=now)
        tx.replace_state(next_state)
        view = self._settings_view(next_state)
        tx.emit(wire.SettingsEvent(channel_id=state.channel_id, settings=view))
        if rules.level(next_state, now) != before or settings.capacity != state.settings.capacity:
            tx.emit(level_event(next_state, now))
        return view

    async def clear_history(self, channel_id: str) -> int:
        """Delete the channel's messages and what the personas remembered of them (settings and the spent turns
        stay; claims under way are closed and refunded, see ``rules.clear_history``). Returns how many messages were
        deleted."""

        def step(tx: StepTx, state: ChannelState) -> int:
            deleted = tx.delete_history(channel_id)
            transition = rules.clear_history(state, tx.now())
            tx.replace_state(transition.state)
            tx.emit(wire.ClearedEvent(channel_id=channel_id, last_seq=state.last_seq))
            self._commit(tx, state, transition)  # the claims it closed, heard of after the clear
            # What the personas remembered of it goes with it.
            forgotten = tx.delete_memories(channel_id)
            tx.emit(*(wire.MemoryEvent(channel_id=channel_id, persona=pid, memory=None) for pid in forgotten))
            return deleted

        return await self._change(channel_id, step)
