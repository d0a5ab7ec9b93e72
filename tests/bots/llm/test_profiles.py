"""Provider profiles: the built-ins, the TOML file, its errors, and the factory that reads keys from the env."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from bots.llm import (
    BUILTIN_PROFILES,
    DecisionRequest,
    LLMAuthError,
    LLMUnavailable,
    ProfileError,
    ProviderProfile,
    ScriptedProvider,
    Turn,
    create_provider,
    load_profiles,
)
from bots.llm.anthropic_chat import AnthropicChat
from bots.llm.openai_chat import OpenAIChat
from bots.llm.profiles import OLLAMA_MODEL, OLLAMA_URL, required_key, resolve_profile
from bots.settings import BotsSettings
from tests.support.fleet import make_persona
from tests.support.llm_server import FAKE_KEY, FAKE_KEY_ENV, decision_reply, error, fake_profile

if TYPE_CHECKING:
    from tests.support.llm_server import FakeLLMServer

EXAMPLE = Path(__file__).resolve().parents[3] / "profiles.example.toml"
ASK = DecisionRequest(system="You are Kai.", turns=(Turn("user", "hi"),))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profiles.toml"
    path.write_text(text, encoding="utf-8")
    return path


# --- built-ins and files --------------------------------------------------------------------------------


def test_the_built_in_profiles_need_no_file() -> None:
    profiles = load_profiles(None)

    assert set(profiles) == {"scripted", "anthropic", "openai", "ollama", "local"}
    assert profiles["anthropic"].api_key_env == "ANTHROPIC_API_KEY"
    assert profiles["anthropic"].model.startswith("claude-haiku")
    assert profiles["openai"].api_key_env == "OPENAI_API_KEY"
    assert profiles["openai"].max_tokens_param == "max_completion_tokens"
    assert profiles["scripted"].api_key_env is None


def test_the_local_model_profiles_take_no_key_and_decide_as_local_servers_can() -> None:
    # Ollama ignores tool_choice and max_completion_tokens (see bots/llm/profiles.py for the sources); llama.cpp,
    # vLLM and LM Studio all follow a JSON schema and read max_tokens.
    ollama, local = BUILTIN_PROFILES["ollama"], BUILTIN_PROFILES["local"]

    assert (ollama.provider, ollama.base_url, ollama.model) == ("openai", OLLAMA_URL, OLLAMA_MODEL)
    assert OLLAMA_URL == "http://127.0.0.1:11434/v1"
    assert (local.provider, local.base_url, local.model) == ("openai", None, "")
    for profile in (ollama, local):
        assert profile.api_key_env is None
        assert profile.structured_output == "json_schema"
        assert profile.max_tokens_param == "max_tokens"
        assert profile.strict_tools is False
        assert profile.max_retries == 0
    assert ollama.extra_body == {"reasoning_effort": "none"}  # thinking off: one line needs none
    assert local.extra_body == {}  # vLLM takes only low, medium or high there
    assert (ollama.base_url_env, ollama.model_env) == ("AIZUCHI_OLLAMA_URL", "AIZUCHI_OLLAMA_MODEL")
    assert (local.base_url_env, local.model_env) == ("AIZUCHI_LOCAL_URL", "AIZUCHI_LOCAL_MODEL")


def test_the_variables_the_built_in_profiles_read_are_declared_settings() -> None:
    # Declared once, with a line for people, in BotsSettings: documented and checked with the other settings.
    fields = BotsSettings.model_fields
    for profile in BUILTIN_PROFILES.values():
        for variable in (profile.base_url_env, profile.model_env):
            if variable is not None:
                field = variable.removeprefix("AIZUCHI_").lower()
                assert field in fields, variable
                assert fields[field].description
    assert OLLAMA_URL in str(fields["ollama_url"].description)
    assert OLLAMA_MODEL in str(fields["ollama_model"].description)


def test_a_set_variable_replaces_the_address_and_the_model() -> None:
    env = {"AIZUCHI_OLLAMA_URL": "http://gpu-box:11434/v1", "AIZUCHI_OLLAMA_MODEL": " qwen3:8b "}

    resolved = resolve_profile(BUILTIN_PROFILES["ollama"], env)

    assert (resolved.base_url, resolved.model) == ("http://gpu-box:11434/v1", "qwen3:8b")
    assert resolve_profile(BUILTIN_PROFILES["ollama"], {"AIZUCHI_OLLAMA_MODEL": ""}) == BUILTIN_PROFILES["ollama"]
    local = resolve_profile(
        BUILTIN_PROFILES["local"], {"AIZUCHI_LOCAL_URL": "http://127.0.0.1:8080/v1", "AIZUCHI_LOCAL_MODEL": "m"}
    )
    assert (local.base_url, local.model) == ("http://127.0.0.1:8080/v1", "m")


@pytest.mark.parametrize(
    ("env", "says"),
    [
        pytest.param(
            {},
            "profile 'local' needs AIZUCHI_LOCAL_URL and AIZUCHI_LOCAL_MODEL, which are not set: put"
            " AIZUCHI_LOCAL_URL=... AIZUCHI_LOCAL_MODEL=... in .env (where the server listens: llama.cpp's"
            " llama-server: http://127.0.0.1:8080/v1; vLLM: http://127.0.0.1:8000/v1; LM Studio:"
            " http://127.0.0.1:1234/v1)",
            id="neither",
        ),
        pytest.param(
            {"AIZUCHI_LOCAL_URL": "http://127.0.0.1:8080/v1"},
            "profile 'local' needs AIZUCHI_LOCAL_MODEL, which is not set: put AIZUCHI_LOCAL_MODEL=... in .env",
            id="no model",
        ),
    ],
)
def test_the_local_profile_without_its_server_is_one_line_naming_the_variables(env: dict[str, str], says: str) -> None:
    for check in (required_key, create_provider):
        with pytest.raises(ProfileError) as caught:
            check(BUILTIN_PROFILES["local"], env)
        assert str(caught.value) == says


def test_a_file_changes_the_ollama_model_and_a_set_variable_still_wins(tmp_path: Path) -> None:
    path = write(tmp_path, '[profiles.ollama]\nmodel = "gemma4:31b"\ntimeout_s = 120\n')

    ollama = load_profiles(path)["ollama"]

    assert (ollama.model, ollama.timeout_s, ollama.base_url) == ("gemma4:31b", 120, OLLAMA_URL)
    assert ollama.structured_output == "json_schema"  # kept from the built-in
    assert resolve_profile(ollama, {}).model == "gemma4:31b"
    assert resolve_profile(ollama, {"AIZUCHI_OLLAMA_MODEL": "llama3.2"}).model == "llama3.2"


def test_defaults_keep_a_call_within_a_turn() -> None:
    # A turn lasts as long as the persona's claim (about 30 s): an attempt gets seconds, and retries are few.
    profile = ProviderProfile(name="p", provider="openai", model="m")

    assert profile.timeout_s == 8.0
    assert profile.max_retries == 0
    assert profile.strict_tools is True
    for name in ("anthropic", "openai"):
        assert BUILTIN_PROFILES[name].timeout_s <= 10
        assert BUILTIN_PROFILES[name].max_retries == 0
    assert ProviderProfile(name="p", provider="openai", model="m", timeout_s=120.0).timeout_s == 120.0  # thinking


def test_a_file_adds_profiles_and_changes_built_ins_field_by_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [profiles.ollama-lan]
        provider = "openai"
        model = "llama3.2"
        base_url = "http://192.168.1.20:11434/v1"
        max_tokens_param = "max_tokens"

        [profiles.openai]
        model = "gpt-5.6-terra"
        timeout_s = 12.5
        """,
    )

    profiles = load_profiles(path)

    assert profiles["ollama-lan"] == ProviderProfile(
        name="ollama-lan",
        provider="openai",
        model="llama3.2",
        base_url="http://192.168.1.20:11434/v1",
        max_tokens_param="max_tokens",
    )
    assert profiles["openai"].model == "gpt-5.6-terra"
    assert profiles["openai"].timeout_s == 12.5
    assert profiles["openai"].api_key_env == "OPENAI_API_KEY"  # kept from the built-in
    assert profiles["anthropic"] == BUILTIN_PROFILES["anthropic"]


