"""The fires one evaluation pass admits, committed together.

Each admitted fire of a cadence row is staged (prepared, its claim built, its reservation
held) as the pass goes; :meth:`FireBatch.commit` writes all of them in ONE occurrence
transaction, each under its own claim, then starts the committed ones. A fire whose claim
was lost is not started and its reservation is released; the others are unaffected.
"""

from __future__ import annotations

import logging

from .._admission.gates import Reservation
from .._fire.env import FireEnv
from .._fire.pipeline import Staged, StartFire, commit_fires
from ..abc import Occurrence

logger = logging.getLogger("studio_scheduler_core")

MAX_FIRE_BATCH = 64
"""At most this many admitted fires wait for their shared commit (the cap usually binds first)."""

Fired = tuple[Occurrence, float | None, str]
"""A committed fire: its occurrence, the schedule's new ``next_fire_at`` and the run id."""


class FireBatch:
    """Staged fires waiting for their shared commit."""

    def __init__(self, env: FireEnv, start: StartFire) -> None:
        self._env = env
        self._start = start
        self._items: list[tuple[Staged[Reservation], Occurrence, float | None]] = []

    def __len__(self) -> int:
        return len(self._items)

    def add(self, staged: Staged[Reservation], occ: Occurrence, next_at: float | None) -> None:
        """Stage one prepared fire (its reservation is held until the commit)."""
        self._items.append((staged, occ, next_at))

    async def commit(
        self, counts: dict[str, int], backoff: dict[str, float], retry_at: float
    ) -> list[Fired]:
        """Commit the staged fires in one transaction and start them; returns the committed.

        ``counts`` (the pass's outcomes, where each staged fire counted ``fire``) is corrected:
        a lost claim counts ``lost``. If the commit raises, nothing of the batch was written,
        every reservation is released, each schedule backs off until ``retry_at`` and counts
        ``error`` (a storage fault is reported, anything else logged).
        """
        items, self._items = self._items, []
        if not items:
            return []
        try:
            fired = await commit_fires(self._env, [item[0] for item in items], self._start)
        except Exception as exc:
            if self._env.storage.failed(exc) is None:
                logger.exception("committing %d fires failed; retrying after a tick", len(items))
            for _, occ, _ in items:
                backoff[occ.schedule.id] = retry_at
            _recount(counts, "error", len(items))
            return []
        committed: list[Fired] = []
        for (_, occ, next_at), prepared in zip(items, fired, strict=True):
            if prepared is None:
                _recount(counts, "lost", 1)
            else:
                committed.append((occ, next_at, prepared.run_id))
        return committed

    def drop(self) -> None:
        """Give up the staged fires without writing them (the pass was cancelled)."""
        items, self._items = self._items, []
        for staged, _, _ in items:
            staged.prepared.discard()
            if staged.hold is not None:
                staged.hold.release()


def _recount(counts: dict[str, int], outcome: str, n: int) -> None:
    left = counts.get("fire", 0) - n
    if left > 0:
        counts["fire"] = left
    else:
        counts.pop("fire", None)
    counts[outcome] = counts.get(outcome, 0) + n
