"""``aizuchi <command>``: run the arbiter, the fleet, the checks and the benchmarks."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import re
import signal
import sys
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsError

from aizuchi.logs import configure_logging

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Sequence

__all__ = ("main",)

_log = logging.getLogger("aizuchi")


# The cyclic garbage collector's thresholds for a long-running process: (allocations before a young collection, young
# collections before a middle one, middle ones before a full one). A fleet holds hundreds of thousands of long-lived
# objects (a worker per persona and channel, their windows, the arbiter's channel states) and makes a stream of
# short-lived ones (frames, statuses, requests). With Python's defaults (700, 10, 10) a full collection, which walks
# every long-lived object with the event loop stopped (65 ms at six personas in a thousand channels), came every few
# seconds under load, and set the slowest looks' delay: ``aizuchi bench fleet`` measured p99 219 ms with them and
# 112 ms with these. Nothing is left uncollected; the young are collected a fourteenth as often.
_COLLECTOR_THRESHOLDS = (10_000, 10, 10)


def _run(coro_factory: Callable[[], Coroutine[Any, Any, int | None]]) -> int:
    """Run until done, Ctrl-C or SIGTERM; both signals cancel the main task so every resource closes cleanly."""
    gc.set_threshold(*_COLLECTOR_THRESHOLDS)

    async def guarded() -> int | None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, task.cancel)
        try:
            return await coro_factory()
        except asyncio.CancelledError:
            _log.info("stopped")
            return 0

    loop_factory = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is not built for every platform
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(guarded()) or 0


S = TypeVar("S", bound=BaseSettings)


def _settings(kind: type[S], **overrides: Any) -> S:
    """``kind`` from the environment and .env; a value that cannot even be decoded is named by its variable."""
    try:
        return kind(**overrides)
    except SettingsError as error:
        # A variable that holds a list or a mapping must be JSON; pydantic-settings names the field, not the variable.
        found = re.search(r'field "(\w+)"', str(error))
        variable = f"{kind.model_config.get('env_prefix', '')}{found.group(1)}".upper() if found else "a setting"
        raise _Undecodable(f"{variable} is not valid JSON") from None


class _Undecodable(Exception):
    pass


# The commands below read their settings before importing what runs them (aizuchi.run: the arbiter, its storage and
# the fleet, about a second of CPU): a settings mistake ends the command without paying for it.


def _arbiter(args: argparse.Namespace) -> int:
    from aizuchi.settings import DiscordEndpoints, DiscordReconnects
    from arbiter.settings import ArbiterSettings

    overrides = {key: value for key, value in (("host", args.host), ("port", args.port)) if value is not None}
    settings, endpoints = _settings(ArbiterSettings, **overrides), _settings(DiscordEndpoints)
    reconnects = _settings(DiscordReconnects)
    from aizuchi.run import run_arbiter

    configure_logging(settings.log_level)
    return _run(lambda: run_arbiter(settings, endpoints, reconnects=reconnects))


def _run_all(args: argparse.Namespace) -> int:
    from aizuchi.settings import DiscordEndpoints, DiscordReconnects
    from arbiter.settings import ArbiterSettings
    from bots.settings import BotsSettings, Environment

    overrides = {key: value for key, value in (("host", args.host), ("port", args.port)) if value is not None}
    settings = _settings(ArbiterSettings, **overrides)
    bots, endpoints, reconnects = _settings(BotsSettings), _settings(DiscordEndpoints), _settings(DiscordReconnects)
    env = Environment.read()
    from aizuchi.run import run_all

    configure_logging(settings.log_level)
    return _run(lambda: run_all(settings, bots, env, endpoints, reconnects=reconnects))


def _bots(args: argparse.Namespace) -> int:
    from aizuchi.settings import DiscordEndpoints, DiscordReconnects
    from bots.settings import BotsSettings, Environment

    bots, endpoints, env = _settings(BotsSettings), _settings(DiscordEndpoints), Environment.read()
    reconnects = _settings(DiscordReconnects)
    from aizuchi.run import run_bots

    configure_logging(bots.log_level)
    return _run(lambda: run_bots(bots, env, endpoints, args.persona or None, reconnects=reconnects))


def _discord_check(args: argparse.Namespace) -> int:
    from aizuchi.settings import DiscordEndpoints
    from arbiter.settings import ArbiterSettings
    from bots.settings import BotsSettings, Environment

    settings, bots, endpoints = _settings(ArbiterSettings), _settings(BotsSettings), _settings(DiscordEndpoints)
    env = Environment.read()
    from aizuchi.discord_check import run_check

    configure_logging("WARNING")
    return _run(lambda: run_check(settings, bots, env, endpoints))


def _personas_check(args: argparse.Namespace) -> int:
    from pathlib import Path

    from bots.check import check_personas
    from bots.settings import BotsSettings, Environment

    settings, env = _settings(BotsSettings), Environment.read()
    directory = Path(args.dir) if args.dir else settings.personas_dir
    report = check_personas(directory, settings.profiles_file, env)
    for persona in report.personas:
        token = persona.discord_token_env or "-"
        state = "set" if persona.discord_token_env and env.get(persona.discord_token_env) else "not set"
        print(
            f"{persona.id:<10} {persona.display_name:<10} {persona.language}  profile={persona.provider:<10}"
            f" talkativeness={persona.talkativeness:.2f}"
            + (f"  emoji {' '.join(e.name for e in persona.nod_emojis)}" if persona.nod_emojis else "")
            + f"  discord token {token} ({state})"
        )
    for warning in report.warnings:
        print(f"warning: {warning}")
    for error in report.errors:
        print(f"error: {error}", file=sys.stderr)
    print(f"{len(report.personas)} persona(s) checked: " + ("ok" if report.ok else f"{len(report.errors)} error(s)"))
    return 0 if report.ok else 1


def _personas_import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from bots.card_file import CardError, read_card
    from bots.cards import card_to_persona
    from bots.persona_file import PersonaFileExists, render_persona, write_persona
    from bots.settings import BotsSettings

    directory = Path(args.out) if args.out else _settings(BotsSettings).personas_dir
    source = Path(args.card)
    try:
        card = read_card(source)
        imported = card_to_persona(card, persona_id=args.id, language=args.language, provider=args.provider)
        persona_id = imported.persona["id"]
        header = [
            f"{imported.persona['display_name']}: imported from {source.name}, {card.describe()}, by"
            " `aizuchi personas import`.",
            "The comments say where each part came from; what the card held that has no place here was listed",
            "when it was imported. Change its color if you like, and tune big_five and talkativeness to the character.",
        ]
        text = render_persona(imported.persona, imported.sources, header)
        path, persona = write_persona(directory, text, persona_id, replace=args.force)
    except (CardError, PersonaFileExists) as error:
        print(f"aizuchi: {error}", file=sys.stderr)
        return 2
    print(f"wrote {path}: {persona.display_name} ({persona.language}), from {card.describe()}")
    for line in imported.left_out:
        print(f"left out: {line}")
    for line in imported.filled_in:
        print(f"filled in: {line}")
    print(f"next: aizuchi personas check, then run it with AIZUCHI_PERSONAS={persona.id}")
    return 0


def _bench_arbiter(args: argparse.Namespace) -> int:
    from bench.arbiter_load import run_benchmark

    configure_logging("WARNING")
    return _run(lambda: run_benchmark(args))


def _bench_fleet(args: argparse.Namespace) -> int:
    from bench.fleet import run_benchmark

    configure_logging("WARNING")
    return _run(lambda: run_benchmark(args))


def _add_benches(commands: Any, personas_dir: object) -> None:
    bench = commands.add_parser("bench", help="run a benchmark and print its numbers")
    benches = bench.add_subparsers(dest="bench", required=True, metavar="<benchmark>")
    _add_arbiter_bench(benches)
    talk = benches.add_parser("conversation", help="default mode against tool-loop mode on one scripted conversation")
    talk.add_argument("--personas", default="rin,theo,juno", help="persona ids (3 to 5 make sense)")
    talk.add_argument("--personas-dir", default=str(personas_dir), help="where the persona files are")
    talk.add_argument("--mode", choices=["decide", "tool-loop", "both"], default="both")
    talk.add_argument("--lines", type=int, default=60, help="the person's lines in the script (default 60)")
    talk.add_argument("--every", type=float, default=20.0, help="conversation seconds between the person's lines")
    talk.add_argument("--tail", type=float, default=60.0, help="conversation seconds of quiet after the last line")
    talk.add_argument("--latency", type=float, default=1.0, help="the provider's seconds per request")
    talk.add_argument("--speed", type=float, default=20.0, help="how much faster than the clock time runs")
    talk.add_argument("--seed", type=int, default=7)
    talk.add_argument(
        "--transcript",
        metavar="FILE",
        help="write the conversation as [speaker] text lines (FILE.<mode>.ext for each of both modes)",
    )
    _add_confinement(talk, "the arbiter's API listens on PORT")
    talk.set_defaults(func=_bench_conversation)
    _add_fleet_bench(benches, personas_dir)


def _add_fleet_bench(benches: Any, personas_dir: object) -> None:
    fleet = benches.add_parser("fleet", help="N personas in C channels with people talking at R messages a second")
    fleet.add_argument("--personas", type=int, default=6, help="personas (default 6; at most the shipped ones)")
    fleet.add_argument("--personas-dir", default=str(personas_dir), help="where the persona files are")
    fleet.add_argument("--channels", type=int, default=1000, help="channels every persona joins (default 1000)")
    fleet.add_argument("--rate", type=float, default=20.0, help="human messages a second, in all (default 20)")
    fleet.add_argument("--seconds", type=float, default=30.0, help="measured duration (default 30)")
    fleet.add_argument(
        "--warmup",
        type=float,
        default=15.0,
        help="seconds of talk before measuring, for the bots' conversations to reach their steady state (default 15)",
    )
    fleet.add_argument(
        "--delay",
        type=float,
        help="the personas' base pause before a look, in seconds (default: as they run, 1.5; the latency is measured"
        " without it; 0 makes every persona look at once)",
    )
    fleet.add_argument("--latency", type=float, default=0.5, help="the scripted provider's seconds per request")
    fleet.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    fleet.add_argument(
        "--postgres-url",
        default="postgresql+asyncpg://postgres@127.0.0.1:5432/postgres",
        help="server to create a scratch database on",
    )
    _add_confinement(fleet, "the arbiter listens on PORT")
    fleet.set_defaults(func=_bench_fleet)


def _bench_conversation(args: argparse.Namespace) -> int:
    from bench.conversation import run_benchmark

    configure_logging("ERROR")
    return _run(lambda: run_benchmark(args))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aizuchi")
    except PackageNotFoundError:  # pragma: no cover - run from a checkout that was never installed
        return "unknown (not installed)"


def _add_arbiter_bench(benches: Any) -> None:
    """``aizuchi bench arbiter`` and its options."""
    load = benches.add_parser("arbiter", help="drive the HTTP API with concurrent clients")
    load.add_argument("--clients", type=int, nargs="+", default=[16], help="concurrent clients (default 16)")
    load.add_argument("--channels", type=int, default=64, help="channels to spread them over (default 64)")
    load.add_argument("--seconds", type=float, default=10.0, help="measured duration per run (default 10)")
    load.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    load.add_argument(
        "--processes",
        type=int,
        nargs="+",
        default=[1, 2],
        help="arbiter processes sharing the PostgreSQL database, each channel's requests sent to one of them as the "
        "personas' client sends them (default 1 2)",
    )
    load.add_argument(
        "--without-http",
        action="store_true",
        help="also run the same mix straight against the arbiter's service in this process (SQLite)",
    )
    load.add_argument("--without-mcp", action="store_true", help="skip the runs over MCP (half the time)")
    load.add_argument(
        "--postgres-url",
        default="postgresql+asyncpg://postgres@127.0.0.1:5432/postgres",
        help="server to create a scratch database on",
    )
    _add_confinement(load, "the arbiter processes listen on PORT, PORT+1, ...")
    load.set_defaults(func=_bench_arbiter)


def _add_confinement(bench: Any, where: str) -> None:
    """``--port`` and ``--database-url``: a benchmark kept to the ports and the database it is given."""
    bench.add_argument("--port", type=int, default=0, help=f"{where} (default 0: free ports the system picks)")
    bench.add_argument(
        "--database-url",
        metavar="URL",
        help="run on this database (sqlite:///file.db or postgresql://user@host:port/name) instead of a scratch one;"
        " every run empties it first, and one holding channels a benchmark did not make is refused",
    )


def _parser() -> argparse.ArgumentParser:
    from bots.settings import SHIPPED_PERSONAS

    parser = argparse.ArgumentParser(prog="aizuchi", description="A fleet of AI personas that take turns.")
    parser.add_argument("--version", action="version", version=f"aizuchi {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="<command>")

    arbiter = commands.add_parser("arbiter", help="the arbiter: its HTTP API, and its Discord bot if it has a token")
    arbiter.add_argument("--host", help="listen address (default: ARBITER_HOST or 127.0.0.1)")
    arbiter.add_argument("--port", type=int, help="listen port (default: ARBITER_PORT or 8340)")
    arbiter.set_defaults(func=_arbiter)

    run = commands.add_parser(
        "run", help="everything in one process: on Discord if the arbiter has a token, else the local room"
    )
    run.add_argument("--host", help="listen address (default: ARBITER_HOST or 127.0.0.1)")
    run.add_argument("--port", type=int, help="listen port (default: ARBITER_PORT or 8340)")
    run.set_defaults(func=_run_all)

    bots = commands.add_parser("bots", help="the personas' Discord bots, with the arbiter running elsewhere")
    bots.add_argument("--persona", action="append", metavar="ID", help="run only this persona (repeatable)")
    bots.set_defaults(func=_bots)

    discord = commands.add_parser("discord", help="the fleet's Discord setup")
    discord_commands = discord.add_subparsers(dest="discord_command", required=True, metavar="<action>")
    discord_commands.add_parser(
        "check",
        help="check every token, the arbiter's Message Content intent, which servers each bot is in and its "
        "permissions in the enabled channels; print an invite URL for each missing bot",
    ).set_defaults(func=_discord_check)

    personas = commands.add_parser("personas", help="work with persona files")
    persona_commands = personas.add_subparsers(dest="personas_command", required=True, metavar="<action>")
    check = persona_commands.add_parser("check", help="validate every persona file")
    check.add_argument("--dir", help="persona directory (default: AIZUCHI_PERSONAS_DIR or personas/)")
    check.set_defaults(func=_personas_check)
    card = persona_commands.add_parser(
        "import", help="make a persona file from a Tavern character card (V1, V2 or V3; JSON or PNG)"
    )
    card.add_argument("card", metavar="CARD", help="the card: a .json file, or a .png with the card embedded")
    card.add_argument("--out", metavar="DIR", help="where to write it (default: AIZUCHI_PERSONAS_DIR or personas/)")
    card.add_argument("--id", help="the persona's id and file name (default: made from the card's name)")
    card.add_argument("--language", choices=["en", "ja"], help="its language (default: guessed from the card)")
    card.add_argument("--provider", default="scripted", help="its provider profile (default: scripted)")
    card.add_argument("--force", action="store_true", help="replace a persona file of the same id")
    card.set_defaults(func=_personas_import)

    _add_benches(commands, SHIPPED_PERSONAS)
    return parser


# The variables each settings class reads its fields from.
_PREFIXES = {
    "ArbiterSettings": "ARBITER_",
    "BotsSettings": "AIZUCHI_",
    "DiscordEndpoints": "AIZUCHI_DISCORD_",
    "DiscordReconnects": "AIZUCHI_DISCORD_RECONNECT_",
}


def describe_settings_error(error: ValidationError) -> str:
    """One line naming each variable in error and what is wrong, without the value (it may be a secret)."""
    prefix = _PREFIXES.get(error.title, "")
    problems = []
    for item in error.errors(include_input=False, include_url=False):
        field = str(item["loc"][0]) if item["loc"] else ""
        variable = field if field.isupper() else f"{prefix}{field.upper()}"
        message = str(item["msg"]).removeprefix("Value error, ")
        problems.append(f"{variable}: {message}" if variable else message)
    return "; ".join(problems)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from aizuchi.errors import FleetError
    from aizuchi.settings import unknown_settings
    from arbiter.core.errors import ArbiterError
    from bots.errors import BotError
    from bots.llm.profiles import ProfileError

    if args.command != "bench":  # the benchmarks read no settings
        # A misspelt setting is ignored by the settings classes: said once, at start, before anything else.
        for line in unknown_settings():
            print(line, file=sys.stderr)
    try:
        return int(args.func(args))
    except ValidationError as error:
        print(f"aizuchi: invalid settings: {describe_settings_error(error)}", file=sys.stderr)
        return 2
    except _Undecodable as error:
        print(f"aizuchi: invalid settings: {error}", file=sys.stderr)
        return 2
    except FleetError as error:
        print(f"aizuchi: {error.message}", file=sys.stderr)
        return 1
    except ArbiterError as error:
        print(f"aizuchi: {error.message}", file=sys.stderr)
        return 1
    except (BotError, ProfileError) as error:
        print(f"aizuchi: {error}", file=sys.stderr)
        return 1
