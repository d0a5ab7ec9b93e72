"""Settings patches: each bad value is refused with the field it concerns; good ones apply as a whole."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from arbiter.core.errors import InvalidRequest
from arbiter.core.limits import MAX_TOPIC_LENGTH
from arbiter.core.models import DEFAULT_TIERS, ChannelSettings, Tier, TierRule
from arbiter.core.validation import patch_settings, validate_settings


def test_the_defaults_are_valid() -> None:
    validate_settings(ChannelSettings())


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        # bounds
        ({"capacity": 0}, "capacity"),
        ({"capacity": 1_000_001}, "capacity"),
        ({"tiers": {"remark": {"cost": 0}}}, "tiers.remark.cost"),
        ({"tiers": {"aizuchi": {"max_length": 0}}}, "tiers.aizuchi.max_length"),
        ({"tiers": {"long": {"max_length": 2_001}}}, "tiers.long.max_length"),
        ({"tiers": {"long": {"recovery_s": -1}}}, "tiers.long.recovery_s"),
        ({"idle_cap": 0}, "idle_cap"),
        ({"daily_token_budget": -1}, "daily_token_budget"),
        ({"claim_ttl_s": 0.5}, "claim_ttl_s"),
        ({"priority_window_s": 601}, "priority_window_s"),
        ({"human_hold_s": 121}, "human_hold_s"),
        ({"stale_tolerance": 16}, "stale_tolerance"),
        ({"topic": "x" * (MAX_TOPIC_LENGTH + 1)}, "topic"),
        # tiers must not get cheaper or shorter from aizuchi to long
        ({"tiers": {"remark": {"cost": 4}}}, "tiers.remark.cost"),
        ({"tiers": {"long": {"cost": 59}}}, "tiers.long.cost"),
        ({"tiers": {"aizuchi": {"cost": 61}}}, "tiers.remark.cost"),
        ({"tiers": {"remark": {"max_length": 23}}}, "tiers.remark.max_length"),
        ({"tiers": {"long": {"max_length": 119}}}, "tiers.long.max_length"),
        # a tier that costs more than the whole pool could never be afforded
        ({"capacity": 79}, "tiers.long.cost"),
        ({"tiers": {"long": {"cost": 101}}}, "tiers.long.cost"),
        # unknown names
        ({"colour": "blue"}, "colour"),
        ({"tiers": {"shout": {"cost": 5}}}, "tiers"),
        ({"tiers": {"remark": {"volume": 11}}}, "tiers.remark.volume"),
        # wrong types
        ({"capacity": "100"}, "capacity"),
        ({"capacity": True}, "capacity"),
        ({"capacity": 100.5}, "capacity"),
        ({"idle_cap": None}, "idle_cap"),
        ({"tiers": {"remark": {"cost": 60.0}}}, "tiers.remark.cost"),
        ({"tiers": {"remark": {"recovery_s": "5"}}}, "tiers.remark.recovery_s"),
        ({"paused": "yes"}, "paused"),
        ({"enabled": 1}, "enabled"),
        ({"personas_enabled_by_default": None}, "personas_enabled_by_default"),
        ({"topic": 5}, "topic"),
        ({"tiers": 5}, "tiers"),
        ({"tiers": {"remark": 60}}, "tiers.remark"),
    ],
)
def test_invalid_patch_names_the_field(changes: dict[str, Any], field: str) -> None:
    before = ChannelSettings()
    with pytest.raises(InvalidRequest) as raised:
        patch_settings(before, changes)
    assert raised.value.field == field
    assert raised.value.message


def test_valid_patch_applies_and_leaves_the_original_alone() -> None:
    before = ChannelSettings()
    after = patch_settings(
        before,
        {
            "capacity": 200,
            "tiers": {"long": {"cost": 150, "max_length": 400}, "aizuchi": {"recovery_s": 2.5}},
            "paused": True,
            "daily_token_budget": None,
            "topic": "旅行の話",
            "claim_ttl_s": 10,
        },
    )
    assert after.capacity == 200
    assert after.tiers[Tier.LONG] == TierRule(cost=150, max_length=400, recovery_s=5.0)
    assert after.tiers[Tier.AIZUCHI] == TierRule(cost=5, max_length=24, recovery_s=2.5)
    assert after.tiers[Tier.REMARK] == DEFAULT_TIERS[Tier.REMARK]
    assert (after.paused, after.daily_token_budget, after.topic, after.claim_ttl_s) == (True, None, "旅行の話", 10)
    assert before == ChannelSettings()


def test_an_empty_patch_changes_nothing() -> None:
    assert patch_settings(ChannelSettings(), {}) == ChannelSettings()


def test_tiers_may_cost_the_same_as_the_next_one_and_the_whole_pool() -> None:
    patch_settings(ChannelSettings(), {"tiers": {"remark": {"cost": 80}, "long": {"cost": 100}}})


def test_capacity_and_tiers_are_checked_together_not_one_by_one() -> None:
    # Lowering long and the capacity in one patch is fine, though the capacity alone would be refused.
    patched = patch_settings(
        ChannelSettings(), {"capacity": 70, "tiers": {"remark": {"cost": 50}, "long": {"cost": 70}}}
    )
    assert patched.capacity == 70


def test_a_missing_tier_is_refused() -> None:
    settings = replace(ChannelSettings(), tiers={t: r for t, r in DEFAULT_TIERS.items() if t is not Tier.LONG})
    with pytest.raises(InvalidRequest) as raised:
        validate_settings(settings)
    assert raised.value.field == "tiers.long"
