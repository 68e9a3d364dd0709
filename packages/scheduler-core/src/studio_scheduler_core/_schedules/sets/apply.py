"""Applying a plan: every change in one write transaction, or nothing.

A plan with any ERROR writes nothing (:class:`ScheduleSetRefused`). Inside the transaction the
owners' rows are read again; a row the plan saw that changed (its behaviour, owner, digest,
``managed_by`` or enabled flag), went away or appeared since fails the apply with "changed
since plan; re-run" (:class:`ScheduleSetChanged`), also nothing written. On PostgreSQL the
transaction first takes a transaction-scoped advisory lock per owner key (in key order, so two
applies cannot deadlock) and reads the rows ``FOR UPDATE``: two nodes applying the same owner
at once run one after the other, and the second finds the rows changed since its plan.
Every transition row an apply writes names the actor ``set:<owner>``.

A prune with ``force`` cancels the running runs of the schedules it deletes in that same
transaction (:mod:`.cancel`); their processes are stopped after the commit. A delete without
``force`` whose schedule has a run running when the apply writes is "changed since plan".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypedDict

import aiosqlite

from studio_state import (
    Clock,
    Transition,
    new_id,
    record_transitions,
    write_transaction,
)

from ..._exceptions import ScheduleNameTaken, SchedulerError
from ..._records.codec import ColumnValue, encode_schedule
from ..._records.schedule import ManagedBy, Schedule, disabled_by_studio
from ..._triggers.cadence import first_fire_at
from ..._triggers.once import ONCE
from ..store import (
    delete_schedule,
    drop_buffered,
    insert_schedules,
    set_enabled,
    update_schedule,
)
from .cancel import CancelledRun, RunProcess, cancel_running
from .plan import snapshot
from .records import INPUT_FIELDS, ScheduleSetChange, ScheduleSetMember, ScheduleSetPlan
from .store import lock_owners, owner_rows, running_runs

UPDATED = "schedule.updated.operator"
_CADENCE = frozenset(
    {"trigger_type", "cron_expr", "interval_sec", "poll_interval_sec", "timezone", "at"}
)


class ScheduleSetRefused(SchedulerError):
    """The plan holds errors (``.errors``, one line each); nothing was written."""

    def __init__(self, errors: Sequence[ScheduleSetChange]) -> None:
        self.errors = tuple(errors)
        super().__init__("; ".join(str(e) for e in self.errors))


class ScheduleSetChanged(SchedulerError):
    """A row the plan read changed before the apply wrote (``.names``); nothing was written."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        super().__init__(f"changed since plan; re-run ({', '.join(self.names)})")


@dataclass(frozen=True, kw_only=True)
class ScheduleSetApplied:
    """What an apply wrote: how many schedules it created, updated, disabled and deleted."""

    created: int = 0
    updated: int = 0
    disabled: int = 0
    deleted: int = 0
    cancelled: tuple[str, ...] = ()
    """The running runs of deleted schedules the apply cancelled (``--prune --force``)."""

    @property
    def writes(self) -> int:
        """Schedules written in all."""
        return self.created + self.updated + self.disabled + self.deleted


async def _check_unchanged(
    conn: aiosqlite.Connection, plan: ScheduleSetPlan
) -> dict[str, Schedule]:
    """The owners' rows by id, read again (and locked on PostgreSQL); raises
    :class:`ScheduleSetChanged` naming every row that differs from what the plan saw."""
    changed: list[str] = []
    found_rows: dict[str, Schedule] = {}
    for owner in plan.owners:
        rows = await owner_rows(conn, owner, for_update=True)
        found_rows.update((row.id, row) for row in rows)
        now_seen = {row.id: (row, snapshot(row)) for row in rows}
        names = {row.name for row in rows}
        planned: set[str] = set()
        for change in plan.changes:
            if change.owner != owner:
                continue
            if change.schedule_id is None:
                if change.name in names:
                    changed.append(change.name)
                continue
            planned.add(change.schedule_id)
            found = now_seen.get(change.schedule_id)
            if found is None or found[1] != change.seen or found[0].name != change.name:
                changed.append(change.name)
        changed.extend(row.name for row in rows if row.owner_key == owner and row.id not in planned)
    if changed:
        raise ScheduleSetChanged(sorted(set(changed)))
    return found_rows


