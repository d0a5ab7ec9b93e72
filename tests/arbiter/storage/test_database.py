"""Opening the database: the URLs people write are accepted, anything else is refused with a clear StorageError,
and one SQLite file serves one arbiter at a time (its writer caches what it committed)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from arbiter.server import open_arbiter
from arbiter.storage.database import normalize_url
from arbiter.storage.errors import StorageError
from tests.conftest import make_settings
from tests.support.arbiters import arbiter_exit, serve

if TYPE_CHECKING:
    from pathlib import Path

    from tests.support.clock import FakeClock


@pytest.mark.parametrize(
    ("url", "driver", "database"),
    [
        ("sqlite:///aizuchi.db", "sqlite+pysqlite", "aizuchi.db"),
        ("sqlite:////var/lib/aizuchi/arbiter.db", "sqlite+pysqlite", "/var/lib/aizuchi/arbiter.db"),
        ("sqlite+aiosqlite:///aizuchi.db", "sqlite+pysqlite", "aizuchi.db"),
        ("sqlite+pysqlite:///aizuchi.db", "sqlite+pysqlite", "aizuchi.db"),
        ("postgresql://postgres@127.0.0.1:5432/aizuchi", "postgresql+asyncpg", "aizuchi"),
        ("postgresql+asyncpg://postgres@127.0.0.1:5432/aizuchi", "postgresql+asyncpg", "aizuchi"),
        ("postgresql+psycopg://postgres@127.0.0.1:5432/aizuchi", "postgresql+asyncpg", "aizuchi"),
    ],
)
def test_accepted_urls_get_the_shipped_driver(url: str, driver: str, database: str) -> None:
    normalized = normalize_url(url)
    assert normalized.drivername == driver
    assert normalized.database == database


def test_postgres_url_keeps_its_credentials_host_and_options() -> None:
    normalized = normalize_url("postgresql://fleet:s3cret@db.example:6543/aizuchi?ssl=require")
    assert (normalized.username, normalized.password, normalized.host, normalized.port) == (
        "fleet",
        "s3cret",
        "db.example",
        6543,
    )
    assert dict(normalized.query) == {"ssl": "require"}


@pytest.mark.parametrize(
    ("url", "names"),
    [
        ("mysql://root@localhost/aizuchi", "'mysql'"),
        ("mysql+aiomysql://root@localhost/aizuchi", "'mysql'"),
        ("oracle://scott@localhost/aizuchi", "'oracle'"),
        ("not a database url", "cannot read"),
        ("", "cannot read"),
    ],
)
def test_other_urls_are_refused_clearly(url: str, names: str) -> None:
    with pytest.raises(StorageError) as refused:
        normalize_url(url)
    assert refused.value.code == "bad_database_url"
    assert names in refused.value.message


def test_unsupported_database_error_says_what_to_use() -> None:
    with pytest.raises(StorageError, match=r"sqlite:///.*postgresql://"):
        normalize_url("mysql://root@localhost/aizuchi")


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///:memory:", "sqlite+aiosqlite:///:memory:", "sqlite:///file::memory:?cache=shared"]
)
async def test_in_memory_sqlite_is_refused_clearly(url: str) -> None:
    with pytest.raises(StorageError, match="in-memory") as refused:
        async with open_arbiter(make_settings(url)):
            pass
    assert refused.value.code == "bad_database_url"


async def test_sqlite_file_where_none_can_be_made_is_refused_clearly(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    with pytest.raises(StorageError, match="cannot open the database") as refused:
        async with open_arbiter(make_settings(f"sqlite:///{blocker / 'arbiter.db'}")):
            pass
    assert refused.value.code == "database_unavailable"


async def test_unreachable_postgres_is_refused_clearly() -> None:
    # Port 1 on the loopback: nothing listens there, so the connection is refused at once.
    url = "postgresql://fleet:hunter2@127.0.0.1:1/aizuchi"
    with pytest.raises(StorageError, match="cannot open the database") as refused:
        async with open_arbiter(make_settings(url)):
            pass
    assert refused.value.code == "database_unavailable"
    assert "127.0.0.1:1/aizuchi" in refused.value.message
    assert "hunter2" not in refused.value.message


@pytest.mark.postgres
async def test_missing_postgres_database_is_refused_clearly(postgres_url: str) -> None:
    name = f"aizuchi_missing_{uuid.uuid4().hex[:8]}"
    with pytest.raises(StorageError, match=f'"{name}" does not exist') as refused:
        async with open_arbiter(make_settings(postgres_url.rsplit("/", 1)[0] + f"/{name}")):
            pass
    assert refused.value.code == "database_unavailable"


# --- one arbiter per SQLite file ---------------------------------------------------------------------------


async def test_second_arbiter_on_one_sqlite_file_is_refused_while_the_first_runs(
    sqlite_url: str, clock: FakeClock
) -> None:
    async with serve(sqlite_url, clock=clock) as first:
        await first.api.create_channel("lobby")
        with pytest.raises(StorageError, match=r"another arbiter process is using .*arbiter\.db") as refused:
            async with open_arbiter(make_settings(sqlite_url), clock=clock):
                pass
        assert refused.value.code == "database_in_use"
        # Being refused must not disturb the arbiter that owns the file.
        assert (await first.api.consume("lobby", "hana", "aizuchi", "うん"))["granted"]


async def test_sqlite_file_is_free_again_once_its_arbiter_closes(sqlite_url: str, clock: FakeClock) -> None:
    async with serve(sqlite_url, clock=clock) as first:
        await first.api.create_channel("lobby")
        await first.api.consume("lobby", "hana", "aizuchi", "うん")
    async with serve(sqlite_url, clock=clock) as second:
        assert [m["text"] for m in await second.api.history("lobby")] == ["うん"]


async def test_arbiter_process_on_a_sqlite_file_in_use_exits_with_the_reason(
    sqlite_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    async with serve(sqlite_url, clock=clock):
        returncode, stderr = await arbiter_exit(sqlite_url, tmp_path, name="intruder")
    assert returncode != 0
    assert "another arbiter process is using" in stderr
