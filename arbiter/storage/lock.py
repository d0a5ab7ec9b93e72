"""One arbiter process per SQLite file. The writer keeps committed state in memory, which is only right
while no other process writes the file; a second arbiter on the same file is refused with a clear error."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from arbiter.storage.errors import StorageError

if TYPE_CHECKING:
    from types import TracebackType

    from sqlalchemy.engine import URL

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ("SqliteFileLock", "sqlite_path")


def sqlite_path(url: URL) -> Path:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        raise StorageError(
            "an in-memory SQLite database cannot be shared by the arbiter's connections; give a file path, "
            "e.g. sqlite:///aizuchi.db",
            code="bad_database_url",
        )
    return Path(database)


class SqliteFileLock:
    """An advisory lock on ``<database>.lock``, held for the life of the process's arbiter."""

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".lock")
        self._fd: int | None = None

    def __enter__(self) -> SqliteFileLock:
        if fcntl is None:  # pragma: no cover
            return self
        database = self.path.with_suffix("")
        blocking = next((p for p in reversed(self.path.parents) if p.exists() and not p.is_dir()), None)
        if blocking is not None:
            raise StorageError(
                f"cannot open the database {database}: {blocking} is a file, not a directory",
                code="database_unavailable",
            )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            raise StorageError(
                f"cannot open the database {database}: {error.strerror or error} ({error.filename or database})",
                code="database_unavailable",
            ) from error
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StorageError(
                f"another arbiter process is using {self.path.with_suffix('')}; run one arbiter per SQLite file, "
                "or use PostgreSQL to run several",
                code="database_in_use",
            ) from None
        self._fd = fd
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
