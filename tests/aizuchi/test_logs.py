"""The log as a server owner reads it: every line says which bot it came from, and discord.py's routine
reconnects read as warnings naming what happened, not as errors with a traceback."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest

from aizuchi.logs import acting_as, configure_logging

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def configured(capsys: pytest.CaptureFixture[str]) -> Iterator[pytest.CaptureFixture[str]]:
    """The process's logging as ``aizuchi`` sets it up; pytest's own handlers are put back afterwards. Each test
    configures in its body, where the handler picks up the stderr that pytest captures for that phase."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield capsys
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


async def test_a_discord_reconnect_is_a_warning_with_the_exception_type_and_no_traceback(
    configured: pytest.CaptureFixture[str],
) -> None:
    configure_logging("INFO")

    async def reconnecting() -> None:
        try:
            raise OSError(104, "Connection reset by peer, 100% gone")
        except OSError:
            logging.getLogger("discord.client").exception("Attempting a reconnect in %.2fs", 1.5)

    await acting_as("rin", reconnecting())

    [line] = configured.readouterr().err.splitlines()
    assert " WARNING [rin] discord.client: lost the connection to Discord (ConnectionResetError: " in line
    assert line.endswith("Connection reset by peer, 100% gone); reconnecting in 1.50s")


def test_other_errors_keep_their_level_and_traceback(configured: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO")
    try:
        raise KeyError("position")
    except KeyError:
        logging.getLogger("discord.client").exception("Ignoring exception in on_message")

    output = configured.readouterr().err
    assert " ERROR   [aizuchi] discord.client: Ignoring exception in on_message" in output
    assert "Traceback" in output
