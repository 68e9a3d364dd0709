"""Planning an apply: the resolved members of checked documents against the stored rows.

Per owner key, each member is a CREATE (no row has its name), an UPDATE (the owner's row, same
id and history; the changed fields old → new), UNCHANGED (the row has the member's digest and
was written by the last apply) or an ERROR (the name is held by another owner, or by an
unowned row: ``adopt`` takes an unowned row whose behaviour already matches). A row the owner
holds that no document names any more is a DISABLE, or with ``prune`` a DELETE (an ERROR while
one of its runs runs, unless ``force``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import aiosqlite

from ..._records.schedule import Schedule, set_fields
from ..store import running_run_ids
from .records import (
    FieldChange,
    ScheduleSetChange,
    ScheduleSetMember,
    ScheduleSetPlan,
    Snapshot,
)
from .store import owner_rows

SET_FIELDS = ("managed_by", "owner_key", "set_member", "set_digest")
"""The bookkeeping columns an apply writes beside the member's fields."""


def snapshot(schedule: Schedule, digest: str | None = None) -> Snapshot:
    """What a plan records of a row, compared again when the plan is applied (``digest``:
    the row's :attr:`Schedule.digest` when the caller has it already)."""
    return (
        schedule.digest if digest is None else digest,
        schedule.owner_key,
        schedule.set_digest,
        schedule.managed_by,
        schedule.enabled,
    )


def field_changes(row: Schedule, member: Schedule) -> dict[str, FieldChange]:
    """``{field: (old, new)}`` of the input fields a member's schedule changes on ``row``."""
    old, new = set_fields(row.to_row()), set_fields(member.to_row())
    return {k: (old[k], new[k]) for k in new if old.get(k) != new[k]}


def _same(row: Schedule, current: str, member: ScheduleSetMember) -> bool:
    """Whether the owner's ``row`` is the member as last applied (equal digests: equal fields,
    without comparing them one by one)."""
    return (
        current == member.digest
        and row.set_digest == member.digest
        and row.set_member == member.member
    )


def _past_at(member: ScheduleSetMember) -> str:
    return (
        f"{member.source}: {member.past_at}: {member.schedule.at!r} is in the past "
        "(allowed only with missed_fire_policy: run_once)"
    )


def _member_change(
    owner: str, member: ScheduleSetMember, row: Schedule | None, *, adopt: bool
) -> ScheduleSetChange:
    base = ScheduleSetChange(owner=owner, member=member.member, name=member.name, action="create")
    if row is None:
        if member.past_at is not None:
            return replace(base, action="error", detail=_past_at(member))
        return replace(base, target=member)
    current = row.digest  # once per row: it hashes every input field
    base = replace(base, schedule_id=row.id, seen=snapshot(row, current))
    if row.owner_key == owner and _same(row, current, member):
        return replace(base, action="unchanged")
    if row.owner_key is not None and row.owner_key != owner:
        return replace(
            base,
            action="error",
            detail=f"the name is held by owner {row.owner_key!r} (schedule {row.id})",
        )
    changes = field_changes(row, member.schedule)
    if row.owner_key is None:
        if not adopt:
            return replace(
                base,
                action="error",
                detail=f"the name is held by an unowned schedule ({row.id}, managed_by "
                f"{row.managed_by}); --adopt takes it if its behaviour matches",
            )
        if changes:
            return replace(
                base,
                action="error",
                detail=f"cannot adopt the unowned schedule {row.id}: it differs in "
                f"{', '.join(changes)}",
            )
        return replace(
            base,
            action="update",
            fields={"managed_by": (row.managed_by, "set"), "owner_key": (None, owner)},
            detail=f"adopt schedule {row.id} (its behaviour matches; id and history kept)",
            target=member,
        )
    if not changes and row.set_digest == member.digest and row.set_member == member.member:
        return replace(base, action="unchanged")
    if member.past_at is not None and "at" in changes:
        return replace(base, action="error", detail=_past_at(member))
    detail = "" if changes else "record the apply (fields already match)"
    if changes and row.set_digest is not None and row.digest != row.set_digest:
        detail = "drifted: edited outside the set since its last apply; the file's version wins"
    return replace(
        base,
        action="update",
        fields=changes,
        detail=detail,
        target=member,
    )


async def _absent_change(
    conn: aiosqlite.Connection, owner: str, row: Schedule, *, prune: bool, force: bool
) -> ScheduleSetChange:
    base = ScheduleSetChange(
        owner=owner,
        member=row.set_member or row.name,
        name=row.name,
        action="unchanged",
        schedule_id=row.id,
        seen=snapshot(row),
    )
    if not prune:
        if not row.enabled:
            return replace(
                base, action="unchanged", detail="absent from the documents; already disabled"
            )
        return replace(
            base, action="disable", detail="absent from the documents (--prune deletes it)"
        )
    running = tuple(await running_run_ids(conn, row.id))
    if running and not force:
        return replace(
            base,
            action="error",
            detail=f"cannot delete: {len(running)} run(s) running ({', '.join(running)}); "
            "--force cancels them first",
        )
    detail = "absent from the documents"
    if running:
        detail += f"; its {len(running)} running run(s) are cancelled with it"
    return replace(base, action="delete", detail=detail, running=running, force=force)


async def plan_schedule_sets(
    conn: aiosqlite.Connection,
    owners: Sequence[str],
    members: Sequence[ScheduleSetMember],
    *,
    adopt: bool = False,
    prune: bool = False,
    force: bool = False,
) -> ScheduleSetPlan:
    """The plan of applying ``members`` (a valid report's) for the ``owners`` its documents
    declare, against the rows on ``conn``; nothing is written.

    ``adopt`` takes unowned rows whose behaviour matches; ``prune`` deletes the owners' rows
    the documents no longer hold (instead of disabling them); ``force`` plans such a delete
    even while a run of it runs.
    """
    changes: list[ScheduleSetChange] = []
    for owner in owners:
        rows = await owner_rows(conn, owner)
        by_name = {row.name: row for row in rows}
        mine = [m for m in members if m.owner == owner]
        named = {m.name for m in mine}
        for member in mine:
            changes.append(_member_change(owner, member, by_name.get(member.name), adopt=adopt))
        for row in rows:
            if row.owner_key == owner and row.name not in named:
                changes.append(await _absent_change(conn, owner, row, prune=prune, force=force))
    return ScheduleSetPlan(owners=tuple(owners), changes=tuple(changes))
