"""The two :class:`~studio_scheduler_core.abc.Leadership` implementations.

:class:`FileLockLeadership` (SQLite): the database file's exclusive lock, taken once at start;
a second engine on the same file is refused (:class:`EngineLocked`), as it always was.
:class:`PostgresLeadership`: ``studio_state.postgres.LeaderElection``, a session advisory
lock on a dedicated connection; every node is a candidate, the one holding the lock leads,
and a follower takes a dead leader's place at its next attempt (every second).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from studio_state import default_node_id, is_postgres

from .._exceptions import SchedulerError
from .._settings import SchedulerSettings
from .lock import EngineLock

if TYPE_CHECKING:
    from studio_state.postgres import LeaderElection

logger = logging.getLogger("studio_scheduler_core")

#: A follower tries the lock, and a leader confirms its session, this often (seconds), whatever
#: the engine's ``tick_seconds``: failover after a leader's death takes about this long.
ATTEMPT_EVERY = 1.0


class FileLockLeadership:
    """Leadership on SQLite: held from :meth:`acquire` (the file lock) to :meth:`release`."""

    def __init__(self, db_path: str | Path, *, node_id: str | None = None) -> None:
        self.lock = EngineLock(db_path)
        self._node_id = node_id if node_id is not None else default_node_id()

    @property
    def node_id(self) -> str:
        """This engine's node name."""
        return self._node_id

    @property
    def is_leader(self) -> bool:
        """Whether the file lock is held."""
        return self.lock.held

    async def acquire(self) -> None:
        """Take the file lock (:class:`EngineLocked` when another engine holds it)."""
        self.lock.acquire()

    async def tick(self) -> bool:
        """Whether the lock is held (it cannot be lost while the process lives)."""
        return self.lock.held

    async def release(self) -> None:
        """Release the file lock."""
        self.lock.release()


class PostgresLeadership:
    """Leadership on PostgreSQL: a :class:`~studio_state.postgres.LeaderElection` candidate.

    ``url`` is the database's libpq URL. The candidate's cadence is its own, independent of
    the engine's ``tick_seconds``: while :meth:`campaign` runs (the engine's loop runs it), a
    follower tries the lock and a leader confirms its session every ``attempt_seconds``, and
    :meth:`tick` only reads the outcome. Without a campaign, :meth:`tick` does the round
    itself (a leader's at most every ``attempt_seconds``).
    """

    def __init__(
        self, url: str, *, node_id: str | None = None, attempt_seconds: float = ATTEMPT_EVERY
    ) -> None:
        from studio_state.postgres import LeaderElection

        self.election: LeaderElection = LeaderElection(
            url, node_id=node_id, tick_seconds=attempt_seconds
        )
        self._checked_at: float | None = None
        self._campaigning = False

    @property
    def node_id(self) -> str:
        """This node's name (its sessions are ``studio:<node_id>``)."""
        return self.election.node_id

    @property
    def attempt_seconds(self) -> float:
        """How often a follower tries the lock and a leader confirms its session."""
        return self.election.tick_seconds

    @property
    def is_leader(self) -> bool:
        """Whether this node holds the advisory lock and its lease has not lapsed."""
        return self.election.is_leader

    async def acquire(self) -> None:
        """Nothing to take before opening: the first :meth:`tick` tries the lock."""

    async def tick(self) -> bool:
        """The campaign's outcome while it runs; else a follower tries the lock and a leader
        re-checks its session (at most every ``attempt_seconds``)."""
        if self._campaigning:
            return self.election.is_leader
        now = time.monotonic()
        if (
            self.election.is_leader
            and self._checked_at is not None
            and now - self._checked_at < self.attempt_seconds
        ):
            return True
        self._checked_at = now
        return await self.election.tick()

    async def campaign(self, on_change: Callable[[], None]) -> None:
        """Run the election every ``attempt_seconds`` until cancelled; ``on_change()`` is
        called when leadership was gained or lost (the engine's loop wakes and follows)."""
        if self._campaigning:
            raise SchedulerError("the leadership campaign already runs")
        self._campaigning = True
        try:
            was = self.election.is_leader
            while True:
                began = time.monotonic()
                try:
                    now = await self.election.tick()
                except Exception:  # never expected: the election reports failures as lost
                    logger.exception("the leadership election failed; trying again")
                    now = self.election.is_leader
                if now != was:
                    on_change()
                was = now
                await asyncio.sleep(max(0.0, began + self.attempt_seconds - time.monotonic()))
        finally:
            self._campaigning = False

    async def release(self) -> None:
        """Unlock and close the election's connection (a follower takes over at once)."""
        await self.election.close()


def default_leadership(
    db_path: str, settings: SchedulerSettings, node_id: str | None
) -> FileLockLeadership | PostgresLeadership:
    """The file lock on a SQLite path; an advisory-lock election (every node a candidate,
    trying or confirming every :data:`ATTEMPT_EVERY` seconds) on a PostgreSQL URL."""
    if is_postgres(db_path):
        return PostgresLeadership(db_path, node_id=node_id)
    return FileLockLeadership(db_path, node_id=node_id)