def _new_occurrence(current: Schedule, new: Schedule) -> bool:
    """Whether the member gives an ``at`` schedule whose occurrence is behind it another
    instant: then it is enabled again, as an enable with a new ``at`` is."""
    return current.disabled_reason == ONCE and new.trigger_type == "at" and new.at != current.at


class _SetColumns(TypedDict):
    managed_by: ManagedBy
    owner_key: str
    set_member: str
    set_digest: str


def _set_columns(member: ScheduleSetMember) -> _SetColumns:
    """The bookkeeping columns an apply writes beside the member's input fields."""
    return {
        "managed_by": "set",
        "owner_key": member.owner,
        "set_member": member.member,
        "set_digest": member.digest,
    }


class _Writer:
    """The writes of one apply, inside its transaction."""

    def __init__(self, conn: aiosqlite.Connection, *, now: float, timezone: str) -> None:
        self.conn = conn
        self.now = now
        self.timezone = timezone
        self.transitions: list[Transition] = []
        self.cancelled: list[CancelledRun] = []
        self.inserts: list[dict[str, ColumnValue]] = []

    def transition(self, schedule_id: str, owner: str, **values: Any) -> None:
        self.transitions.append(
            Transition(
                entity_type="schedule",
                entity_id=schedule_id,
                created_at=self.now,
                actor=f"set:{owner}",
                **values,
            )
        )

    async def create(self, member: ScheduleSetMember) -> None:
        schedule_id = new_id()
        row = {
            **member.fields,
            **_set_columns(member),
            "id": schedule_id,
            "poller_consecutive_401": 0,
            "created_at": self.now,
            "updated_at": self.now,
        }
        row["next_fire_at"] = first_fire_at(row, now=self.now, timezone=self.timezone)
        self.inserts.append(encode_schedule(row))  # written together by flush()
        self.transition(
            schedule_id,
            member.owner,
            status="enabled" if member.schedule.enabled else "disabled",
            reason_code="schedule.created",
            reason_summary=f"schedule {member.name!r} created by set {member.owner!r}",
        )

    async def flush(self) -> None:
        """Insert the created schedules (one statement batch) and record every transition.

        A name taken meanwhile (a create elsewhere raced the apply's checks) fails the apply as
        changed since its plan."""
        try:
            await insert_schedules(self.conn, self.inserts)
        except ScheduleNameTaken:
            raise ScheduleSetChanged(sorted(str(row["name"]) for row in self.inserts)) from None
        await record_transitions(self.conn, self.transitions)

    async def update(self, row: Schedule, member: ScheduleSetMember) -> None:
        inputs = {name: getattr(member.schedule, name) for name in INPUT_FIELDS}
        new = replace(row, **inputs, **_set_columns(member))
        was = row.enabled
        if (
            not was
            and new.enabled
            and disabled_by_studio(row.disabled_reason)
            and not _new_occurrence(row, new)
        ):
            # Studio paused it (max runs, budget …): not re-armed here
            new = replace(new, enabled=False)
        enabling = new.enabled and not was
        if enabling or any(getattr(new, k) != getattr(row, k) for k in _CADENCE):
            new = replace(
                new, next_fire_at=first_fire_at(new.to_row(), now=self.now, timezone=self.timezone)
            )
        if new.enabled != was:
            new = replace(new, disabled_reason=None if new.enabled else "manual")
        old_values, new_values = encode_schedule(row.to_row()), encode_schedule(new.to_row())
        diff = {k: v for k, v in new_values.items() if old_values.get(k) != v}
        if "github_repo" in diff or "github_filter" in diff:
            diff["github_etag"] = None
        if not diff:
            return
        diff["updated_at"] = self.now
        await update_schedule(self.conn, row.id, diff)
        fields = sorted(k for k in diff if k not in ("github_etag", "updated_at"))
        state = "enabled" if was else "disabled"
        if new.enabled == was:
            self.transition(
                row.id,
                member.owner,
                previous_status=state,
                status=state,
                reason_code=UPDATED,
                reason_summary=f"changed by set {member.owner!r}: {', '.join(fields)}",
                metadata={"fields": fields},
            )
            return
        if not new.enabled:
            await drop_buffered(self.conn, row.id, now=self.now)
        self.transition(
            row.id,
            member.owner,
            previous_status=state,
            status="enabled" if new.enabled else "disabled",
            reason_code="schedule.enabled.manual" if new.enabled else "schedule.disabled.manual",
            reason_summary=f"by set {member.owner!r}",
            metadata={"fields": fields},
        )

    async def disable(self, change: ScheduleSetChange) -> None:
        assert change.schedule_id is not None
        text = f"set {change.owner!r}: absent from its documents"
        await set_enabled(
            self.conn,
            change.schedule_id,
            enabled=False,
            reason_code="schedule.disabled.manual",
            reason_summary=text,
            disabled_reason=text,
            actor=f"set:{change.owner}",
            now=self.now,
        )

    async def delete(self, row: Schedule, change: ScheduleSetChange) -> None:
        owner = change.owner
        if change.force:
            self.cancelled.extend(
                await cancel_running(self.conn, row.id, owner=owner, now=self.now)
            )
        elif await running_runs(self.conn, row.id):
            raise ScheduleSetChanged([row.name])  # a run started since the plan
        await delete_schedule(self.conn, row.id)
        self.transition(
            row.id,
            owner,
            previous_status="enabled" if row.enabled else "disabled",
            status="deleted",
            reason_code="schedule.deleted.manual",
            reason_summary=f"schedule {row.name!r} deleted by set {owner!r} (--prune)",
        )


