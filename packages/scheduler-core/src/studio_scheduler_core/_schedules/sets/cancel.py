"""Cancelling, inside an apply's transaction, the running runs of a schedule a forced prune
deletes.

Each run is a guarded ``running`` → ``cancelled`` change (on its lease, when a worker holds
it) with its ``status_transitions`` row naming the actor ``set:<owner>``, and its invocation
is cancelled with it: written in the apply's one transaction, so an apply that fails cancels
nothing. The processes are stopped after the commit, by the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

import aiosqlite

from studio_state import lock_row

from ..._notify.service import notify_run
from ..._records.codec import ColumnValue
from ..._records.terminal import StatusChange, apply
from .store import RunToCancel, running_runs

OPERATOR_CANCELLED = "run.cancelled.operator"
"""The reason code of a run an operator cancelled (the fire path reports it by this code)."""


class RunProcess(TypedDict):
    """A cancelled run as a stop of its process reads it (``AdhocRunService.stop_process``)."""

    id: str
    schedule_id: str
    leased_by: str | None
    child_pid: int | None
    child_started_at: float | None


@dataclass(frozen=True, kw_only=True)
class CancelledRun:
    """A running run an apply cancelled: what stopping its process needs."""

    id: str
    schedule_id: str
    leased_by: str | None = None
    child_pid: int | None = None
    child_started_at: float | None = None

    def to_row(self) -> RunProcess:
        """The run's columns as a stop of its process reads them."""
        return {
            "id": self.id,
            "schedule_id": self.schedule_id,
            "leased_by": self.leased_by,
            "child_pid": self.child_pid,
            "child_started_at": self.child_started_at,
        }


def _changes(run: RunToCancel, *, actor: str, owner: str, now: float) -> list[StatusChange]:
    summary = f"cancelled while running: its schedule is deleted by set {owner!r} (--prune --force)"
    guards: dict[str, ColumnValue] = {}
    if run.leased_by is not None:
        guards = {"leased_by": run.leased_by, "lease_attempts": run.lease_attempts}
    out = [
        StatusChange(
            "schedule_runs", run.id, "cancelled", OPERATOR_CANCELLED, summary, actor,
            now, previous="running", sets={"ended_at": now}, guards=guards,
            metadata={"leased_by": run.leased_by, "child_pid": run.child_pid},
        )
    ]  # fmt: skip
    if run.invocation_id:
        out.append(
            StatusChange(
                "invocations", run.invocation_id, "cancelled", OPERATOR_CANCELLED,
                summary, actor, now, sets={"ended_at": now},
                evidence_refs=[{"kind": "schedule_run", "id": run.id}],
            )
        )  # fmt: skip
    return out


async def cancel_running(
    conn: aiosqlite.Connection, schedule_id: str, *, owner: str, now: float
) -> Sequence[CancelledRun]:
    """Cancel the running runs of ``schedule_id`` inside the caller's write transaction; the
    runs cancelled."""
    cancelled: list[CancelledRun] = []
    for run in await running_runs(conn, schedule_id):
        if run.invocation_id:
            await lock_row(conn, "invocations", run.invocation_id)
        applied = await apply(conn, _changes(run, actor=f"set:{owner}", owner=owner, now=now))
        if not applied[0]:
            continue
        await notify_run(conn, run.id, now=now)
        cancelled.append(
            CancelledRun(
                id=run.id,
                schedule_id=run.schedule_id,
                leased_by=run.leased_by,
                child_pid=None if run.child_pid is None else int(run.child_pid),
                child_started_at=None
                if run.child_started_at is None
                else float(run.child_started_at),
            )
        )
    return cancelled
