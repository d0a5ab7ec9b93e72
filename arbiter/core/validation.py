"""Whole-settings checks: each setting against its declaration (``models.SETTINGS``), and the rules that tie
settings together."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from arbiter.core.errors import InvalidRequest
from arbiter.core.models import SETTINGS, TIER_SETTINGS, ChannelSettings, Declared, Tier

__all__ = ("patch_settings", "validate_settings")


def _check(field: str, declared: Declared, value: object) -> None:
    """Raise InvalidRequest unless ``value`` is of the setting's type and within its declared bounds."""
    if value is None and declared.nullable:
        return
    kind, setting = declared.kind, declared.setting
    if kind is bool:
        if not isinstance(value, bool):
            raise InvalidRequest(f"{field} must be true or false", field=field)
        return
    if kind is str:
        if not isinstance(value, str):
            raise InvalidRequest(f"{field} must be text", field=field)
        if setting.longest is not None and len(value) > setting.longest:
            raise InvalidRequest(f"{field} is longer than {setting.longest} characters", field=field)
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{field} must be a number, not {value!r}", field=field)
    if kind is int and not isinstance(value, int):
        raise InvalidRequest(f"{field} must be a whole number, not {value!r}", field=field)
    bound = setting.bound
    if bound is not None and not bound.low <= value <= bound.high:
        raise InvalidRequest(f"{field} must be between {bound.low:g} and {bound.high:g}, not {value:g}", field=field)


def validate_settings(settings: ChannelSettings) -> None:
    """Raise InvalidRequest naming the first field that is out of bounds or inconsistent. Each setting's own
    declaration is checked first (its type and bounds), then the rules that tie the tiers to each other and to
    the capacity."""
    for declared in SETTINGS:
        _check(declared.name, declared, getattr(settings, declared.name))
    missing = [tier for tier in Tier if tier not in settings.tiers]
    if missing:
        raise InvalidRequest(f"tier {missing[0]} is missing", field=f"tiers.{missing[0]}")
    previous: tuple[Tier, int, int] | None = None
    for tier in Tier:
        rule = settings.tiers[tier]
        for declared in TIER_SETTINGS:
            _check(f"tiers.{tier}.{declared.name}", declared, getattr(rule, declared.name))
        if rule.cost > settings.capacity:
            raise InvalidRequest(
                f"{tier} costs {rule.cost}, more than the capacity {settings.capacity}; it could never be afforded",
                field=f"tiers.{tier}.cost",
            )
        if previous is not None:
            cheaper, cost, length = previous
            if rule.cost < cost:
                raise InvalidRequest(
                    f"{tier} must cost at least as much as {cheaper} ({cost}), not {rule.cost}",
                    field=f"tiers.{tier}.cost",
                )
            if rule.max_length < length:
                raise InvalidRequest(
                    f"{tier} must allow at least as much text as {cheaper} ({length}), not {rule.max_length}",
                    field=f"tiers.{tier}.max_length",
                )
        previous = (tier, rule.cost, rule.max_length)


_SCALAR_FIELDS = frozenset(declared.name for declared in SETTINGS)
_TIER_FIELDS = frozenset(declared.name for declared in TIER_SETTINGS)


def patch_settings(settings: ChannelSettings, changes: Mapping[str, Any]) -> ChannelSettings:
    """Apply ``changes`` (field -> value; ``tiers`` -> tier -> field -> value) and check the result as a whole."""
    scalars: dict[str, Any] = {}
    for key, value in changes.items():
        if key == "tiers":
            continue
        if key not in _SCALAR_FIELDS:
            raise InvalidRequest(f"unknown setting {key!r}", field=key)
        scalars[key] = value
    tiers = dict(settings.tiers)
    tier_changes = changes.get("tiers") or {}
    if not isinstance(tier_changes, Mapping):
        raise InvalidRequest("tiers must map tier names to their settings", field="tiers")
    for name, fields in tier_changes.items():
        try:
            tier = Tier(name)
        except ValueError:
            raise InvalidRequest(f"unknown tier {name!r}; tiers are aizuchi, remark, long", field="tiers") from None
        if not isinstance(fields, Mapping):
            raise InvalidRequest(f"tiers.{tier} must map setting names to values", field=f"tiers.{tier}")
        unknown = set(fields) - _TIER_FIELDS
        if unknown:
            field = sorted(unknown)[0]
            raise InvalidRequest(f"unknown tier setting {field!r}", field=f"tiers.{tier}.{field}")
        tiers[tier] = replace(tiers[tier], **fields)
    patched = replace(settings, tiers=tiers, **scalars)
    validate_settings(patched)
    return patched
