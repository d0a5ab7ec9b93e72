"""Checking the fleet's bots on Discord over its REST API, with discord.py's own calls and its own permission logic.

For each token: who the bot is and its application (a refused token is named by its variable); for the arbiter's
application, the Message Content intent; which servers each bot is in, and which bots are missing from a server
the arbiter is in (or is configured for), with an invite URL granting exactly what it needs; and what each bot
may do in each channel the fleet is enabled in (computed by discord.py from the server's roles, the channel's
overwrites and the bot's member) - or, where no channel is enabled yet, what its roles grant server-wide.

Requests: three per token (the bot, its application, its servers: the same as logging in, plus one), then, if any
channel is enabled, two per server the arbiter is in (the server with its roles, its channels) and one per bot in
each server with an enabled channel (its member). They go out together; discord.py keeps them within Discord's
rate limits.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiohttp
import discord
import yarl

from aizuchi.discord_check.needs import permission_names

if TYPE_CHECKING:
    from collections.abc import Sequence

    from aizuchi.discord_check.needs import Needs

__all__ = ("Account", "Problem", "Report", "check_setup")

_GUILD_PAGE = 200  # Discord's most guilds in one answer

_Place = discord.abc.GuildChannel | discord.Thread


@dataclass(frozen=True)
class Account:
    """A bot to check: whose it is (``the arbiter's bot``), the variable holding its token, and what it needs."""

    who: str
    variable: str
    token: str = field(repr=False)
    needs: Needs


@dataclass(frozen=True)
class Problem:
    """One line saying what is wrong and what to do. ``said_at_start``: ``aizuchi run`` says it anyway as the bot
    logs in (and stops, or the bot does), so its start check leaves it out."""

    text: str
    said_at_start: bool = False


@dataclass
class Report:
    found: list[str] = field(default_factory=list)  # one line per bot Discord knows
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # worth knowing, nothing to fix
    bots: int = 0
    servers: int = 0
    channels: int = 0  # enabled channels (and threads) checked

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, text: str, *, said_at_start: bool = False) -> None:
        if all(problem.text != text for problem in self.problems):
            self.problems.append(Problem(text, said_at_start))

    def counts(self) -> str:
        return (
            f"{_count(self.bots, 'bot')} in {_count(self.servers, 'server')}, "
            f"{_count(self.channels, 'enabled channel')} checked"
        )


@dataclass(frozen=True)
class _Membership:
    name: str
    permissions: discord.Permissions  # what its roles grant there (no overwrites, nothing implied)
    owner: bool


@dataclass
class _Bot:
    account: Account
    client: discord.Client
    user_id: int
    name: str
    application: discord.AppInfo
    guilds: dict[int, _Membership]


@dataclass
class _Server:
    guild: discord.Guild
    channels: dict[int, discord.abc.GuildChannel]
    enabled: list[_Place] = field(default_factory=list)


async def check_setup(
    accounts: Sequence[Account], *, configured_guilds: Sequence[int] = (), enabled: Sequence[str] | None
) -> Report:
    """Check ``accounts`` (the arbiter's, if any, has ``needs.arbiter``) against Discord. ``configured_guilds``:
    ARBITER_DISCORD_GUILDS; ``enabled``: the ids of the channels the fleet is enabled in (None: not known)."""
    report = Report()
    clients = [discord.Client(intents=discord.Intents(guilds=True)) for _ in accounts]
    try:
        results = await asyncio.gather(*(_log_in(a, c) for a, c in zip(accounts, clients, strict=True)))
        bots = [result for result in results if isinstance(result, _Bot)]
        for result in results:
            if isinstance(result, Problem):
                report.add(result.text, said_at_start=result.said_at_start)
        report.bots = len(bots)
        arbiter = next((bot for bot in bots if bot.account.needs.arbiter), None)
        _describe(report, bots, arbiter)
        _same_bots(report, bots)
        scope = _scope(bots, arbiter, configured_guilds)
        report.servers = len(scope)
        _missing(report, bots, arbiter, scope, configured_guilds)
        await _permissions(report, bots, arbiter, scope, enabled)
    finally:
        for client in clients:
            await client.close()
    return report


async def _log_in(account: Account, client: discord.Client) -> _Bot | Problem:
    try:
        user = await client.http.static_login(account.token)  # GET /users/@me: who, and whether the token works
        application = await client.application_info()
        guilds = await _guilds_of(client)
    except discord.LoginFailure:
        return Problem(
            f"Discord refused {account.who}'s token ({account.variable}): copy it again from the Developer Portal "
            "(Bot > Reset Token) into .env",
            said_at_start=True,
        )
    except discord.HTTPException as error:
        return Problem(f"{account.who} ({account.variable}): Discord answered {_answer(error)}")
    except discord.DiscordException as error:  # an answer discord.py could not read
        return Problem(f"{account.who} ({account.variable}): {type(error).__name__}: {error}")
    except (aiohttp.ClientError, OSError) as error:
        return Problem(f"cannot reach Discord at {_api_host()} ({type(error).__name__}: {error})")
    return _Bot(account, client, int(user["id"]), user["username"], application, guilds)


