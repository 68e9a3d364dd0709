"""The schedule service: create/validate/update/enable/disable/delete and reads.

Used by the API and the CLI alike, on any connection; it never talks to a running engine
except through ``on_change`` (the engine's ``wake``).
"""

from __future__ import annotations

import builtins
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiosqlite

from studio_state import Clock, lock_row, lock_rows, new_id, record_transition, write_transaction

from .._exceptions import (
    RunNotFound,
    ScheduleHasRunningRuns,
    ScheduleNameTaken,
    ScheduleNotFound,
    ScheduleValidationError,
)
from .._records.codec import encode_schedule
from .._records.run import Run, RunWithChain
from .._records.schedule import ManagedBy, Schedule
from .._records.schedule_input import ScheduleRow
from .._records.vocab import ENGINE_ACTOR
from .._settings import SchedulerSettings
from .._triggers.cadence import first_fire_at, preview_times
from . import store
from .backfill import backfill
from .enabling import KEEP, Keep, check_enable, cursor_change
from .jitter import JitteredEntry, with_jitter
from .store import (
    RUN_PAGE_KEY,
    drop_buffered,
    get_schedule,
    page_runs,
    set_enabled,
)
from .validation import CREATE_FIELDS, check_disable_reason, normalize

Schedules = list[Schedule]
"""A page of schedules (an alias: the class below has a method named ``list``)."""
Runs = list[Run]
"""A page of runs."""

SERVICE_ACTOR = ENGINE_ACTOR
"""The actor of a change made without naming an operator: Studio's own."""
UPDATED = "schedule.updated.operator"
"""A schedule's stored fields changed (``metadata.fields`` names them)."""

_CADENCE_FIELDS = frozenset(
    {"trigger_type", "cron_expr", "interval_sec", "poll_interval_sec", "timezone", "at"}
)


_LIVE = ("queued", "running")


def _cursor_moved(current: Mapping[str, Any], diff: Mapping[str, Any]) -> dict[str, str | None]:
    """A changed GitHub cursor's old and new values, for its transition's metadata."""
    if "github_cursor" not in diff:
        return {}
    return {"old": current.get("github_cursor"), "new": diff["github_cursor"]}


