"""The personas that post through channel webhooks (one-application mode): no bot account, no gateway session.

One discord.py client, logged in over REST with the arbiter's bot token, finds or makes each channel's webhook
(``bots.platforms.webhook.ChannelHooks``). The personas hear their channels on the arbiter's event stream, as every
persona does, and join the Discord channels the arbiter has the fleet enabled in: there is no gateway to say that a
channel was enabled, so the list is read again every ``refresh_s``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from bots.errors import BotError

if TYPE_CHECKING:
    from collections.abc import Sequence

    import discord

    from bots.platforms.webhook import ChannelHooks
    from bots.runtime import PersonaRuntime

__all__ = ("WebhookPersonas",)

_log = logging.getLogger(__name__)

_FOLLOW_WITHIN_S = 10.0  # how long a newly joined channel may take to start following before the next is looked at


class WebhookPersonas:
    def __init__(
        self,
        runtimes: Sequence[PersonaRuntime],
        client: discord.Client,
        hooks: ChannelHooks,
        *,
        refresh_s: float = 10.0,
    ) -> None:
        """``client``: not logged in yet (``run`` logs it in); ``hooks``: the webhooks the runtimes' platforms post
        through, on ``client``."""
        self.runtimes = list(runtimes)
        self.client = client
        self.hooks = hooks
        self._refresh_s = refresh_s
        hooks.on_ready(self._channel_ready)

    async def run(self, token: str) -> None:
        """Log in, register the personas with the arbiter, then keep joining the enabled channels until cancelled.
        Raises ``discord.LoginFailure`` if Discord refuses the token."""
        await self.client.login(token)
        for runtime in self.runtimes:
            try:
                await runtime.start()
            except BotError as error:
                _log.error("persona=%s cannot register with the arbiter: %s", runtime.persona.id, error)
            _log.info("persona=%s is on Discord through webhooks of %s", runtime.persona.id, self.client.user)
        while True:
            await self._join_enabled()
            await asyncio.sleep(self._refresh_s)

    async def _join_enabled(self) -> None:
        if not self.runtimes:
            return
        try:
            listed = await self.runtimes[0].arbiter.channels()
        except BotError as error:
            _log.warning("webhook personas cannot list channels: %s", error)
            return
        for channel in listed.channels:
            channel_id = channel.channel_id
            # Other channels (local rooms, say) have ids that are not Discord snowflakes.
            if not channel.enabled or not channel_id.isdigit():
                continue
            joining = [r for r in self.runtimes if not r.closed and channel_id not in r.channels]
            if not joining:
                continue
            # Ready before anyone posts; if it cannot be had, the personas stay quiet there (no model call) and
            # the reason is said once.
            await self.hooks.prepare(channel_id)
            workers = [(runtime, runtime.join(channel_id)) for runtime in joining]
            for runtime, worker in workers:
                try:
                    async with asyncio.timeout(_FOLLOW_WITHIN_S):
                        await worker.ready()
                except TimeoutError:
                    _log.warning(
                        "persona=%s: channel %s does not answer yet; it keeps trying", runtime.persona.id, channel_id
                    )
                else:
                    _log.info("persona=%s takes part in channel %s", runtime.persona.id, channel_id)

    def _channel_ready(self, channel_id: str) -> None:
        """The channel has its webhook again: its personas look whether to speak, and tell the arbiter they can."""
        for runtime in self.runtimes:
            if not runtime.closed and channel_id in runtime.channels:
                runtime.join(channel_id).permissions_changed()

    async def close(self) -> None:
        await self.client.close()