def test_a_built_in_name_given_another_provider_starts_afresh(tmp_path: Path) -> None:
    path = write(
        tmp_path, '[profiles.openai]\nprovider = "openai"\nmodel = "m"\n[profiles.anthropic]\nprovider = "scripted"'
    )

    profiles = load_profiles(path)

    assert profiles["anthropic"] == ProviderProfile(name="anthropic", provider="scripted")
    assert profiles["openai"].extra_body == BUILTIN_PROFILES["openai"].extra_body  # same provider: merged


def test_the_example_file_loads_with_every_documented_server() -> None:
    profiles = load_profiles(EXAMPLE)

    expected = {
        "ollama": OLLAMA_URL,  # built in; the file only shows how to change it
        "local": "http://127.0.0.1:8080/v1",  # built in; the file gives it a server
        "vllm": "http://localhost:8000/v1",
        "lmstudio": "http://localhost:1234/v1",
        "gemini": "https://generativelanguage.googleapis.com/v1beta/openai/",
    }
    for name, url in expected.items():
        assert profiles[name].provider == "openai"
        assert profiles[name].base_url == url
    assert profiles["vllm"].structured_output == "json_schema"
    assert profiles["lmstudio"].structured_output == "json_schema"
    assert profiles["gemini"].api_key_env == "GEMINI_API_KEY"
    assert all(profile.max_retries <= 2 for profile in profiles.values())
    assert profiles["ollama"].api_key_env is None
    assert profiles["anthropic"] == BUILTIN_PROFILES["anthropic"]
    assert profiles["openai"] == BUILTIN_PROFILES["openai"]
    assert profiles["ollama"] == BUILTIN_PROFILES["ollama"]
    local = BUILTIN_PROFILES["local"].model_copy(
        update={"base_url": "http://127.0.0.1:8080/v1", "model": "gemma-3-4b-it"}
    )
    assert profiles["local"] == local  # the rest kept from the built-in
    assert resolve_profile(profiles["local"], {}) == local  # nothing more needed
    assert resolve_profile(profiles["local"], {"AIZUCHI_LOCAL_MODEL": "other"}).model == "other"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("[profiles.x\nprovider = 1", "cannot read", id="not TOML"),
        pytest.param(
            '[profiles.mine]\nprovider = "openai"\nmodel = "m"\ntemperature = 0.2',
            "profiles.mine.temperature",
            id="typo",
        ),
        pytest.param(
            '[profiles.mine]\nprovider = "openai"\nmodel = "m"\ntimeout_s = "fast"',
            "profiles.mine.timeout_s",
            id="type",
        ),
        pytest.param(
            '[profiles.mine]\nprovider = "openai"\nmodel = "m"\nmax_retries = -1',
            "profiles.mine.max_retries",
            id="range",
        ),
        pytest.param(
            '[profiles.mine]\nprovider = "openai"\nmodel = "m"\nmax_retries = 3',
            "profiles.mine.max_retries",
            id="retries capped",
        ),
        pytest.param(
            '[profiles.mine]\nprovider = "openai"\nmodel = "m"\ntimeout_s = 601',
            "profiles.mine.timeout_s",
            id="timeout capped",
        ),
        pytest.param('[profiles.mine]\nmodel = "m"', "profiles.mine.provider", id="no provider"),
        pytest.param('[profiles.mine]\nprovider = "gemini"\nmodel = "m"', "profiles.mine.provider", id="bad provider"),
        pytest.param('[profiles.other]\nprovider = "openai"', "profiles.other: ", id="no model"),
        pytest.param(
            '[profiles.other]\nprovider = "openai"\nmodel_env = "my model"', "profiles.other.model_env", id="env name"
        ),
        pytest.param(
            '[profiles.claude]\nprovider = "anthropic"\nmodel = "m"', "api_key_env", id="anthropic without key"
        ),
        pytest.param('[profiles.mine]\nname = "other"\nprovider = "scripted"', "profiles.mine.name", id="renamed"),
        pytest.param('profile = "scripted"', "unknown top-level key", id="stray key"),
        pytest.param('[profiles]\nmine = "scripted"', "profiles.mine: must be a table", id="not a table"),
    ],
)
def test_a_bad_file_is_an_error_naming_the_file_and_the_field(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)

    with pytest.raises(ProfileError) as caught:
        load_profiles(path)

    assert str(path) in str(caught.value)
    assert expected in str(caught.value)


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="no such file"):
        load_profiles(tmp_path / "nope.toml")


