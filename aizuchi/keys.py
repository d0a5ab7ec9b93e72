"""The model keys, checked at start: each distinct key the personas use, once, by the cheapest call its API answers
only for a good key. A wrong or revoked key is then one line and a failing status, not a fleet that starts and
never says a word."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from aizuchi.errors import SetupError
from bots.llm.base import LLMAuthError, LLMError
from bots.llm.profiles import create_provider, resolve_profile

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aizuchi.fleet import Cast
    from bots.llm.profiles import ProviderProfile

__all__ = ("check_keys",)

_log = logging.getLogger(__name__)

CHECK_WITHIN_S = 10.0


async def check_keys(cast: Cast, env: Mapping[str, str], *, within: float = CHECK_WITHIN_S) -> None:
    """Raise SetupError naming the variable and the profile when an API refuses a key. An API that cannot answer
    (down, unreachable, no model list) is a warning: the fleet starts, and says so if its calls fail later."""
    keyed: dict[tuple[str, str | None, str], ProviderProfile] = {}
    for persona in cast.personas:
        profile = cast.profiles[persona.id]
        if profile.provider == "scripted" or profile.api_key_env is None:
            continue
        where = resolve_profile(profile, env).base_url
        keyed.setdefault((profile.provider, where, profile.api_key_env), profile)
    refused = [error for error in await asyncio.gather(*(_check(p, env, within) for p in keyed.values())) if error]
    if refused:
        raise SetupError(
            f"{refused[0].message}: put a valid key in .env (AIZUCHI_CHECK_KEYS=false starts without checking)"
        )


async def _check(profile: ProviderProfile, env: Mapping[str, str], within: float) -> LLMAuthError | None:
    provider = create_provider(profile, env)
    try:
        async with asyncio.timeout(within):
            await provider.check_key(within)
    except LLMAuthError as error:
        return error
    except (LLMError, TimeoutError) as error:
        _log.warning(
            "could not check the key in %s (profile %r): %s", profile.api_key_env, profile.name, error or "timeout"
        )
    finally:
        await provider.aclose()
    return None
