"""Orphan process groups found at recovery, terminated in the background, all at once.

Recovery (engine start-up, and the worker's pass over abandoned ad-hoc rows) must neither wait
out one grace period per orphan nor hold up start-up or the tick while an orphan ignores
SIGTERM. :class:`OrphanReaper` hands every group found in one pass to one background
:func:`~studio_launcher.terminate_processes` call: each group gets SIGTERM at once, they share
one grace period, and whatever is left then gets SIGKILL. Closing the reaper (engine stop)
kills what is still pending at once, so no orphan outlives the process that found it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Collection

from studio_launcher import (
    TERMINATE_GRACE_SECONDS,
    LaunchError,
    process_group_of,
    terminate_processes,
)

logger = logging.getLogger("studio_scheduler_core")


class OrphanReaper:
    """Terminates orphan process groups in background tasks (SIGTERM, shared grace, SIGKILL)."""

    def __init__(self, *, grace: float = TERMINATE_GRACE_SECONDS) -> None:
        self.grace = float(grace)
        self._tasks: dict[asyncio.Task[None], list[int]] = {}
        self.signalled = 0
        """Process groups this reaper has been asked to terminate (for the start-up summary)."""

    def terminate(self, pids: Collection[int]) -> None:
        """SIGTERM the process groups of ``pids`` now; SIGKILL what is left after the grace
        in the background (needs a running loop). Returns at once."""
        wanted = sorted({int(pid) for pid in pids if int(pid) > 1})
        if not wanted:
            return
        self.signalled += len(wanted)
        _signal_groups(wanted, signal.SIGTERM)
        task = asyncio.create_task(self._terminate(wanted), name="studio-orphan-reaper")
        self._tasks[task] = wanted
        task.add_done_callback(lambda done: self._tasks.pop(done, None))

    async def _terminate(self, pids: list[int]) -> None:
        try:
            if not await terminate_processes(pids, grace=self.grace):
                logger.warning("orphaned process group(s) of %s survived SIGKILL", pids)
        except (LaunchError, OSError) as exc:
            logger.warning("could not terminate orphans %s: %s", pids, exc)

    def pending(self) -> int:
        """How many termination passes are still running."""
        return sum(1 for task in self._tasks if not task.done())

    async def wait(self) -> None:
        """Wait until every termination pass has finished (tests, orderly shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """SIGKILL whatever is still pending at once and wait for the passes to end."""
        for task, pids in list(self._tasks.items()):
            _signal_groups(pids, signal.SIGKILL)
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.wait()


def _signal_groups(pids: Collection[int], sig: signal.Signals) -> None:
    """Signal the live groups of ``pids`` (never pid 1's, nor this process's own group)."""
    own = os.getpgrp()
    for pid in pids:
        group = process_group_of(pid)
        if group is None or group <= 1 or group == own:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)