async def _guilds_of(client: discord.Client) -> dict[int, _Membership]:
    found: dict[int, _Membership] = {}
    after: int | None = None
    while True:
        page = await client.http.get_guilds(_GUILD_PAGE, after=after, with_counts=False)
        for data in page:
            permissions = discord.Permissions(int(data.get("permissions") or 0))
            found[int(data["id"])] = _Membership(data["name"], permissions, bool(data.get("owner")))
        if len(page) < _GUILD_PAGE:
            return found
        after = int(page[-1]["id"])


def _describe(report: Report, bots: list[_Bot], arbiter: _Bot | None) -> None:
    for bot in bots:
        app = bot.application
        line = (
            f"{bot.account.who} ({bot.account.variable}): {bot.name} (id {bot.user_id}), application {app.name!r} "
            f"(id {app.id}), in {_count(len(bot.guilds), 'server')}"
        )
        if bot is arbiter:
            if app.flags.gateway_message_content or app.flags.gateway_message_content_limited:
                line += ", Message Content intent on"
            else:
                report.add(
                    f"the Message Content intent is off for the arbiter's application ({app.name!r}, id {app.id}): "
                    "switch it on in the Developer Portal (Bot > Privileged Gateway Intents) for the application of "
                    f"{bot.account.variable}",
                    said_at_start=True,
                )
            if app.interactions_endpoint_url:
                report.add(
                    f"the arbiter's application ({app.name!r}) has an Interactions Endpoint URL "
                    f"({app.interactions_endpoint_url}): Discord sends the slash commands there, not to the bot; "
                    "clear it in the Developer Portal (General Information)"
                )
        report.found.append(line)


def _same_bots(report: Report, bots: list[_Bot]) -> None:
    by_user: dict[int, list[_Bot]] = defaultdict(list)
    for bot in bots:
        by_user[bot.user_id].append(bot)
    for same in by_user.values():
        if len(same) > 1:
            variables = " and ".join(bot.account.variable for bot in same)
            report.add(
                f"{variables} hold the token of the same bot ({same[0].name}, id {same[0].user_id}): the arbiter "
                "and each persona need an application of their own"
            )


def _scope(bots: list[_Bot], arbiter: _Bot | None, configured: Sequence[int]) -> dict[int, str]:
    """The servers the fleet is meant for: the arbiter's, and ARBITER_DISCORD_GUILDS; each with a label."""
    ids = list(arbiter.guilds) if arbiter is not None else []
    ids += [guild_id for guild_id in configured if guild_id not in ids]
    names = {guild_id: m.name for bot in bots for guild_id, m in bot.guilds.items()}
    return {gid: f"server {names[gid]!r} ({gid})" if gid in names else f"server {gid}" for gid in ids}


def _missing(
    report: Report, bots: list[_Bot], arbiter: _Bot | None, scope: dict[int, str], configured: Sequence[int]
) -> None:
    if not scope:
        for bot in bots:
            if not bot.guilds:
                report.add(f"{bot.account.who} is in no server: invite it with {_invite(bot)}")
        return
    for guild_id, label in scope.items():
        for bot in bots:
            if guild_id not in bot.guilds:
                named = " (ARBITER_DISCORD_GUILDS)" if bot is arbiter and guild_id in configured else ""
                report.add(f"{bot.account.who} is not in {label}{named}: invite it with {_invite(bot, guild_id)}")


def _invite(bot: _Bot, guild_id: int | None = None) -> str:
    url = bot.account.needs.invite_url(bot.application.id, guild_id)
    if bot.application.bot_require_code_grant:
        url += " (first switch off Requires OAuth2 Code Grant under Bot in the Developer Portal, or the invite fails)"
    return url


# --- permissions -------------------------------------------------------------------------------------------------


async def _permissions(
    report: Report, bots: list[_Bot], arbiter: _Bot | None, scope: dict[int, str], enabled: Sequence[str] | None
) -> None:
    wanted = {int(channel_id) for channel_id in enabled or () if channel_id.isdigit()}
    servers: dict[int, _Server] = {}
    if arbiter is not None and wanted:
        servers = await _servers(report, arbiter, [gid for gid in scope if gid in arbiter.guilds], scope)
        await _place(report, arbiter, servers, wanted)
    for guild_id, label in scope.items():
        server = servers.get(guild_id)
        if server is not None and server.enabled:
            await _in_channels(report, bots, server, label)
        else:
            _server_wide(report, bots, guild_id, label)


