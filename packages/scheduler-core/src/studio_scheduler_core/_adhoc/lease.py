"""Leases of ad-hoc runs: worker ids, renewal, and recovery of abandoned rows.

A claimed row carries ``leased_by`` (``host:pid:random``), ``lease_expires_at`` and
``lease_attempts``. A row is abandoned when its lease expired, or at once when its owner is a
process on this host that no longer runs (a restarted engine then need not wait out the lease
of the one that was killed). Recovery of an abandoned row:

- the child was launched (``child_pid`` recorded): as at start-up recovery, a live orphan
  group is terminated and the run and invocation become ``failed``
  (``run.failed.daemon_restart``, or ``run.failed.node_lost`` when the owner was a worker of
  another machine, a node on a shared database); it is never re-run (a second execution must
  not happen);
- no child was launched: back to ``queued`` (``run.queued.lease_expired``, the attempt's
  invocation ``aborted``) until ``max_attempts`` claims, then ``failed``
  (``run.failed.lease_exhausted``).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Mapping
from typing import Any

import aiosqlite

from studio_launcher import is_same_process, process_start_time
from studio_state import Transition, lock_row, write_transaction

from .._notify.service import notify_run
from .._records.terminal import StatusChange, apply, clip
from .._records.vocab import ENGINE_ACTOR
from .._recovery.orphans import OrphanReaper
from .._recovery.reconcile import DAEMON_RESTART, NODE_LOST, find_orphans, terminate_orphans
from . import store

logger = logging.getLogger("studio_scheduler_core")

LEASE_SECONDS = 60.0
"""How long a claim is valid without renewal."""
RENEW_SECONDS = 20.0
"""How often a running claim's lease is renewed."""
WATCH_SECONDS = 1.0
"""How often a running claim checks that its row is still its own."""
MAX_LEASE_ATTEMPTS = 3
"""Claims of a row whose child never started before it fails (lease exhausted)."""

CLAIMED = "run.running.claimed"
LEASE_EXPIRED = "run.queued.lease_expired"
LEASE_EXHAUSTED = "run.failed.lease_exhausted"
REQUEUED_SHUTDOWN = "run.queued.shutdown"


def new_worker_id() -> str:
    """``host:pid:random`` — unique per worker object, and tells a same-host peer our pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def owner_is_dead(worker_id: str | None) -> bool:
    """Whether ``worker_id`` names a process on this host that no longer runs.

    Only a provably dead owner counts (another host, this process, or an unparsable id: not
    dead; its lease must expire instead). A reused pid reads as alive, the safe direction.
    """
    parts = (worker_id or "").rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid() or pid <= 1:
        return False
    started = process_start_time(pid)
    return started is None or not is_same_process(pid, started)


def on_this_host(worker_id: str | None) -> bool:
    """Whether ``worker_id`` (``host:pid:random``) names a worker of this machine."""
    return (worker_id or "").rsplit(":", 2)[0] == socket.gethostname()


def child_alive(run: store.LeasedRun) -> bool:
    """Whether the run's recorded child (pid + start time) is still running."""
    pid, started = run.child_pid, run.child_started_at
    if not pid or started is None:
        return False
    return is_same_process(int(pid), float(started))


def lease_transition(
    entity_type: str,
    entity_id: str,
    previous: str | None,
    status: str,
    reason: str,
    summary: str,
    now: float,
    *,
    actor: str,
    metadata: Mapping[str, Any] | None = None,
    refs: list[dict[str, str]] | None = None,
) -> Transition:
    """A ``status_transitions`` row of the lease machinery (summary bounded)."""
    return Transition(
        entity_type=entity_type,
        entity_id=entity_id,
        previous_status=previous,
        status=status,
        reason_code=reason,
        reason_summary=clip(summary),
        evidence_refs=refs,
        actor=actor,
        metadata=metadata,
        created_at=now,
    )


async def recover_abandoned(
    conn: aiosqlite.Connection,
    *,
    worker_id: str,
    now: float,
    max_attempts: int,
    reaper: OrphanReaper | None = None,
    db_path: str | None = None,
) -> dict[str, int]:
    """Requeue or fail the running rows of other workers that are gone; counts per outcome.
    ``db_path``: what the children got as ``LIONAGI_STUDIO_DB`` (default: the connection's
    file; a PostgreSQL database has none, so its URL is passed).

    Every live process of an abandoned row is terminated: its recorded group, and every
    process carrying its invocation id in the environment (a child whose pid was never
    recorded, a descendant that escaped with ``setsid``), all at once with one shared grace
    (in the background through ``reaper``, so the tick does not wait on it).
    """
    rows = await store.leased_running(conn)
    counts = {"requeued": 0, "exhausted": 0, "orphaned": 0}
    abandoned = []
    for row in rows:
        owner = row.leased_by
        if owner == worker_id:
            continue
        expires = row.lease_expires_at
        if (expires is not None and float(expires) > now) and not owner_is_dead(owner):
            continue
        abandoned.append(row)
    if not abandoned:
        return counts
    found = await find_orphans(
        conn, [r.invocation_id for r in abandoned if r.invocation_id], db_path=db_path
    )
    pids: set[int] = set()
    launched: dict[str, bool] = {}
    for row in abandoned:
        escaped = found.get(row.invocation_id, []) if row.invocation_id else []
        # A live process with this invocation's id means the child did start, even when the
        # owner died between exec and recording the pid: never re-run.
        launched[row.id] = row.child_pid is not None or bool(escaped)
        if child_alive(row) and row.child_pid:
            logger.warning(
                "terminating orphaned process group %s of leased run %s", row.child_pid, row.id
            )
            pids.add(row.child_pid)
        pids.update(escaped)
    await terminate_orphans(pids, reaper)
    for row in abandoned:
        outcome = await _recover_row(
            conn, row, now=now, max_attempts=max_attempts, launched=launched[row.id]
        )
        if outcome is not None:
            counts[outcome] += 1
    return counts


