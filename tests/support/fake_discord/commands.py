"""Application commands: what bots registered, and the option payloads Discord builds when a person runs one.

The Discord client only lets a person submit what the registration allows (required options present, choices,
ranges and lengths respected, the right kind of user/role/channel); ``build_options`` enforces the same, so a bot
only sees what it could see in production. ``validate=False`` sends the values as given, to stand in for a
registration that changed under a running client (a subcommand it no longer has, an option or a value it no longer
takes), or a server that does not enforce the registration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .model import FakeChannel, FakeMember, FakeRole, FakeUser, permissions_in

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ("InvalidInvocation", "OptionType", "build_options", "validate_registration")

NAME = re.compile(r"^[-_\w]{1,32}$")


class InvalidInvocation(ValueError):
    """What a person cannot submit in the Discord client (unknown command or option, a value it refuses)."""


class OptionType:
    SUB_COMMAND = 1
    SUB_COMMAND_GROUP = 2
    STRING = 3
    INTEGER = 4
    BOOLEAN = 5
    USER = 6
    CHANNEL = 7
    ROLE = 8
    MENTIONABLE = 9
    NUMBER = 10
    ATTACHMENT = 11


def validate_registration(command: Mapping[str, Any]) -> str | None:
    """Why Discord would refuse this command payload (400, Invalid Form Body), or None."""
    name = command.get("name", "")
    if command.get("type", 1) == 1:
        if not NAME.match(name) or name != name.lower():
            return f"invalid command name {name!r}"
        if not 1 <= len(command.get("description", "")) <= 100:
            return f"command {name!r}: description must be 1-100 characters"
    return _validate_options(name, command.get("options") or [])


def _validate_options(where: str, options: Sequence[Mapping[str, Any]]) -> str | None:
    if len(options) > 25:
        return f"{where}: more than 25 options"
    seen_optional = False
    for option in options:
        name = option.get("name", "")
        if not NAME.match(name) or name != name.lower():
            return f"{where}: invalid option name {name!r}"
        if not 1 <= len(option.get("description", "")) <= 100:
            return f"{where} {name}: description must be 1-100 characters"
        if option.get("type") in (OptionType.SUB_COMMAND, OptionType.SUB_COMMAND_GROUP):
            problem = _validate_options(f"{where} {name}", option.get("options") or [])
            if problem:
                return problem
            continue
        if option.get("required"):
            if seen_optional:
                return f"{where}: required option {name!r} after an optional one"
        else:
            seen_optional = True
    return None


@dataclass
class BuiltOptions:
    options: list[dict[str, Any]]
    resolved: dict[str, dict[str, Any]]


def build_options(
    command: Mapping[str, Any],
    path: Sequence[str],
    values: Mapping[str, object],
    *,
    invoker: FakeMember,
    channel: FakeChannel,
    validate: bool,
    focused: str | None = None,
) -> BuiltOptions:
    """The ``data.options`` (nested under subcommand groups and subcommands) and ``data.resolved`` for running
    ``command`` at ``path`` (its names after the top-level one) with ``values``."""
    resolved: dict[str, dict[str, Any]] = {}
    declared: Sequence[Mapping[str, Any]] = command.get("options") or []
    chain: list[dict[str, Any]] = []
    where = command["name"]
    for name in path:
        sub = next(
            (
                o
                for o in declared
                if o.get("name") == name and o.get("type") in (OptionType.SUB_COMMAND, OptionType.SUB_COMMAND_GROUP)
            ),
            None,
        )
        if sub is None:
            if validate:
                raise InvalidInvocation(f"/{where} has no subcommand {name!r}")
            sub = {"type": OptionType.SUB_COMMAND, "name": name}  # one the registration does not have (any more)
        chain.append({"type": sub["type"], "name": name, "options": []})
        declared = sub.get("options") or []
        where = f"{where} {name}"
    if any(o.get("type") in (OptionType.SUB_COMMAND, OptionType.SUB_COMMAND_GROUP) for o in declared):
        raise InvalidInvocation(f"/{where} is a group: name one of its subcommands")

    leaf = [
        _option(
            name=name,
            value=value,
            declaration=_declaration(declared, name, where, validate),
            invoker=invoker,
            channel=channel,
            resolved=resolved,
            validate=validate,
        )
        for name, value in values.items()
    ]
    if focused is not None:
        for option in leaf:
            if option["name"] == focused:
                option["focused"] = True
                break
        else:
            raise InvalidInvocation(f"/{where}: the focused option {focused!r} has no value")
    elif validate:
        missing = [o["name"] for o in declared if o.get("required") and o["name"] not in values]
        if missing:
            raise InvalidInvocation(f"/{where}: missing required option(s) {', '.join(missing)}")

    options = leaf
    for level in reversed(chain):
        level["options"] = options
        options = [level]
    return BuiltOptions(options=options, resolved=resolved)


def _declaration(declared: Sequence[Mapping[str, Any]], name: str, where: str, validate: bool) -> Mapping[str, Any]:
    for option in declared:
        if option.get("name") == name:
            return option
    if validate:
        raise InvalidInvocation(f"/{where} has no option {name!r}")
    return {"name": name}


def _option(
    *,
    name: str,
    value: object,
    declaration: Mapping[str, Any],
    invoker: FakeMember,
    channel: FakeChannel,
    resolved: dict[str, dict[str, Any]],
    validate: bool,
) -> dict[str, Any]:
    kind = declaration.get("type") or _infer_type(value)
    if validate:
        _check_value(name, kind, value, declaration)
    if isinstance(value, (FakeUser, FakeRole, FakeChannel)):
        _resolve(value, invoker, channel, resolved)
        return {"name": name, "type": kind, "value": str(value.id)}
    return {"name": name, "type": kind, "value": value}


def _infer_type(value: object) -> int:
    if isinstance(value, bool):
        return OptionType.BOOLEAN
    if isinstance(value, int):
        return OptionType.INTEGER
    if isinstance(value, float):
        return OptionType.NUMBER
    if isinstance(value, FakeUser):
        return OptionType.USER
    if isinstance(value, FakeRole):
        return OptionType.ROLE
    if isinstance(value, FakeChannel):
        return OptionType.CHANNEL
    return OptionType.STRING


def _check_value(name: str, kind: int, value: object, declaration: Mapping[str, Any]) -> None:
    expected: dict[int, tuple[type, ...]] = {
        OptionType.STRING: (str,),
        OptionType.INTEGER: (int,),
        OptionType.NUMBER: (int, float),
        OptionType.BOOLEAN: (bool,),
        OptionType.USER: (FakeUser,),
        OptionType.CHANNEL: (FakeChannel,),
        OptionType.ROLE: (FakeRole,),
        OptionType.MENTIONABLE: (FakeUser, FakeRole),
    }
    if kind not in expected:
        raise InvalidInvocation(f"option {name!r}: type {kind} is not supported by the fake")
    if not isinstance(value, expected[kind]) or (kind != OptionType.BOOLEAN and isinstance(value, bool)):
        raise InvalidInvocation(f"option {name!r} takes type {kind}, got {value!r}")
    if kind == OptionType.CHANNEL and declaration.get("channel_types") and 0 not in declaration["channel_types"]:
        raise InvalidInvocation(f"option {name!r} does not accept a text channel")
    choices = declaration.get("choices")
    if choices and value not in [choice["value"] for choice in choices]:
        raise InvalidInvocation(f"option {name!r}: {value!r} is not one of its choices")
    if isinstance(value, (int, float)):
        low, high = declaration.get("min_value"), declaration.get("max_value")
        if (low is not None and value < low) or (high is not None and value > high):
            raise InvalidInvocation(f"option {name!r}: {value!r} is outside [{low}, {high}]")
    if isinstance(value, str):
        low, high = declaration.get("min_length"), declaration.get("max_length")
        if (low is not None and len(value) < low) or (high is not None and len(value) > high):
            raise InvalidInvocation(f"option {name!r}: length {len(value)} is outside [{low}, {high}]")


def _resolve(
    value: FakeUser | FakeRole | FakeChannel, invoker: FakeMember, channel: FakeChannel, resolved: dict[str, Any]
) -> None:
    """Resolved data as Discord sends it: users with their member (and its permissions in the channel), roles,
    and channels with the invoker's permissions there."""
    key = str(value.id)
    if isinstance(value, FakeUser):
        resolved.setdefault("users", {})[key] = value.payload()
        member: FakeMember | None = invoker.guild.member(value)
        if member is not None:
            perms = permissions_in(member, channel)
            resolved.setdefault("members", {})[key] = member.payload(with_user=False, permissions=perms)
    elif isinstance(value, FakeRole):
        resolved.setdefault("roles", {})[key] = value.payload()
    else:
        data = value.payload()
        resolved.setdefault("channels", {})[key] = {
            "id": data["id"],
            "name": data["name"],
            "type": data["type"],
            "permissions": str(permissions_in(invoker, value)),
            "parent_id": None,
            "position": data["position"],
            "nsfw": False,
            "flags": 0,
            "rate_limit_per_user": 0,
            "last_message_id": data["last_message_id"],
            "topic": data["topic"],
        }