async def apply_schedule_plan(
    conn: aiosqlite.Connection,
    plan: ScheduleSetPlan,
    *,
    timezone: str,
    clock: Clock,
    on_change: Callable[[], None] | None = None,
    stop_process: Callable[[RunProcess], Awaitable[None]] | None = None,
) -> ScheduleSetApplied:
    """Write ``plan`` in one transaction on ``conn`` (``timezone``: the settings' default zone,
    for the first fire times); ``on_change`` (the engine's wake) is called after a commit
    that wrote anything, and ``stop_process`` with each run the apply cancelled (its id,
    ``child_pid``, ``child_started_at``) to stop what it runs.

    Raises :class:`ScheduleSetRefused` when the plan holds errors and
    :class:`ScheduleSetChanged` when a row changed since the plan read it; nothing is written
    then. A plan with nothing to change opens no write transaction at all.
    """
    if plan.errors:
        raise ScheduleSetRefused(plan.errors)
    work = [c for c in plan.changes if c.action != "unchanged"]
    if not work:
        return ScheduleSetApplied()
    counts = {"create": 0, "update": 0, "disable": 0, "delete": 0}
    async with write_transaction(conn):
        await lock_owners(conn, list(plan.owners))
        rows = await _check_unchanged(conn, plan)
        writer = _Writer(conn, now=clock(), timezone=timezone)
        for change in work:
            if change.action == "create" and change.target is not None:
                await writer.create(change.target)
            elif change.action == "update" and change.target is not None:
                await writer.update(rows[str(change.schedule_id)], change.target)
            elif change.action == "disable":
                await writer.disable(change)
            elif change.action == "delete":
                await writer.delete(rows[str(change.schedule_id)], change)
            counts[change.action] += 1
        await writer.flush()
    if stop_process is not None:
        for run in writer.cancelled:
            await stop_process(run.to_row())
    if on_change is not None:
        on_change()
    return ScheduleSetApplied(
        created=counts["create"],
        updated=counts["update"],
        disabled=counts["disable"],
        deleted=counts["delete"],
        cancelled=tuple(run.id for run in writer.cancelled),
    )
