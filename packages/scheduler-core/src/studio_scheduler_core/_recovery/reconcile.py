"""Crash reconciliation at startup and the periodic reapers.

Startup runs while this engine holds the database's lock, so every scheduled run still
``running`` belongs to a previous process: its child group (if alive with the recorded start
time) is terminated, and the run and its invocation become ``failed`` with
``run.failed.daemon_restart``. Such runs are never re-fired. The reapers time out runs and
invocations still ``running`` past their deadline with no live process: the invocation
deadline, or a schedule's own longer ``timeout_sec`` plus :data:`STALE_GRACE_SECONDS`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

import aiosqlite

from studio_launcher import (
    INVOCATION_ENV,
    LaunchError,
    find_processes_by_env,
    is_same_process,
    terminate_processes,
)
from studio_state import write_transaction

from .._notify.service import notify_run
from .._records.terminal import StatusChange, apply
from .._records.vocab import ENGINE_ACTOR
from . import store
from .orphans import OrphanReaper

logger = logging.getLogger("studio_scheduler_core")

DAEMON_RESTART = "run.failed.daemon_restart"
NODE_LOST = "run.failed.node_lost"
"""On PostgreSQL: a run fired by a node that stopped leading (its session, and with it the
leader lock, is gone) is failed by the node that takes over; never re-fired."""
DEADLINE = "run.timed_out.deadline"
STALE_GRACE_SECONDS = 60.0
"""Past a run's own ``timeout_sec``, how long the reaper still leaves it to the launcher's
deadline (SIGTERM, grace, SIGKILL) and its terminal write."""


def _alive(run: store.RunningRun) -> bool:
    pid, started = run.child_pid, run.child_started_at
    if not pid or started is None:
        return False
    return is_same_process(int(pid), float(started))


async def _terminalize(
    conn: aiosqlite.Connection,
    runs: list[store.RunningRun],
    invocation_ids: Collection[str],
    *,
    status: str,
    reason_code: str,
    summary: str,
    by: str,
    now: float,
) -> int:
    """Guarded ``running`` → status for runs and invocations, with transitions, one txn.

    The rows name the engine as their actor; ``by`` (the recovery pass that acted) goes in
    their metadata."""
    changes = [
        StatusChange(
            "schedule_runs",
            run.id,
            status,
            reason_code,
            summary,
            ENGINE_ACTOR,
            now,
            sets={"ended_at": now, "error_detail": summary},
            keep=("error_detail",),
            evidence_refs=[{"kind": "schedule_run", "id": run.id}],
            metadata={"child_pid": run.child_pid, "by": by},
        )
        for run in runs
    ]
    changes += [
        StatusChange(
            "invocations",
            invocation_id,
            status,
            reason_code,
            summary,
            ENGINE_ACTOR,
            now,
            sets={"ended_at": now},
            evidence_refs=[{"kind": "invocation", "id": invocation_id}],
            metadata={"by": by},
        )
        for invocation_id in invocation_ids
    ]
    async with write_transaction(conn):
        applied = await apply(conn, changes)
        for run, won in zip(runs, applied[: len(runs)], strict=True):
            if won:
                await notify_run(conn, run.id, now=now)
    return sum(applied[: len(runs)])


async def find_orphans(
    conn: aiosqlite.Connection, invocation_ids: Collection[str], *, db_path: str | None = None
) -> dict[str, list[int]]:
    """Live processes started for these invocations, found by their environment: id -> pids.

    A child whose pid was never recorded (the daemon died between exec and writing it down)
    and a descendant that left its group (``setsid``) still carry ``LIONAGI_INVOCATION_ID``
    and ``LIONAGI_STUDIO_DB``; only processes of this database are matched. One ``/proc``
    scan for all the ids.
    """
    if not invocation_ids:
        return {}
    path = db_path if db_path is not None else await store.database_path(conn)
    if not path:
        return {}
    found = find_processes_by_env(INVOCATION_ENV, invocation_ids, where={"LIONAGI_STUDIO_DB": path})
    if found:
        logger.warning(
            "found %d orphaned process(es) of invocation(s) %s by environment",
            sum(len(pids) for pids in found.values()),
            ", ".join(sorted(found)),
        )
    return found


async def terminate_orphans(pids: Collection[int], reaper: OrphanReaper | None) -> None:
    """Terminate the groups of ``pids`` at once: through ``reaper`` in the background, else
    awaited here (one shared grace either way)."""
    if not pids:
        return
    if reaper is not None:
        reaper.terminate(pids)  # in the background: start-up and the tick never wait on it
        return
    try:
        await terminate_processes(list(pids))
    except (LaunchError, OSError) as exc:
        logger.warning("could not terminate orphans %s: %s", sorted(pids), exc)


async def reconcile_startup(
    conn: aiosqlite.Connection,
    *,
    now: float,
    db_path: str | None = None,
    reaper: OrphanReaper | None = None,
    node_lost: bool = False,
    owned_runs: Collection[str] = (),
    owned_invocations: Collection[str] = (),
) -> int:
    """Fail every scheduled run left ``running`` by a previous process; return how many.

    ``node_lost`` (a running engine taking leadership over from another node): the runs were
    fired by a leader whose session ended; they become ``failed`` with
    ``run.failed.node_lost`` instead of ``run.failed.daemon_restart``. ``owned_runs`` and
    ``owned_invocations`` (this engine's own, in flight) are left alone.

    Every live orphan is terminated: the recorded ``(child_pid, child_started_at)`` groups and
    every process still carrying one of those invocations' ids in its environment (a child
    whose pid was never written down, or a descendant that escaped its group with
    ``setsid``). All of them are signalled at once and share one grace period; with a
    ``reaper`` that happens in the background and this returns without waiting.
    Must only run while this engine holds the lock (no other engine can own those runs).
    """
    owned = set(owned_runs)
    runs = [r for r in await store.unleased_running_runs(conn) if r.id not in owned]
    pids: set[int] = set()
    for run in runs:
        if _alive(run) and run.child_pid:
            logger.warning("terminating orphaned process group %s of run %s", run.child_pid, run.id)
            pids.add(int(run.child_pid))
    orphans = await store.unleased_running_invocations(conn)
    invocation_ids = {r.invocation_id for r in runs if r.invocation_id}
    invocation_ids.update(orphans)
    invocation_ids -= set(owned_invocations)
    if not runs and not invocation_ids:
        return 0
    found = await find_orphans(conn, invocation_ids, db_path=db_path)
    pids.update(pid for group in found.values() for pid in group)
    summary = (
        "the node running this run stopped leading (its database session ended); it is not re-fired"
        if node_lost
        else "the scheduler restarted while this run was in flight; it is not re-fired"
    )
    # The outcome is written before any orphan is signalled: a runner still watching one of
    # them (the old leader, alive) would otherwise record the kill as its own exit first.
    ended = await _terminalize(
        conn,
        runs,
        sorted(invocation_ids),
        status="failed",
        reason_code=NODE_LOST if node_lost else DAEMON_RESTART,
        summary=summary,
        by="leader_takeover" if node_lost else "startup_reconciliation",
        now=now,
    )
    await terminate_orphans(pids, reaper)
    return ended


def stale_after(timeout_sec: Any, deadline_seconds: float) -> float:
    """Seconds after its fire a run without a live process counts as stale: the invocation
    deadline, or the run's own longer ``timeout_sec`` plus :data:`STALE_GRACE_SECONDS`."""
    if isinstance(timeout_sec, int | float) and not isinstance(timeout_sec, bool):
        return max(deadline_seconds, float(timeout_sec) + STALE_GRACE_SECONDS)
    return deadline_seconds