# --- the factory ----------------------------------------------------------------------------------------


async def test_each_provider_kind_builds_its_adapter() -> None:
    env = {"ANTHROPIC_API_KEY": "sk-ant-test", "OPENAI_API_KEY": "sk-test"}

    env |= {"AIZUCHI_LOCAL_URL": "http://127.0.0.1:8080/v1", "AIZUCHI_LOCAL_MODEL": "qwen3-8b"}
    names = ("scripted", "anthropic", "openai", "ollama", "local")

    built = [create_provider(BUILTIN_PROFILES[name], env) for name in names]

    assert [type(provider) for provider in built] == [
        ScriptedProvider,
        AnthropicChat,
        OpenAIChat,
        OpenAIChat,
        OpenAIChat,
    ]
    assert [provider.name for provider in built] == [
        "scripted",
        "anthropic/claude-haiku-5-5",
        "openai/gpt-5.6-luna",
        f"openai/{OLLAMA_MODEL}",
        "openai/qwen3-8b",
    ]
    for provider in built:
        await provider.aclose()


def test_the_scripted_provider_takes_the_personas_lines_language_and_seed() -> None:
    persona = make_persona(
        "aoi", language="ja", aizuchi=("へえ", "うん", "なるほど"), remarks=("いいね。", "そうだね。", "行こう。")
    )
    persona = persona.model_copy(update={"samples": persona.samples.model_copy(update={"thanks": ["いえいえ!"]})})

    provider = create_provider(BUILTIN_PROFILES["scripted"], {}, persona=persona, seed=3)

    assert isinstance(provider, ScriptedProvider)
    assert provider.aizuchi == ("へえ", "うん", "なるほど")
    assert provider.remarks == ("いいね。", "そうだね。", "行こう。")
    assert provider.lines.thanks == ("いえいえ!",)
    assert provider.language == "ja"
    assert provider.speaker == "aoi"


