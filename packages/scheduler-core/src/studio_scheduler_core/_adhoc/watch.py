"""The lease watch of a running ad-hoc claim: renew the lease, and notice when the row stops
being this worker's (cancelled, or recovered by another) so the run is stopped."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import aiosqlite

from studio_state import Clock

from .._fire.env import FireEnv, Prepared
from . import store
from .lease import holds_lease, renew_lease

logger = logging.getLogger("studio_scheduler_core")


class LeaseWatch:
    """Renews leases on the engine's connection and reads ownership on a reader of its own."""

    def __init__(
        self,
        *,
        db_path: str,
        clock: Clock,
        worker_id: str,
        lease_seconds: float,
        renew_seconds: float,
        watch_seconds: float,
    ) -> None:
        self.db_path = db_path
        self.clock = clock
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.watch_seconds = watch_seconds
        self._reader: aiosqlite.Connection | None = None
        self._reader_lock = asyncio.Lock()

    async def watch(
        self,
        env: FireEnv,
        fire: Prepared,
        attempt: int,
        task: asyncio.Task[Any],
        on_revoked: Callable[[str], bool],
    ) -> None:
        """Renew the lease every ``renew_seconds``; stop the run once the row is not ours.

        ``on_revoked(run_id)`` marks the run revoked and says whether it was not already: a
        run an operator's cancel is stopping already is left to that stop, since a second
        cancellation of the task would cut its child's SIGTERM grace short (SIGKILL at once).
        """
        last_renewal = self.clock()
        while True:
            await asyncio.sleep(self.watch_seconds)
            now = self.clock()
            try:
                if now - last_renewal >= self.renew_seconds:
                    ours = await renew_lease(
                        env.conn,
                        fire.run_id,
                        worker_id=self.worker_id,
                        attempt=attempt,
                        expires_at=now + self.lease_seconds,
                    )
                    last_renewal = now
                else:
                    ours = await holds_lease(
                        await self._ownership_reader(),
                        fire.run_id,
                        worker_id=self.worker_id,
                        attempt=attempt,
                    )
            except Exception:
                logger.exception("lease check of run %s failed", fire.run_id)
                continue
            if not ours:
                logger.info("run %s is no longer this worker's: stopping it", fire.run_id)
                if on_revoked(fire.run_id):
                    task.cancel()
                return

    async def _ownership_reader(self) -> aiosqlite.Connection:
        """A query-only connection of its own for "is this row still ours" reads.

        The engine's connection is shared by every task: a read there sees another task's
        open transaction, e.g. this run's own uncommitted terminal write, and would cancel the
        run mid-commit (the terminal write then rolls back and the run stays ``running``). A
        separate connection sees committed rows only.
        """
        async with self._reader_lock:
            if self._reader is None:
                self._reader = await store.open_reader(self.db_path)
            return self._reader

    async def close(self) -> None:
        """Close the ownership reader."""
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                await reader.close()