class ScheduleService:
    """Create/validate/update/enable/disable/delete schedules, and read schedules and runs.

    ``managed_by`` (``api`` or ``cli``: the door it serves) is recorded on what it creates."""

    def __init__(
        self,
        conn: aiosqlite.Connection,
        *,
        settings: SchedulerSettings,
        clock: Clock = time.time,
        on_change: Callable[[], None] | None = None,
        managed_by: ManagedBy = "api",
    ) -> None:
        self._conn = conn
        self._managed_by = managed_by
        self._settings = settings
        self._clock = clock
        self._on_change = on_change

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()

    async def validate(self, data: Mapping[str, Any]) -> ScheduleRow:
        """The normalised row ``create`` would store (with ``next_fire_at``); nothing written."""
        now = self._clock()
        row = normalize(data, settings=self._settings, now=now)
        row["next_fire_at"] = first_fire_at(row, now=now, timezone=self._settings.timezone)
        return row

    async def create(self, data: Mapping[str, Any], *, actor: str | None = None) -> Schedule:
        """Validate and store a new schedule (``data``: its input fields); return it as stored.

        ``actor`` (here and in every write below): the operator making the change, named on
        its transition row (default: the service's own name). Raises
        :class:`ScheduleValidationError` (naming the field) or :class:`ScheduleNameTaken`;
        nothing is written then.
        """
        now = self._clock()
        row = normalize(data, settings=self._settings, now=now)
        row["next_fire_at"] = first_fire_at(row, now=now, timezone=self._settings.timezone)
        row.update({"id": new_id(), "poller_consecutive_401": 0, "managed_by": self._managed_by})
        row.update({"created_at": now, "updated_at": now})
        async with write_transaction(self._conn):
            if await store.name_taken(self._conn, row["name"]):
                raise ScheduleNameTaken(row["name"])
            await store.insert_schedule(self._conn, encode_schedule(row))
            await record_transition(
                self._conn,
                entity_type="schedule",
                entity_id=row["id"],
                status="enabled" if row["enabled"] else "disabled",
                reason_code="schedule.created",
                reason_summary=f"schedule {row['name']!r} created",
                actor=actor or SERVICE_ACTOR,
                now=now,
            )
        self._changed()
        return await self.get(row["id"])

    async def get(self, schedule_id: str) -> Schedule:
        """The schedule; :class:`ScheduleNotFound` when there is none."""
        schedule = await get_schedule(self._conn, schedule_id)
        if schedule is None:
            raise ScheduleNotFound(schedule_id)
        return schedule

    async def resolve(self, id_or_name: str) -> Schedule:
        """The schedule with this id, else with this name; :class:`ScheduleNotFound`."""
        schedule = await get_schedule(self._conn, id_or_name)
        if schedule is not None:
            return schedule
        named = await store.get_schedule_named(self._conn, id_or_name)
        if named is None:
            raise ScheduleNotFound(id_or_name)
        return named

    async def list(
        self,
        *,
        enabled: bool | None = None,
        trigger_type: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[Schedules, int]:
        """``(schedules, total)`` ordered by creation, with optional filters and paging."""
        return await store.page_schedules(
            self._conn, enabled=enabled, trigger_type=trigger_type, limit=limit, offset=offset
        )

    async def update(
        self,
        schedule_id: str,
        changes: Mapping[str, Any],
        *,
        actor: str | None = None,
        github_cursor: str | None | Keep = KEEP,
    ) -> Schedule:
        """Apply ``changes`` (create-model fields) after validating the merged row, in one
        transaction.

        A change of any stored field writes a ``schedule.updated.operator`` transition row
        naming the changed fields (``metadata.fields``); enabling or disabling writes its own
        ``schedule.enabled.manual``/``schedule.disabled.manual`` row instead. ``github_cursor``
        (its stored form, from ``normalize_cursor``; ``None`` resets it) sets a github_poll
        schedule's cursor (once the changes apply) with the other fields; it clears the
        stored ETag."""
        if not isinstance(changes, Mapping):
            raise ScheduleValidationError("changes", "must be an object")
        for key in changes:
            if key not in CREATE_FIELDS:
                raise ScheduleValidationError(str(key), "unknown field")
        now = self._clock()
        async with write_transaction(self._conn):
            await lock_row(self._conn, "schedules", schedule_id)  # PostgreSQL: read, then write
            current = (await self.get(schedule_id)).to_row()
            row = normalize(changes, settings=self._settings, now=now, base=current)
            if row["name"] != current["name"] and await store.name_taken(
                self._conn, row["name"], other_than=schedule_id
            ):
                raise ScheduleNameTaken(row["name"])
            was_enabled = bool(current["enabled"])
            enabling = row["enabled"] and not was_enabled
            if enabling:
                await check_enable(self._conn, current, row, now=now)
            cadence = any(k in changes and changes[k] != current.get(k) for k in _CADENCE_FIELDS)
            if cadence or enabling:
                row["next_fire_at"] = first_fire_at(row, now=now, timezone=self._settings.timezone)
            if row["enabled"] != was_enabled:
                row["disabled_reason"] = None if row["enabled"] else "manual"
            new_values = encode_schedule(row)
            old_values = encode_schedule(current)
            diff = {k: v for k, v in new_values.items() if old_values.get(k) != v}
            if github_cursor is not KEEP:
                diff.update(cursor_change(row, current, github_cursor))
            if "github_repo" in diff or "github_filter" in diff or "github_cursor" in diff:
                diff["github_etag"] = None  # the stored ETag answered another listing
            if diff:
                fields = sorted(k for k in diff if k != "github_etag")
                diff["updated_at"] = now
                await store.update_schedule(self._conn, schedule_id, diff)
                if row["enabled"] == was_enabled:
                    state = "enabled" if was_enabled else "disabled"
                    await record_transition(
                        self._conn,
                        entity_type="schedule",
                        entity_id=schedule_id,
                        previous_status=state,
                        status=state,
                        reason_code=UPDATED,
                        reason_summary=f"changed: {', '.join(fields)}",
                        actor=actor or SERVICE_ACTOR,
                        metadata={"fields": fields, **_cursor_moved(current, diff)},
                        now=now,
                    )
            if row["enabled"] != was_enabled:
                if not row["enabled"]:
                    await drop_buffered(self._conn, schedule_id, now=now)
                await record_transition(
                    self._conn,
                    entity_type="schedule",
                    entity_id=schedule_id,
                    previous_status="enabled" if was_enabled else "disabled",
                    status="enabled" if row["enabled"] else "disabled",
                    reason_code="schedule.enabled.manual"
                    if row["enabled"]
                    else "schedule.disabled.manual",
                    actor=actor or SERVICE_ACTOR,
                    metadata={"fields": sorted(k for k in diff if k != "updated_at")},
                    now=now,
                )
        self._changed()
        return await self.get(schedule_id)

    async def enable(self, schedule_id: str, *, actor: str | None = None) -> Schedule:
        """Enable the schedule (re-validated; refused when max_runs or the budget is used up).

        ``next_fire_at`` is re-armed from now for every trigger type.
        """
        record = await self.get(schedule_id)
        if record.enabled:
            return record
        now = self._clock()
        schedule = record.to_row()
        base = {k: schedule.get(k) for k in CREATE_FIELDS}
        await check_enable(self._conn, schedule, schedule, now=now)
        normalize(base, settings=self._settings, now=now)
        await set_enabled(
            self._conn,
            schedule_id,
            enabled=True,
            reason_code="schedule.enabled.manual",
            next_fire_at=first_fire_at(schedule, now=now, timezone=self._settings.timezone),
            actor=actor or SERVICE_ACTOR,
            now=now,
        )
        self._changed()
        return await self.get(schedule_id)

    async def disable(
        self, schedule_id: str, reason: str | None = None, *, actor: str | None = None
    ) -> Schedule:
        """Disable the schedule (idempotent). In-flight runs are not interrupted."""
        text = check_disable_reason(reason)
        schedule = await self.get(schedule_id)
        if schedule.enabled:
            await set_enabled(
                self._conn,
                schedule_id,
                enabled=False,
                reason_code="schedule.disabled.manual",
                reason_summary=text,
                disabled_reason=text or "manual",
                actor=actor or SERVICE_ACTOR,
                now=self._clock(),
            )
        return await self.get(schedule_id)

    async def running_run_ids(self, schedule_id: str) -> builtins.list[str]:
        """Ids of the schedule's runs (follow-ups included) that are ``running`` now."""
        return await store.running_run_ids(self._conn, schedule_id)

    async def delete(
        self, schedule_id: str, *, refuse_running: bool = False, actor: str | None = None
    ) -> None:
        """Delete the schedule and its runs (their invocations and sessions stay).

        With ``refuse_running`` a schedule that has running runs is kept and
        :class:`ScheduleHasRunningRuns` raised (cancel them first, then delete).
        """
        now = self._clock()
        async with write_transaction(self._conn):
            # PostgreSQL: a fire or claim in flight (it writes these rows) is waited for.
            await lock_row(self._conn, "schedules", schedule_id)
            await lock_rows(self._conn, "schedule_runs", "schedule_id", schedule_id, statuses=_LIVE)
            schedule = await self.get(schedule_id)
            if refuse_running:
                running = await self.running_run_ids(schedule_id)
                if running:
                    raise ScheduleHasRunningRuns(schedule_id, running)
            await store.delete_schedule(self._conn, schedule_id)
            await record_transition(
                self._conn,
                entity_type="schedule",
                entity_id=schedule_id,
                previous_status="enabled" if schedule.enabled else "disabled",
                status="deleted",
                reason_code="schedule.deleted.manual",
                reason_summary=f"schedule {schedule.name!r} deleted",
                actor=actor or SERVICE_ACTOR,
                now=now,
            )
        self._changed()

    async def list_runs(
        self,
        schedule_id: str,
        *,
        status: str | None = None,
        limit: int = 100,
        offset: int = 0,
        after: Sequence[Any] | None = None,
    ) -> tuple[Runs, int]:
        """``(runs, total)`` of one schedule, newest first by :data:`RUN_PAGE_KEY`
        (:class:`ScheduleNotFound`). ``after``, the key of the previous page's last run, seeks
        past it instead of skipping ``offset`` rows."""
        await self.get(schedule_id)
        return await page_runs(
            self._conn,
            "schedule_id = ?",
            [schedule_id],
            key=RUN_PAGE_KEY,
            status=status,
            limit=limit,
            offset=offset,
            after=after,
            counted=schedule_id,
        )

    async def get_run(self, run_id: str) -> RunWithChain:
        """One run with ``chain_children``: every follow-up below it, by depth."""
        run = await store.get_run(self._conn, run_id)
        if run is None:
            raise RunNotFound(run_id)
        children = tuple(await store.chain_runs(self._conn, run_id))
        values = {f.name: getattr(run, f.name) for f in dataclasses.fields(run)}
        return RunWithChain(**values, chain_children=children)

    async def backfill(
        self, schedule_id: str, start: Any, end: Any, *, actor: str | None = None
    ) -> int:
        """Queue every occurrence in [start, end) (ISO 8601 or epoch; ``start < end <= now``,
        at most 1000) to run through the gates with ``trigger_context.backfill``; returns how
        many runs were queued. :class:`FireRefused` when the schedule is disabled."""
        schedule = await self.get(schedule_id)
        queued = await backfill(
            self._conn,
            schedule.to_row(),
            start,
            end,
            now=self._clock(),
            timezone=self._settings.timezone,
            actor=actor,
        )
        self._changed()
        return queued

    async def preview(self, schedule_id: str, n: int = 5) -> builtins.list[JitteredEntry]:
        """The schedule's next ``n`` fire times (UTC and the schedule's zone) with the jitter
        delay of each (``jitter_sec``, 0 without jitter)."""
        schedule = await self.get(schedule_id)
        zone = schedule.timezone or self._settings.timezone
        times = preview_times(
            trigger_type=schedule.trigger_type,
            cron_expr=schedule.cron_expr,
            interval_sec=schedule.interval_sec,
            poll_interval_sec=schedule.poll_interval_sec,
            timezone=zone,
            start=self._clock(),
            n=n,
            first=schedule.next_fire_at,
        )
        return with_jitter(schedule.to_row(), times, timezone=self._settings.timezone)
