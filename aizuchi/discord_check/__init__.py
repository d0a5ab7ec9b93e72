"""Checking the fleet's Discord setup before it starts: ``aizuchi discord check``, and ``aizuchi run`` at start.

- ``needs``: what each kind of bot needs (permissions, invite scopes), declared once, and its invite URL;
- ``check``: the checks, over Discord's REST API with discord.py;
- ``enabled``: the channels the fleet is enabled in, read from the arbiter's database without changing it;
- ``commands``: the command, and the check at start.
"""

from __future__ import annotations

from aizuchi.discord_check.check import Account, Problem, Report, check_setup
from aizuchi.discord_check.commands import check_at_start, run_check
from aizuchi.discord_check.needs import ARBITER, ARBITER_WITH_WEBHOOKS, PERSONA, Needs

__all__ = (
    "ARBITER",
    "ARBITER_WITH_WEBHOOKS",
    "PERSONA",
    "Account",
    "Needs",
    "Problem",
    "Report",
    "check_at_start",
    "check_setup",
    "run_check",
)
