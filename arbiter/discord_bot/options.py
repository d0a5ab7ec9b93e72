"""What a slash command got, held to what it registered: a server that does not enforce a command's registration
(Spacebar, for one) may send anything, and discord.py passes a value outside the choices or the range through
unchecked (``app_commands.transformers``: a ``Range`` or a ``Literal`` transforms to the value as it came)."""

from __future__ import annotations

import math
from typing import Any

from discord import AppCommandOptionType, app_commands

__all__ = ("BadOption", "check_options", "given_options", "shown")

# The value types of the option types these commands use, and how a reply names them.
_KINDS: dict[AppCommandOptionType, tuple[tuple[type, ...], str]] = {
    AppCommandOptionType.string: ((str,), "text"),
    AppCommandOptionType.integer: ((int,), "a whole number"),
    AppCommandOptionType.number: ((int, float), "a number"),
    AppCommandOptionType.boolean: ((bool,), "true or false"),
}


class BadOption(app_commands.AppCommandError):
    """An option the command's registration does not allow, sent by a server that does not enforce it; the message
    names the option and what it takes."""


def check_options(command: app_commands.Command[Any, ..., Any], given: list[dict[str, Any]]) -> None:
    """Hold the options a command got (``given``: as Discord sends them) to what it registered, as Discord's client
    does: only its options, the required ones present, each of its type (a number finite), among its choices and
    within its range (a text: its length). Raises BadOption for the first that is not."""
    params = {param.display_name: param for param in command.parameters}
    values = {option.get("name"): option.get("value") for option in given}
    for name in values.keys() - params.keys():
        takes = ", ".join(params) or "no options"
        raise BadOption(f"/{command.qualified_name} has no option {shown(name)} (it takes {takes})")
    for name, param in params.items():
        if name not in values:
            if param.required:
                raise BadOption(f"{name} is required: {_accepts(param)}")
        elif param.type in _KINDS and not _fits(param, values[name]):
            raise BadOption(f"{name} must be {_accepts(param)} (got {shown(values[name])})")


def _fits(param: app_commands.Parameter, value: object) -> bool:
    if type(value) not in _KINDS[param.type][0]:  # bool is no number here, nor "5" a number
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if param.choices and value not in [choice.value for choice in param.choices]:
        return False
    size = len(value) if isinstance(value, str) else value
    low, high = param.min_value, param.max_value
    return (low is None or size >= low) and (high is None or size <= high)  # type: ignore[operator]


def _accepts(param: app_commands.Parameter) -> str:
    if param.choices:
        return "one of " + ", ".join(str(choice.value) for choice in param.choices)
    what = _KINDS[param.type][1]
    low, high = param.min_value, param.max_value
    if param.type is AppCommandOptionType.string:
        return what if high is None else f"at most {high:,} characters long"
    if low is not None and high is not None:
        return f"{what} from {_number(low)} to {_number(high)}"
    return what


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,}"


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def given_options(data: Any) -> list[dict[str, Any]]:
    """The options of the subcommand that was run: under its group's and its own entry."""
    options: list[dict[str, Any]] = (data or {}).get("options") or []
    nested = (AppCommandOptionType.subcommand.value, AppCommandOptionType.subcommand_group.value)
    while options and options[0].get("type") in nested:
        options = options[0].get("options") or []
    return options
