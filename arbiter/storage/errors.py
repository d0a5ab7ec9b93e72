"""The storage's one error, in the arbiter's exception family: the database failed and the operation did not
happen. Here, not in the pure core, which knows no database; the HTTP layer answers it with 503."""

from __future__ import annotations

from arbiter.core.errors import ArbiterError

__all__ = ("StorageError",)


class StorageError(ArbiterError):
    """The database failed; the operation did not happen."""

    code = "storage_unavailable"
