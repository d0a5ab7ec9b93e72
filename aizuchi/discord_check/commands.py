"""``aizuchi discord check``, and the same check as ``aizuchi run`` starts on Discord.

Both read the settings ``aizuchi run`` reads: the arbiter's token and servers (``ARBITER_DISCORD_TOKEN``,
``ARBITER_DISCORD_GUILDS``), the personas ``AIZUCHI_PERSONAS`` names and the token variable each persona file
names, and where Discord is (``AIZUCHI_DISCORD_API_URL``).

The command prints one line per bot, one line per problem (on stderr) and a summary, and ends with status 1 if
there is any problem. At start, ``aizuchi run`` logs a warning per problem and runs on without what is missing; a
refused token and the arbiter's Message Content intent being off are left to the bots' own logging in, which ends
the command (the arbiter's) or the persona with its one line, as before.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import TYPE_CHECKING

from aizuchi.connection import use_discord
from aizuchi.discord_check.check import Account, Problem, check_setup
from aizuchi.discord_check.enabled import enabled_channels
from aizuchi.discord_check.needs import ARBITER, ARBITER_WITH_WEBHOOKS, PERSONA
from bots.persona import load_personas

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from aizuchi.settings import DiscordEndpoints
    from arbiter.contract import ChannelList
    from arbiter.settings import ArbiterSettings
    from bots.persona import Persona
    from bots.settings import BotsSettings

__all__ = ("START_CHECK_S", "check_at_start", "run_check")

_log = logging.getLogger(__name__)

# How long ``aizuchi run`` waits for the check before starting without it (Discord answers in well under a second).
START_CHECK_S = 15.0


def _arbiter_account(settings: ArbiterSettings, *, webhooks: bool) -> Account | None:
    """The arbiter's bot; in one-application mode it also needs Manage Webhooks."""
    if settings.discord_token is None:
        return None
    needs = ARBITER_WITH_WEBHOOKS if webhooks else ARBITER
    return Account("the arbiter's bot", "ARBITER_DISCORD_TOKEN", settings.discord_token.get_secret_value(), needs)


def _persona_account(persona: Persona, token: str) -> Account:
    return Account(f"{persona.id}'s bot", persona.discord_token_env or "its token variable", token, PERSONA)


async def run_check(
    settings: ArbiterSettings, bots: BotsSettings, env: Mapping[str, str], endpoints: DiscordEndpoints
) -> int:
    """``aizuchi discord check``: the report on stdout, each problem on a line of stderr; 1 if there is any."""
    use_discord(endpoints)
    personas = load_personas(bots.personas_dir, bots.personas or None)
    unset: list[Problem] = []
    accounts: list[Account] = []
    arbiter = _arbiter_account(settings, webhooks=bots.webhooks)
    if arbiter is None:
        unset.append(
            Problem("ARBITER_DISCORD_TOKEN is not set: without it aizuchi run opens the local room, not Discord")
        )
    else:
        accounts.append(arbiter)
    for persona in personas:
        token = env.get(persona.discord_token_env or "", "").strip()
        if token:
            accounts.append(_persona_account(persona, token))
        elif bots.webhooks:
            print(f"{persona.id} posts through the channels' webhooks of the arbiter's bot (one-application mode)")
        elif persona.discord_token_env:
            unset.append(Problem(f"{persona.id} has no Discord token: set {persona.discord_token_env} in .env"))
        else:
            unset.append(Problem(f"{persona.id} has no Discord token: its persona file names no discord_token_env"))
    enabled = await enabled_channels(settings.database_url)
    report = await check_setup(accounts, configured_guilds=settings.discord_guilds, enabled=enabled.ids)
    for line in report.found:
        print(line)
    if enabled.why_none is not None:
        checked = "server-wide" if enabled.ids is not None else "server-wide only"
        print(f"note: {enabled.why_none}: checked what each bot's roles grant {checked}")
    for note in report.notes:
        print(f"note: {note}")
    problems = [*unset, *report.problems]
    for problem in problems:
        print(f"problem: {problem.text}", file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s) with the Discord setup ({report.counts()})")
        return 1
    print(f"the Discord setup is ready: {report.counts()}")
    return 0


async def check_at_start(
    settings: ArbiterSettings,
    personas: Sequence[Persona],
    discord_tokens: Mapping[str, str],
    channels: ChannelList,
    *,
    webhooks: bool = False,
    within_s: float = START_CHECK_S,
) -> None:
    """The check as ``aizuchi run`` starts on Discord, before the bots log in: a warning per problem, then on.
    ``discord_tokens``: the personas' that have one; ``channels``: the arbiter's channels; ``webhooks``:
    one-application mode."""
    accounts = [account for account in [_arbiter_account(settings, webhooks=webhooks)] if account is not None]
    accounts += [_persona_account(p, discord_tokens[p.id]) for p in personas if p.id in discord_tokens]
    enabled = [channel.channel_id for channel in channels.channels if channel.enabled]
    try:
        async with asyncio.timeout(within_s):
            report = await check_setup(accounts, configured_guilds=settings.discord_guilds, enabled=enabled)
    except TimeoutError:
        _log.warning("checking the Discord setup took over %.0f s: starting without it", within_s)
        return
    except Exception as error:  # the check is a courtesy: whatever it ran into, the bots say for themselves
        _log.warning("could not check the Discord setup (%s: %s): starting anyway", type(error).__name__, error)
        return
    shown = [problem for problem in report.problems if not problem.said_at_start]
    for problem in shown:
        _log.warning("Discord setup: %s", problem.text)
    for note in report.notes:
        _log.info("Discord setup: %s", note)
    if report.ok:
        _log.info("the Discord setup is ready: %s", report.counts())
