from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import pytest

from arbiter.server import Arbiter, open_arbiter
from arbiter.settings import ArbiterSettings
from tests.support.clock import FakeClock

# Imported before discord.py is, so that discord.py's audioop import happens with its warning silenced.
from tests.support.fake_discord import FakeDiscord
from tests.support.postgres import create_database, drop_database

if TYPE_CHECKING:
    from pathlib import Path

    from aiohttp.test_utils import TestClient

# Some machines (these sandboxes among them) set PYTHONDONTWRITEBYTECODE, and then every xdist worker rewrites the
# asserts of some 400 test modules and every `aizuchi` subprocess the tests start compiles the whole project again:
# 15 s of a 4.5-minute suite. The tests and their children cache bytecode as Python does by default (__pycache__ is
# ignored by git); the workers, started after this, inherit it.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

ADMIN_TOKEN = "admin-token-0123456789abcdef"
PERSONA_TOKENS = {
    "hana": "hana-token-0123456789abcdef",
    "kai": "kai-token-0123456789abcdef",
    "mio": "mio-token-0123456789abcdef",
}


def auth(who: str) -> dict[str, str]:
    token = ADMIN_TOKEN if who == "admin" else PERSONA_TOKENS[who]
    return {"Authorization": f"Bearer {token}"}


def make_settings(database_url: str | None, **overrides: Any) -> ArbiterSettings:
    """The test arbiter's settings; ``database_url`` None for the in-memory twin (the default URL, never opened)."""
    database = {} if database_url is None else {"database_url": database_url}
    return ArbiterSettings(
        admin_token=ADMIN_TOKEN,
        persona_tokens=PERSONA_TOKENS,
        _env_file=None,
        **database,
        **overrides,
    )


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """One worker more than the cores (``-n auto``): the tests wait on processes, sockets and timers about as
    much as they compute, so two workers leave two cores half idle. On two cores the suite took 5 min 16 s with
    two workers and 4 min 12 s with three; a fourth only added contention."""
    return (os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what a test needs by the fixtures it uses, so that ``-m "not postgres and not browser"`` runs every test
    that needs neither a PostgreSQL server nor Chromium (tests/README.md)."""
    for item in items:
        needs = set(getattr(item, "fixturenames", ()))
        if "postgres_url" in needs:
            item.add_marker(pytest.mark.postgres)
        if "browser" in needs:
            item.add_marker(pytest.mark.browser)


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    """A local Discord (REST API and gateway) that discord.py clients in this process connect to."""
    async with FakeDiscord() as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'arbiter.db'}"


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    url = await create_database()
    yield url
    await drop_database(url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """Each test using this runs once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'arbiter.db'}"
        return
    url = await create_database()
    yield url
    await drop_database(url)


OpenArbiter = Callable[..., Awaitable[Arbiter]]


@pytest.fixture
async def open_test_arbiter(clock: FakeClock) -> AsyncIterator[OpenArbiter]:
    """Open arbiters on a database (None: on the in-memory twin); all are closed at the end of the test."""
    async with AsyncExitStack() as stack:

        async def opener(database_url: str | None, *, arbiter_clock: Callable[[], float] | None = None) -> Arbiter:
            settings = make_settings(database_url)
            opened = open_arbiter(settings, clock=arbiter_clock or clock, in_memory=database_url is None)
            return await stack.enter_async_context(opened)

        yield opener


def storage_url(request: pytest.FixtureRequest) -> str | None:
    """Where a test's arbiter keeps its data: the in-memory twin (None), unless the test is marked ``on_sqlite``
    (it tests the storage: then on the file of its ``sqlite_url``)."""
    if request.node.get_closest_marker("on_sqlite") is None:
        return None
    url: str = request.getfixturevalue("sqlite_url")
    return url


@pytest.fixture
async def arbiter(request: pytest.FixtureRequest, open_test_arbiter: OpenArbiter) -> Arbiter:
    """An arbiter on the in-memory twin (``arbiter.storage.memory``), or on SQLite for a test marked ``on_sqlite``."""
    return await open_test_arbiter(storage_url(request))


@pytest.fixture
async def client(
    arbiter: Arbiter, aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]]
) -> TestClient[Any, Any]:
    return await aiohttp_client(arbiter.app)
