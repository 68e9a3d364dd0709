"""The two :class:`~studio_scheduler_core.abc.Leadership` implementations.

:class:`FileLockLeadership` (SQLite): the database file's exclusive lock, taken once at start;
a second engine on the same file is refused (:class:`EngineLocked`), as it always was.
:class:`PostgresLeadership`: ``studio_state.postgres.LeaderElection``, a session advisory
lock on a dedicated connection; every node is a candidate, the one holding the lock leads,
and a candidate takes a dead leader's place at its next :meth:`tick`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from studio_state import default_node_id, is_postgres

from .._settings import SchedulerSettings
from .lock import EngineLock

if TYPE_CHECKING:
    from studio_state.postgres import LeaderElection

#: A leader's own session check runs at most this often (the loop may turn many times a second).
LEADER_CHECK_EVERY = 1.0


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

    ``url`` is the database's libpq URL. A leader's session is checked at most every
    :data:`LEADER_CHECK_EVERY` seconds (a follower tries the lock at every :meth:`tick`; the
    engine ticks a follower every ``tick_seconds``).
    """

    def __init__(self, url: str, *, node_id: str | None = None, tick_seconds: float = 30.0) -> None:
        from studio_state.postgres import LeaderElection

        self.election: LeaderElection = LeaderElection(
            url, node_id=node_id, tick_seconds=tick_seconds
        )
        self._checked_at: float | None = None

    @property
    def node_id(self) -> str:
        """This node's name (its sessions are ``studio:<node_id>``)."""
        return self.election.node_id

    @property
    def is_leader(self) -> bool:
        """Whether the last tick found this node holding the advisory lock."""
        return self.election.is_leader

    async def acquire(self) -> None:
        """Nothing to take before opening: the first :meth:`tick` tries the lock."""

    async def tick(self) -> bool:
        """A follower tries the lock; a leader re-checks its session (rate-limited)."""
        now = time.monotonic()
        if (
            self.election.is_leader
            and self._checked_at is not None
            and now - self._checked_at < LEADER_CHECK_EVERY
        ):
            return True
        self._checked_at = now
        return await self.election.tick()

    async def release(self) -> None:
        """Unlock and close the election's connection (a follower takes over at once)."""
        await self.election.close()


def default_leadership(
    db_path: str, settings: SchedulerSettings, node_id: str | None
) -> FileLockLeadership | PostgresLeadership:
    """The file lock on a SQLite path; an advisory-lock election (every node a candidate,
    checked every ``tick_seconds``) on a PostgreSQL URL."""
    if is_postgres(db_path):
        return PostgresLeadership(db_path, node_id=node_id, tick_seconds=settings.tick_seconds)
    return FileLockLeadership(db_path, node_id=node_id)
