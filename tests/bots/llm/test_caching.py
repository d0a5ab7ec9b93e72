"""Prompt caching with the real SDK clients against the local wire server (``tests.support.llm_server``, whose cache
rules are in ``tests.support.llm_cache``): a persona's decide prompt begins the same whatever its claim allows, that
beginning is marked where the model caches one that long, and the cache's reads and writes come back in the usage."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anthropic
import pytest

from arbiter.contract import AuthorKind, MessageView, Tier
from bots.llm.base import DecisionRequest, Usage
from bots.llm.pricing import PRICES, cost, model_price, uncached_cost
from bots.memory import MEMORY_SCHEMA
from bots.persona import load_personas
from bots.prompt import persona_prompt, rules_prompt, transcript_turn
from tests.support.clock import FakeClock
from tests.support.fleet import make_persona
from tests.support.llm_server import FAKE_KEY, FakeLLMServer, decision_reply, text_reply
from tests.support.status import DEFAULT_LENGTHS, status_for

if TYPE_CHECKING:
    from bots.persona import Persona
    from tests.bots.llm.conftest import MakeProvider

PERSONAS = Path(__file__).parents[3] / "personas"
LENGTHS = {str(tier): length for tier, length in DEFAULT_LENGTHS.items()}
# What a claim of each tier lets the persona do (as the worker's step offers it).
MOVES = {Tier.AIZUCHI: ("pass", "aizuchi"), Tier.REMARK: ("pass", "remark"), Tier.LONG: ("pass", "remark", "long")}


def said_by_yui(text: str) -> MessageView:
    return MessageView(seq=1, author_id="yui", author_kind=AuthorKind.HUMAN, author_name="Yui", text=text, at=0.0)


def rin() -> Persona:
    return load_personas(PERSONAS, ["rin"])[0]


def decision_request(persona: Persona, claim: Tier, text: str, *, system: str | None = None) -> DecisionRequest:
    """A persona's decision as the worker asks it (``bots.worker.turn``): the stable rules and decide tool first,
    then the conversation ending with the moves this claim allows."""
    status = status_for(persona.id)
    window = [said_by_yui(text)]
    moves = MOVES[claim]
    return DecisionRequest(
        system=system if system is not None else persona_prompt(persona) + "\n\n" + rules_prompt(persona, LENGTHS, ""),
        turns=(transcript_turn(persona, window, status, moves=moves, max_lengths=LENGTHS),),
        actions=tuple(m for m in moves if m != "pass"),  # type: ignore[arg-type]
        max_lengths=LENGTHS,
        memory_schema=MEMORY_SCHEMA,
        cache_key="aizuchi-rin-lounge",
    )


def stable_part(api: str, body: dict[str, Any]) -> Any:
    """What a request sends before the conversation: the tools and the system prompt."""
    messages = body["messages"]
    return (body.get("tools"), body.get("system") if api == "anthropic" else messages[0])


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_a_persona_writes_its_prompt_to_the_cache_then_reads_it_on_a_claim_of_another_tier(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str
) -> None:
    provider = make_provider(api)  # type: ignore[arg-type]
    llm_server.script(
        decision_reply("tools", {"action": "aizuchi", "text": "Ooh.", "memory": {}}),
        decision_reply("tools", {"action": "remark", "text": "Ramen, always.", "memory": {}}),
    )

    nod = await provider.decide(decision_request(rin(), Tier.AIZUCHI, "Back from the trip!"))
    remark = await provider.decide(decision_request(rin(), Tier.REMARK, "Ramen or udon tonight?"))

    first, second = (request.body for request in llm_server.requests)
    assert stable_part(api, first) == stable_part(api, second)  # one beginning for every tier
    assert first["messages"][-1] != second["messages"][-1]
    written = nod.usage.cache_write_tokens
    assert written > 512 and nod.usage.cache_read_tokens == 0  # the first time: written
    assert remark.usage.cache_read_tokens == written and remark.usage.cache_write_tokens == 0  # then read
    assert remark.usage.prompt_tokens == 21 + written  # the conversation after it, uncached, plus what was read
    if api == "openai":
        # A persona's calls go where its prefix is cached; no implicit breakpoint at the changing end.
        assert first["prompt_cache_key"] == second["prompt_cache_key"] == "aizuchi-rin-lounge"
        assert first["prompt_cache_options"] == {"mode": "explicit"}
        assert first["messages"][0]["content"][0]["prompt_cache_breakpoint"] == {"mode": "explicit"}
    else:
        assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}


@pytest.mark.parametrize(
    ("api", "model"),
    [
        pytest.param("anthropic", "claude-haiku-5-5", id="anthropic, a short system prompt"),
        pytest.param("openai", "gpt-5.6-luna", id="openai, a short system prompt"),
    ],
)
async def test_a_prefix_below_the_models_minimum_is_not_marked(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str, model: str
) -> None:
    provider = make_provider(api, model=model)  # type: ignore[arg-type]
    answer = {"action": "remark", "text": "Hi!"}
    llm_server.script(decision_reply("tools", answer), decision_reply("tools", answer))
    short = decision_request(make_persona("aoi"), Tier.REMARK, "Hi!", system="You are Aoi.")
    request = dataclasses.replace(short, memory_schema=None)  # the decide tool and this: some 200 tokens

    results = [await provider.decide(request) for _ in range(2)]

    for body in llm_server.bodies():
        if api == "anthropic":
            assert body["system"] == "You are Aoi."  # a plain string: no cache_control
        else:
            assert body["messages"][0]["content"] == "You are Aoi."  # no prompt_cache_breakpoint
            assert body["prompt_cache_options"] == {"mode": "explicit"}  # and no implicit one either
    assert [result.usage for result in results] == [Usage(21, 7), Usage(21, 7)]  # nothing cached, nothing read


async def test_haiku_4_5_needs_4096_tokens_so_a_persona_prompt_is_not_marked(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    provider = make_provider("anthropic", model="claude-haiku-4-5")
    llm_server.script(decision_reply("tools", {"action": "remark", "text": "Sure.", "memory": {}}))

    result = await provider.decide(decision_request(rin(), Tier.REMARK, "Ramen?"))

    assert isinstance(llm_server.requests[0].body["system"], str)
    assert result.usage == Usage(21, 7)


# --- the wire server's cache, as the APIs document it ---------------------------------------------------


def _client(server: FakeLLMServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key=FAKE_KEY, base_url=server.anthropic_url, max_retries=0)


def _marked(text: str, **control: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral", **control}}]


async def test_the_anthropic_cache_lives_five_minutes_from_its_last_read() -> None:
    clock = FakeClock()
    long_system = "The rules of the room. " * 200  # about 1,150 tokens
    async with FakeLLMServer(*(text_reply("ok") for _ in range(5)), clock=clock) as server:
        client = _client(server)
        ask: dict[str, Any] = {
            "model": "claude-haiku-5-5",
            "max_tokens": 64,
            "thinking": {"type": "disabled"},
            "messages": [{"role": "user", "content": "hi"}],
        }
        usages = []
        for advance in (0.0, 299.0, 299.0, 301.0):
            clock.advance(advance)
            answer = await client.messages.create(**ask, system=_marked(long_system))
            usages.append((answer.usage.cache_creation_input_tokens, answer.usage.cache_read_input_tokens))
        short = await client.messages.create(**ask, system=_marked("Too short to cache."))
        await client.close()

    size = usages[0][0]
    assert size > 1000
    # Written, read within 5 minutes (each read keeps it 5 more), then written again once 5 minutes passed unused.
    assert usages == [(size, 0), (0, size), (0, size), (size, 0)]
    assert (short.usage.cache_creation_input_tokens, short.usage.cache_read_input_tokens) == (0, 0)
    assert server.refusals == []


async def test_more_than_four_cache_breakpoints_are_refused_as_anthropic_refuses_them() -> None:
    async with FakeLLMServer() as server:
        client = _client(server)
        with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks with cache_control"):
            await client.messages.create(
                model="claude-haiku-5-5",
                max_tokens=64,
                thinking={"type": "disabled"},
                system=[block for n in range(5) for block in _marked(f"part {n}")],  # type: ignore[misc]
                messages=[{"role": "user", "content": "hi"}],
            )
        await client.close()


# --- the price table ------------------------------------------------------------------------------------


def test_cached_tokens_cost_what_the_providers_charge_for_them() -> None:
    haiku = model_price("anthropic", "claude-haiku-5-5")
    luna = model_price("openai", "gpt-5.6-luna-2026-07-09")  # a dated snapshot is its family
    assert haiku is PRICES["claude-haiku-5-5"] and luna is PRICES["gpt-5.6-luna"]
    assert model_price("openai", "gemma4") is None  # a compatible server's model: not priced, not marked
    usage = Usage(2_000_000, 1_000_000, cache_read_tokens=1_000_000, cache_write_tokens=500_000)

    # Haiku 5.5: 0.5 M uncached at $0.10, 0.5 M written at $0.125, 1 M read at $0.01, 1 M out at $0.50.
    assert cost(usage, haiku) == pytest.approx(0.05 + 0.0625 + 0.01 + 0.50)
    assert uncached_cost(usage, haiku) == pytest.approx(0.20 + 0.50)
    assert (haiku.read_rate, haiku.write_rate) == (pytest.approx(0.1), pytest.approx(1.25))
    assert (luna.read_rate, luna.write_rate, luna.min_cacheable) == (pytest.approx(0.1), pytest.approx(1.25), 1024)
