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
from typing import Any

import aiosqlite

from studio_state import lock_row

from ..._notify.service import notify_run
from ..._records.terminal import StatusChange, apply
from .store import running_runs

OPERATOR_CANCELLED = "run.cancelled.operator"
"""The reason code of a run an operator cancelled (the fire path reports it by this code)."""


@dataclass(frozen=True, kw_only=True)
class CancelledRun:
    """A running run an apply cancelled: what stopping its process needs."""

    id: str
    schedule_id: str
    leased_by: str | None = None
    child_pid: int | None = None
    child_started_at: float | None = None

    def to_row(self) -> dict[str, Any]:
        """The run's columns as a stop of its process reads them."""
        return {
            "id": self.id,
            "schedule_id": self.schedule_id,
            "leased_by": self.leased_by,
            "child_pid": self.child_pid,
            "child_started_at": self.child_started_at,
        }


def _changes(row: dict[str, Any], *, actor: str, owner: str, now: float) -> list[StatusChange]:
    summary = f"cancelled while running: its schedule is deleted by set {owner!r} (--prune --force)"
    guards: dict[str, Any] = {}
    if row["leased_by"] is not None:
        guards = {"leased_by": row["leased_by"], "lease_attempts": row["lease_attempts"]}
    out = [
        StatusChange(
            "schedule_runs", str(row["id"]), "cancelled", OPERATOR_CANCELLED, summary, actor,
            now, previous="running", sets={"ended_at": now}, guards=guards,
            metadata={"leased_by": row["leased_by"], "child_pid": row["child_pid"]},
        )
    ]  # fmt: skip
    if row["invocation_id"]:
        out.append(
            StatusChange(
                "invocations", str(row["invocation_id"]), "cancelled", OPERATOR_CANCELLED,
                summary, actor, now, sets={"ended_at": now},
                evidence_refs=[{"kind": "schedule_run", "id": row["id"]}],
            )
        )  # fmt: skip
    return out


async def cancel_running(
    conn: aiosqlite.Connection, schedule_id: str, *, owner: str, now: float
) -> Sequence[CancelledRun]:
    """Cancel the running runs of ``schedule_id`` inside the caller's write transaction; the
    runs cancelled."""
    cancelled: list[CancelledRun] = []
    for row in await running_runs(conn, schedule_id):
        if row["invocation_id"]:
            await lock_row(conn, "invocations", str(row["invocation_id"]))
        applied = await apply(conn, _changes(row, actor=f"set:{owner}", owner=owner, now=now))
        if not applied[0]:
            continue
        await notify_run(conn, str(row["id"]), now=now)
        cancelled.append(
            CancelledRun(
                id=str(row["id"]),
                schedule_id=str(row["schedule_id"]),
                leased_by=row["leased_by"],
                child_pid=None if row["child_pid"] is None else int(row["child_pid"]),
                child_started_at=None
                if row["child_started_at"] is None
                else float(row["child_started_at"]),
            )
        )
    return cancelled