def test_the_scripted_provider_without_a_persona_speaks_generic_english() -> None:
    provider = create_provider(BUILTIN_PROFILES["scripted"], {})

    assert isinstance(provider, ScriptedProvider)
    assert provider.language == "en"
    assert provider.aizuchi


@pytest.mark.parametrize("name", ["anthropic", "openai"])
@pytest.mark.parametrize("env", [{}, {"ANTHROPIC_API_KEY": " ", "OPENAI_API_KEY": ""}], ids=["unset", "blank"])
def test_a_missing_key_is_an_auth_error_naming_the_variable(name: str, env: dict[str, str]) -> None:
    with pytest.raises(LLMAuthError) as caught:
        create_provider(BUILTIN_PROFILES[name], env)

    assert BUILTIN_PROFILES[name].api_key_env in str(caught.value)  # type: ignore[operator]


async def test_an_openai_compatible_server_without_a_key_gets_a_placeholder(llm_server: FakeLLMServer) -> None:
    llm_server.script(decision_reply("tools", {"action": "pass", "text": ""}))
    profile = fake_profile(llm_server, "openai", api_key_env=None)

    async with create_provider(profile, {}) as provider:
        await provider.decide(ASK)

    assert llm_server.requests[0].headers["Authorization"] == "Bearer no-key"


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_the_key_never_appears_in_logs_reprs_or_errors(
    llm_server: FakeLLMServer, caplog: pytest.LogCaptureFixture, api: str
) -> None:
    caplog.set_level(logging.DEBUG)
    llm_server.script(
        decision_reply("tools", {"action": "pass", "text": ""}), error(503, headers={"x-should-retry": "false"})
    )
    profile = fake_profile(llm_server, api)  # type: ignore[arg-type]

    async with create_provider(profile, {FAKE_KEY_ENV: FAKE_KEY}) as provider:
        await provider.decide(ASK)
        with pytest.raises(LLMUnavailable) as caught:
            await provider.decide(ASK)

    assert llm_server.requests[0].headers["Authorization"] == f"Bearer {FAKE_KEY}"  # it was sent...
    assert caplog.records  # ...and the SDK and our adapter did log
    for text in (caplog.text, repr(provider), repr(profile), str(caught.value), repr(caught.value)):
        assert FAKE_KEY not in text
