"""Processes of ended runs still alive on this machine: every node terminates its own.

A node that dies with children running leaves them on its machine. Another node settles their
runs (lease recovery fails them ``run.failed.node_lost``), but cannot signal a process on
another machine. So every node looks at its own machine when it starts and then every
``reaper_interval_seconds``: a live process that carries this database's
``LIONAGI_STUDIO_DB`` and the ``LIONAGI_INVOCATION_ID`` of a run's invocation that has ended
(or was given up) is an orphan, and its process group is terminated. A process whose
invocation is still running, or is not a run's, is left alone.
"""

from __future__ import annotations

import logging

import aiosqlite

from studio_launcher import INVOCATION_ENV, find_processes_by_env

from . import store
from .orphans import OrphanReaper

logger = logging.getLogger("studio_scheduler_core")


class EndedChildren:
    """The periodic sweep of this machine for processes of ended runs (one per engine)."""

    def __init__(self, *, db_value: str, interval: float, reaper: OrphanReaper) -> None:
        self.db_value = db_value
        """What this database's children get as ``LIONAGI_STUDIO_DB``."""
        self.interval = float(interval)
        self.reaper = reaper
        self._next: float | None = None

    async def tick(self, conn: aiosqlite.Connection, now: float) -> int | None:
        """Sweep when due (at the first tick, then every ``interval``); how many ended
        invocations still had processes (``None``: not due)."""
        if self._next is not None and now < self._next:
            return None
        self._next = now + self.interval
        return await self.sweep(conn)

    async def sweep(self, conn: aiosqlite.Connection) -> int:
        """Terminate the live processes of ended runs' invocations on this machine."""
        found = find_processes_by_env(
            INVOCATION_ENV, None, where={"LIONAGI_STUDIO_DB": self.db_value}
        )
        if not found:
            return 0
        ended = await store.ended_run_invocations(conn, sorted(found))
        pids = [pid for invocation_id in ended for pid in found[invocation_id]]
        if pids:
            logger.warning(
                "terminating %d process(es) of ended run invocation(s) %s on this machine",
                len(pids),
                ", ".join(sorted(ended)),
            )
            self.reaper.terminate(pids)
        return len(ended)