async def _servers(report: Report, arbiter: _Bot, guild_ids: list[int], scope: dict[int, str]) -> dict[int, _Server]:
    async def fetch(guild_id: int) -> _Server | None:
        try:
            guild = await arbiter.client.fetch_guild(guild_id, with_counts=False)
            channels = await guild.fetch_channels()
        except discord.HTTPException as error:
            report.notes.append(f"could not read the channels of {scope[guild_id]}: Discord answered {_answer(error)}")
            return None
        except discord.DiscordException as error:
            report.notes.append(f"could not read the channels of {scope[guild_id]}: {error}")
            return None
        return _Server(guild, {channel.id: channel for channel in channels})

    fetched = await asyncio.gather(*(fetch(guild_id) for guild_id in guild_ids))
    return {server.guild.id: server for server in fetched if server is not None}


async def _place(report: Report, arbiter: _Bot, servers: dict[int, _Server], wanted: set[int]) -> None:
    """Put each enabled channel in its server; one Discord does not list with a server's channels is a thread (its
    channel's permissions apply), or gone."""
    unplaced = set(wanted)
    for server in servers.values():
        for channel_id in sorted(wanted & set(server.channels)):
            server.enabled.append(server.channels[channel_id])
            unplaced.discard(channel_id)

    async def find(channel_id: int) -> None:
        try:
            found = await arbiter.client.fetch_channel(channel_id)
        except discord.Forbidden as error:
            report.add(
                f"the arbiter's bot may not see enabled channel {channel_id} (Discord answered {_answer(error)}): "
                "allow View Channel for its role there"
            )
            return
        except discord.HTTPException as error:
            report.notes.append(f"enabled channel {channel_id} is not on Discord ({_answer(error)}): deleted?")
            return
        except discord.DiscordException as error:
            report.notes.append(f"enabled channel {channel_id}: {error}")
            return
        server = servers.get(getattr(getattr(found, "guild", None), "id", 0))
        parent = None if server is None else server.channels.get(getattr(found, "parent_id", None) or 0)
        if isinstance(found, discord.Thread) and server is not None and parent is not None:
            server.enabled.append(found)
        else:
            report.notes.append(f"enabled channel {channel_id} is in no server the arbiter's bot is in")

    await asyncio.gather(*(find(channel_id) for channel_id in sorted(unplaced)))


async def _in_channels(report: Report, bots: list[_Bot], server: _Server, label: str) -> None:
    present = [bot for bot in bots if server.guild.id in bot.guilds]

    async def member(bot: _Bot) -> discord.Member | None:
        try:
            return await server.guild.fetch_member(bot.user_id)
        except discord.NotFound:
            return None  # it left since it listed its servers
        except discord.HTTPException as error:
            report.notes.append(f"could not look {bot.account.who} up in {label}: Discord answered {_answer(error)}")
            return None

    members = await asyncio.gather(*(member(bot) for bot in present))
    report.channels += len(server.enabled)
    for place in server.enabled:
        thread = isinstance(place, discord.Thread)
        channel = server.channels[place.parent_id] if isinstance(place, discord.Thread) else place
        where = f"thread {place.name!r} ({place.id}) of #{channel.name}" if thread else f"#{place.name} ({place.id})"
        for bot, found in zip(present, members, strict=True):
            if found is None:
                continue
            has = channel.permissions_for(found)
            lacking = bot.account.needs.lacking(has, thread=thread)
            if not lacking:
                continue
            if not bot.account.needs.arbiter and not has.view_channel:
                # A persona kept out of a channel takes no part there: that may well be meant.
                report.notes.append(f"{bot.account.who} does not see {where} of {label}: it takes no part there")
                continue
            report.add(
                f"{bot.account.who} lacks {', '.join(permission_names(lacking))} in {where} of {label}: allow "
                f"{_them(lacking)} for its role in #{channel.name} (Edit Channel > Permissions)"
            )


def _server_wide(report: Report, bots: list[_Bot], guild_id: int, label: str) -> None:
    """No channel enabled there (or none known): what each bot's roles grant in the whole server."""
    for bot in bots:
        membership = bot.guilds.get(guild_id)
        if membership is None or membership.owner:
            continue
        lacking = bot.account.needs.lacking_anywhere(membership.permissions)
        if lacking:
            report.add(
                f"{bot.account.who} lacks {', '.join(permission_names(lacking))} in {label} (its roles grant "
                f"{_them(lacking)} nowhere, and no channel is enabled there yet to check): give {_them(lacking)} to "
                f"its role {bot.name!r} (Server Settings > Roles)"
            )


# --- wording -----------------------------------------------------------------------------------------------------


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"


def _answer(error: discord.HTTPException) -> str:
    return f"{error.status} {error.text or error.response.reason}"


def _them(bits: int) -> str:
    return "them" if bits & (bits - 1) else "it"


def _api_host() -> str:
    """Where discord.py was pointed (``use_discord``): Discord itself, or a Discord-compatible server."""
    api = yarl.URL(discord.http.Route.BASE)
    return f"{api.host}:{api.explicit_port}" if api.explicit_port is not None else str(api.host)
