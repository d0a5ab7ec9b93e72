"""How the relay's listening connection (``arbiter.storage.pubsub``) is kept honest: when it is probed, how long an
answer may take, how soon a lost one is tried again, and what its failures mean. Pure: the relay does the I/O.

Why a probe: a LISTEN connection only ever receives, so a link that dies silently (packets dropped until TCP gives
up, a NAT that forgot the flow, a server that ended the backend behind a firewall that ate the reset) leaves it
waiting for notifications that will never come, for as long as the kernel keeps the socket (hours, with no data
outstanding). asyncpg has no client-side keepalive or ``tcp_user_timeout`` (MagicStack/asyncpg#606), so the relay
sends a round trip of its own when none was sent for a while, and gives the connection up when one goes
unanswered. The server is told to do the same from its side (``Liveness.server_side``), so that it does not keep a dead
listener's backend (and its place in the notification queue) for hours."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

__all__ = ("Liveness", "connection_gone")


@dataclass(frozen=True, slots=True)
class Liveness:
    """``probe_every_s``: a round trip when none was made for this long. ``timeout_s``: how long one may take before
    the connection is given up (and a read waiting for it reads what it needs instead). So a listener that died
    silently is noticed within ``probe_every_s + timeout_s``. ``retry_first_s`` and ``retry_most_s``: the back-off
    between attempts to listen again, doubling from the first to the most."""

    probe_every_s: float = 2.0
    timeout_s: float = 3.0
    retry_first_s: float = 0.5
    retry_most_s: float = 10.0

    def __post_init__(self) -> None:
        if min(self.probe_every_s, self.timeout_s, self.retry_first_s) <= 0 or self.retry_most_s < self.retry_first_s:
            raise ValueError(f"not a usable liveness: {self}")

    @property
    def noticed_within_s(self) -> float:
        """The longest a silent death goes unnoticed."""
        return self.probe_every_s + self.timeout_s

    def next_retry(self, delay: float) -> float:
        return min(delay * 2, self.retry_most_s)

    def server_side(self) -> list[str]:
        """The statements that have PostgreSQL give up a dead listener within about the same time: keepalives
        after ``probe_every_s`` of silence (whole seconds), and unacknowledged data (a notification sent into the
        void) dropped after ``timeout_s`` plus the probes (milliseconds)."""
        idle = max(1, round(self.probe_every_s))
        interval = max(1, round(self.timeout_s / 3))
        give_up_ms = round(1000 * (idle + 3 * interval))
        return [
            f"SET tcp_keepalives_idle = {idle}",
            f"SET tcp_keepalives_interval = {interval}",
            "SET tcp_keepalives_count = 3",
            f"SET tcp_user_timeout = {give_up_ms}",
        ]


def connection_gone(error: BaseException) -> bool:
    """Whether a round trip's failure means the connection is lost (give it up, listen again), not only that the
    statement failed (a cancelled query on a busy server, say: the connection still listens). A round trip that
    timed out counts as lost: a ``SELECT 1`` unanswered for seconds is the silent death the probe looks for, and
    listening again costs one reconnection and one catch-up read per followed channel."""
    if isinstance(error, (TimeoutError, OSError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError)):
        return True
    # The server ending the session (pg_terminate_backend, a restart): its error is an admin shutdown.
    return isinstance(error, (asyncpg.AdminShutdownError, asyncpg.CannotConnectNowError))
