"""Whole-settings checks: every bound, and the rules that tie fields together."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from arbiter.core.errors import InvalidRequest
from arbiter.core.limits import LIMITS, MAX_TOPIC_LENGTH
from arbiter.core.models import ChannelSettings, Tier

__all__ = ("patch_settings", "validate_settings")


_INTEGERS = frozenset({"capacity", "cost", "max_length", "idle_cap", "daily_token_budget", "stale_tolerance"})


def _bound(field: str, value: object) -> None:
    name = field.rsplit(".", 1)[-1]
    bound = LIMITS[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{field} must be a number, not {value!r}", field=field)
    if name in _INTEGERS and not isinstance(value, int):
        raise InvalidRequest(f"{field} must be a whole number, not {value!r}", field=field)
    if not bound.low <= value <= bound.high:
        raise InvalidRequest(f"{field} must be between {bound.low:g} and {bound.high:g}, not {value:g}", field=field)


def validate_settings(settings: ChannelSettings) -> None:
    """Raise InvalidRequest naming the first field that is out of bounds or inconsistent."""
    _bound("capacity", settings.capacity)
    missing = [tier for tier in Tier if tier not in settings.tiers]
    if missing:
        raise InvalidRequest(f"tier {missing[0]} is missing", field=f"tiers.{missing[0]}")
    previous: tuple[Tier, int, int] | None = None
    for tier in Tier:
        rule = settings.tiers[tier]
        _bound(f"tiers.{tier}.cost", rule.cost)
        _bound(f"tiers.{tier}.max_length", rule.max_length)
        _bound(f"tiers.{tier}.recovery_s", rule.recovery_s)
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
    _bound("idle_cap", settings.idle_cap)
    if settings.daily_token_budget is not None:
        _bound("daily_token_budget", settings.daily_token_budget)
    _bound("claim_ttl_s", settings.claim_ttl_s)
    _bound("priority_window_s", settings.priority_window_s)
    _bound("human_hold_s", settings.human_hold_s)
    _bound("stale_tolerance", settings.stale_tolerance)
    for name in ("enabled", "paused", "personas_enabled_by_default"):
        if not isinstance(getattr(settings, name), bool):
            raise InvalidRequest(f"{name} must be true or false", field=name)
    if not isinstance(settings.topic, str):
        raise InvalidRequest("topic must be text", field="topic")
    if len(settings.topic) > MAX_TOPIC_LENGTH:
        raise InvalidRequest(f"topic is longer than {MAX_TOPIC_LENGTH} characters", field="topic")


_TIER_FIELDS = frozenset({"cost", "max_length", "recovery_s"})
_SCALAR_FIELDS = frozenset(
    {
        "capacity",
        "enabled",
        "paused",
        "idle_cap",
        "daily_token_budget",
        "topic",
        "claim_ttl_s",
        "priority_window_s",
        "human_hold_s",
        "stale_tolerance",
        "personas_enabled_by_default",
    }
)


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
