"""A private PostgreSQL server on one host of a lab (tests/support/netns.py): its own cluster in a temporary
folder, made with the machine's ``initdb`` and run by ``postgres`` as the ``postgres`` user (the server refuses to
run as root), listening only on the host's address. The machine's own server on 127.0.0.1 is not touched, and
nothing of this one outlives the lab.

Durability settings are off (fsync, synchronous commit): the tests cut the network, never the power, and what
they check - nothing acknowledged lost - is about what the arbiter commits before it answers.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.eventually import eventually

if TYPE_CHECKING:
    import subprocess
    from collections.abc import AsyncIterator

    from tests.support.netns import Lab

__all__ = ("lab_postgres", "postgres_binaries")

_USER = "postgres"
PORT = 5432


def postgres_binaries() -> Path | None:
    """The newest installed server's bin folder (Debian's layout), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _require() -> tuple[Path, pwd.struct_passwd]:
    binaries = postgres_binaries()
    reason = None
    if binaries is None:
        reason = "no PostgreSQL server is installed (/usr/lib/postgresql/*/bin/initdb)"
    try:
        user = pwd.getpwnam(_USER)
    except KeyError:
        reason = reason or f"there is no {_USER!r} user to run a private server as"
    if reason is not None:
        if os.environ.get("AIZUCHI_REQUIRE_SERVICES") == "1":
            pytest.fail(f"a private PostgreSQL server is required (AIZUCHI_REQUIRE_SERVICES=1) but {reason}")
        pytest.skip(reason)
    assert binaries is not None
    return binaries, user


@contextlib.asynccontextmanager
async def lab_postgres(lab: Lab, host: str) -> AsyncIterator[str]:
    """A server on ``host``, ready; yields its URL (database ``postgres``, user ``postgres``, trust auth from the
    lab's subnet). The cluster's folder is removed at the end; the server is one of the lab's processes."""
    binaries, user = _require()
    folder = Path(tempfile.mkdtemp(prefix="aizuchi-lab-pg-"))
    server: subprocess.Popen[bytes] | None = None
    try:
        os.chown(folder, user.pw_uid, user.pw_gid)
        data = folder / "data"
        lab.run(
            host,
            [str(binaries / "initdb"), "-D", str(data), "-U", _USER, "-A", "trust", "--no-sync", "-E", "UTF8"],
            user=_USER,
        )
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {lab.subnet} trust\n")
        address = lab.address(host)
        log = folder / "server.log"
        log.touch()
        os.chown(log, user.pw_uid, user.pw_gid)
        server = lab.spawn(
            host,
            [
                str(binaries / "postgres"),
                "-D",
                str(data),
                "-c",
                f"listen_addresses={address}",
                "-c",
                f"port={PORT}",
                "-c",
                f"unix_socket_directories={folder}",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
            ],
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
            cwd=folder,
            log=log,
            user=_USER,
        )

        def ready() -> bool:
            if server.poll() is not None:
                raise AssertionError(f"PostgreSQL exited with {server.returncode}:\n{log.read_text()[-2000:]}")
            return "database system is ready to accept connections" in log.read_text(errors="replace")

        await eventually(ready, what="the lab's PostgreSQL to accept connections", every=0.05)
        yield f"postgresql://{_USER}@{address}:{PORT}/postgres"
    finally:
        if server is not None:
            # Before its files go: a server whose folder vanished fails every query with a misleading error. The
            # whole group: the postmaster's backends too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)
