"""One claim pass of the worker: every free slot filled in one transaction.

The pass reads the claimable rows, prepares each under a slot of its own and commits every
claim (:func:`~.claim.commit_claim`, each still guarded on its own) in ONE transaction. On
PostgreSQL the candidate read locks the rows it returns (``FOR UPDATE … SKIP LOCKED``) until
that transaction ends: several nodes woken by the same ``NOTIFY`` read disjoint rows instead
of all reading the oldest few and all but one losing every guard (and then idling until their
next tick). The ``concurrency_key`` advisory locks of the batch are taken once, in key order,
before any claim, so two passes never wait on each other's keys in opposite orders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from studio_state import write_transaction

from .._fire.env import FireEnv, Prepared
from .._fire.pipeline import Staged, commit_steps, stage
from .._fire.prepare import prepare
from .._records.run import Run
from . import store
from .claim import Slot, action_of, commit_claim
from .scheduled import prepare_scheduled


@dataclass(frozen=True, slots=True)
class Claimed:
    """A committed claim: the fire (``setup_error`` set when it was claimed straight to
    ``failed``), its row as read, and the lease attempt it holds."""

    fire: Prepared
    run: Run
    attempt: int

    @property
    def scheduled(self) -> bool:
        """Whether the row is a scheduled fire the leader queued (not an ad-hoc run)."""
        return self.run.schedule_id is not None


@dataclass(frozen=True, slots=True)
class Batch:
    """What one pass did: the committed claims, and how many rows' guards were lost (another
    node, or an operator's cancel, moved them first)."""

    claimed: list[Claimed]
    lost: int


def _prepare_adhoc(env: FireEnv, run: Run) -> Prepared:
    queued = action_of(run)
    return prepare(
        env,
        queued.action,
        queued.context,
        kind="adhoc",
        run_id=run.id,
        timeout_sec=queued.timeout_sec,
    )


async def _stage(env: FireEnv, run: Run) -> Staged[Slot] | None:
    """One row prepared under a slot; ``None`` when its schedule is gone (its runs go too)."""
    if run.schedule_id is None:
        return stage(partial(_prepare_adhoc, env, run), Slot())
    scheduled = await prepare_scheduled(env, run)
    if scheduled is None:
        return None
    return stage(lambda: scheduled, Slot())


async def claim_batch(
    env: FireEnv,
    *,
    adhoc_free: int,
    scheduled_free: int,
    worker_id: str,
    lease_seconds: float,
    now: float,
) -> Batch:
    """Claim up to ``adhoc_free`` ad-hoc rows and ``scheduled_free`` queued scheduled fires
    in one transaction (see the module's docstring); a failure rolls every claim of the pass
    back and discards what was prepared. The claims are stamped with ``now`` or, if later,
    the clock's time once the rows are read."""
    conn = env.conn
    runs: list[Run] = []
    staged: list[Staged[Slot]] = []

    async def commit_step(items: Sequence[Staged[Slot]]) -> list[bool]:
        won = []
        for run, item in zip(runs, items, strict=True):
            won.append(
                await commit_claim(
                    conn,
                    item.prepared,
                    run,
                    worker_id=worker_id,
                    lease_seconds=lease_seconds,
                    now=now,
                )
            )
        return won

    try:
        async with write_transaction(conn):
            rows: list[Run] = []
            if adhoc_free > 0:
                rows += await store.candidates(conn, adhoc_free)
            if scheduled_free > 0:
                rows += await store.scheduled_candidates(conn, scheduled_free)
            if not rows:
                return Batch([], 0)
            # Stamped when the rows are ours, not when the tick began: a row queued (and
            # stamped) meanwhile is never claimed "before" it was queued.
            now = max(now, env.clock())
            await store.lock_concurrency_keys(conn, [run.concurrency_key for run in rows])
            for run in rows:
                item = await _stage(env, run)
                if item is not None:
                    runs.append(run)
                    staged.append(item)
            fired = await commit_steps(staged, commit_step)
    except BaseException:
        for item in staged:
            item.prepared.discard()
        raise
    claimed = [
        Claimed(fire, run, run.lease_attempts + 1)
        for run, fire in zip(runs, fired, strict=True)
        if fire is not None
    ]
    return Batch(claimed, len(runs) - len(claimed))