async def _recover_row(
    conn: aiosqlite.Connection,
    row: store.LeasedRun,
    *,
    now: float,
    max_attempts: int,
    launched: bool,
) -> str | None:
    run_id, attempts = row.id, row.lease_attempts
    if launched and not on_this_host(row.leased_by):
        # A worker of another machine (another node on a shared database) stopped renewing.
        outcome, status, reason, inv_status = "orphaned", "failed", NODE_LOST, "failed"
        summary = (
            f"the node of worker {row.leased_by} stopped renewing its lease while this "
            "run's child was running; it is not re-run"
        )
    elif launched:
        outcome, status, reason, inv_status = "orphaned", "failed", DAEMON_RESTART, "failed"
        summary = (
            f"worker {row.leased_by} is gone while this run's child was running; it is not re-run"
        )
    elif attempts >= max_attempts:
        outcome, status, reason, inv_status = "exhausted", "failed", LEASE_EXHAUSTED, "failed"
        summary = f"{attempts} lease attempts ended without the child starting"
    else:
        outcome, status, reason, inv_status = "requeued", "queued", LEASE_EXPIRED, "aborted"
        summary = f"the lease of worker {row.leased_by} expired before the child started"
    if status == "queued":
        sets: dict[str, float | str | None] = {
            "leased_by": None,
            "lease_expires_at": None,
            "invocation_id": None,
            "child_pid": None,
            "child_started_at": None,
        }
    else:
        sets = {"ended_at": now, "error_detail": summary}
    expires = row.lease_expires_at
    guards: dict[str, float | str | None] = {"leased_by": row.leased_by, "lease_attempts": attempts}
    guards["lease_expires_at"] = expires
    meta = {"leased_by": row.leased_by, "lease_attempts": attempts}
    invocation_id = row.invocation_id
    run_change = StatusChange(
        "schedule_runs", run_id, status, reason, summary, ENGINE_ACTOR, now,
        sets=sets, guards=guards, metadata=meta,
    )  # fmt: skip
    async with write_transaction(conn):
        if invocation_id:
            # PostgreSQL: the invocation's row first, in the order the run's terminal write
            # takes them (invocation, then run), so the two never deadlock.
            await lock_row(conn, "invocations", invocation_id)
        if not (await apply(conn, [run_change]))[0]:
            return None
        if invocation_id:
            invocation_change = StatusChange(
                "invocations", invocation_id, inv_status, reason, summary, ENGINE_ACTOR, now,
                sets={"ended_at": now}, evidence_refs=[{"kind": "schedule_run", "id": run_id}],
            )  # fmt: skip
            await apply(conn, [invocation_change])
        if status != "queued":
            await notify_run(conn, run_id, now=now)
    logger.warning("leased run %s: %s (%s)", run_id, reason, summary)
    return outcome


async def renew_lease(
    conn: aiosqlite.Connection, run_id: str, *, worker_id: str, attempt: int, expires_at: float
) -> bool:
    """Extend the lease of a running row this worker holds; ``False``: it is not ours any more."""
    async with write_transaction(conn):
        return await store.extend_lease(
            conn, run_id, worker_id=worker_id, attempt=attempt, expires_at=expires_at
        )


async def holds_lease(
    conn: aiosqlite.Connection, run_id: str, *, worker_id: str, attempt: int
) -> bool:
    """Whether the row is still ``running`` under this worker's claim (a read, no write)."""
    return await store.lease_held(conn, run_id, worker_id=worker_id, attempt=attempt)


async def requeue_unstarted(
    conn: aiosqlite.Connection,
    run_id: str,
    invocation_id: str,
    *,
    worker_id: str,
    attempt: int,
    now: float,
) -> bool:
    """Give back a claim whose child was never started (the worker is stopping).

    The row returns to ``queued`` (``run.queued.shutdown``) with the claim's attempt given
    back, and the attempt's invocation becomes ``aborted``: a shutdown only cancels runs that
    are really running. Guarded on this worker's claim; ``False`` when the row moved on.
    """
    summary = f"worker {worker_id} stopped before this run's child started; queued again"
    run_change = StatusChange(
        "schedule_runs", run_id, "queued", REQUEUED_SHUTDOWN, summary, ENGINE_ACTOR, now,
        sets={
            "leased_by": None,
            "lease_expires_at": None,
            "invocation_id": None,
            "child_pid": None,
            "child_started_at": None,
            "lease_attempts": attempt - 1,
        },
        guards={"leased_by": worker_id, "lease_attempts": attempt, "child_pid": None},
        metadata={"worker_id": worker_id, "lease_attempt": attempt},
    )  # fmt: skip
    invocation_change = StatusChange(
        "invocations", invocation_id, "aborted", REQUEUED_SHUTDOWN, summary, ENGINE_ACTOR, now,
        sets={"ended_at": now}, evidence_refs=[{"kind": "schedule_run", "id": run_id}],
    )  # fmt: skip
    async with write_transaction(conn):
        await lock_row(conn, "invocations", invocation_id)  # in the terminal write's order
        if not (await apply(conn, [run_change]))[0]:
            return False
        await apply(conn, [invocation_change])
    return True
