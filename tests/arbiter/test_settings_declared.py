"""A setting is declared once (``arbiter.core.models``: its name, type, default, bounds and a line for people), and
everything else that lists settings follows from it or is held to it here: the validation, the wire models the API
reads and shows, the OpenAPI document, and the database's columns."""

from __future__ import annotations

import dataclasses

import pytest

from arbiter import contract as wire
from arbiter.core.errors import InvalidRequest
from arbiter.core.models import SETTINGS, TIER_SETTINGS, ChannelSettings, Declared, TierRule
from arbiter.core.validation import patch_settings
from arbiter.storage.tables import ChannelRow
from arbiter.views import settings_view

SCALARS = {declared.name for declared in SETTINGS}
TIER_FIELDS = {declared.name for declared in TIER_SETTINGS}


def test_the_declarations_are_every_setting_of_the_core_models() -> None:
    assert {f.name for f in dataclasses.fields(ChannelSettings)} - {"tiers", "personas"} == SCALARS
    assert {f.name for f in dataclasses.fields(TierRule)} == TIER_FIELDS


def test_the_wire_models_carry_exactly_the_declared_settings() -> None:
    assert set(wire.SettingsPatch.model_fields) == SCALARS | {"tiers"}
    assert set(wire.SettingsView.model_fields) == SCALARS | {"tiers", "channel_id", "personas"}
    assert set(wire.TierPatch.model_fields) == set(wire.TierSettings.model_fields) == TIER_FIELDS


def test_the_database_has_a_column_for_each_declared_setting() -> None:
    assert SCALARS | {"tiers", "personas"} <= set(ChannelRow.__table__.columns.keys())


@pytest.mark.parametrize(
    "declared", [d for d in (*SETTINGS, *TIER_SETTINGS) if d.setting.bound is not None], ids=lambda d: d.name
)
def test_the_wire_models_bound_each_number_by_its_declaration(declared: Declared) -> None:
    name, bound = declared.name, declared.setting.bound
    assert bound is not None
    model = wire.TierPatch if name in TIER_FIELDS else wire.SettingsPatch
    prop = model.model_json_schema()["properties"][name]
    [schema] = [option for option in prop.get("anyOf", [prop]) if option.get("type") != "null"]
    assert (schema["minimum"], schema["maximum"]) == (bound.low, bound.high)


def test_the_openapi_document_describes_each_setting_with_its_declared_line() -> None:
    properties = wire.SettingsView.model_json_schema()["properties"]
    for declared in SETTINGS:
        assert properties[declared.name]["description"] == declared.setting.doc
    tier_properties = wire.TierPatch.model_json_schema()["properties"]
    for declared in TIER_SETTINGS:
        assert tier_properties[declared.name]["description"] == declared.setting.doc


def test_every_declared_setting_is_patched_and_shown_under_its_name() -> None:
    changed = {
        "capacity": 150,
        "enabled": False,
        "paused": True,
        "idle_cap": 3,
        "daily_token_budget": None,
        "topic": "tea",
        "claim_ttl_s": 12.0,
        "priority_window_s": 9.0,
        "human_hold_s": 1.5,
        "stale_tolerance": 4,
        "personas_enabled_by_default": False,
    }
    assert set(changed) == SCALARS  # a new setting must be added here too, with a value unlike its default
    settings = patch_settings(ChannelSettings(), changed)
    view = settings_view("lobby", settings)
    for name, value in changed.items():
        assert getattr(settings, name) == value != getattr(ChannelSettings(), name)
        assert getattr(view, name) == value


@pytest.mark.parametrize("declared", SETTINGS, ids=lambda d: d.name)
def test_each_declared_setting_refuses_a_value_of_the_wrong_type(declared: Declared) -> None:
    name = declared.name
    with pytest.raises(InvalidRequest) as refused:
        patch_settings(ChannelSettings(), {name: [1]})
    assert refused.value.field == name