async def reap_stale(
    conn: aiosqlite.Connection,
    *,
    now: float,
    deadline_seconds: float,
    owned_runs: Collection[str],
) -> int:
    """Time out runs/invocations ``running`` past their deadline with no live process.

    A run whose schedule has its own ``timeout_sec`` longer than the invocation deadline is
    stale only after that timeout plus :data:`STALE_GRACE_SECONDS` (its child may still be
    within its time; the launcher's own deadline ends it first).
    """
    cutoff = now - deadline_seconds
    runs = await store.runs_fired_before(conn, cutoff)
    stale = [
        r
        for r in runs
        if r.id not in owned_runs
        and now - float(r.fired_at) > stale_after(r.timeout_sec, deadline_seconds)
        and not _alive(r)
    ]
    invocations = await store.invocations_started_before(conn, cutoff)
    stale_ids = {r.id for r in stale}
    live_ids = {r.id for r in runs} - stale_ids
    invocation_ids = {
        i.id
        for i in invocations
        if i.schedule_run_id not in live_ids and i.schedule_run_id not in owned_runs
    }
    invocation_ids.update(r.invocation_id for r in stale if r.invocation_id)
    if not stale and not invocation_ids:
        return 0
    return await _terminalize(
        conn,
        stale,
        sorted(invocation_ids),
        status="timed_out",
        reason_code=DEADLINE,
        summary=f"still running after the {deadline_seconds:g}s invocation deadline "
        "with no live process",
        by="reaper",
        now=now,
    )
