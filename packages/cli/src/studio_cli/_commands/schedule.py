"""``studio schedule …``: schedules and their runs, directly on the database.

Every command goes through ``studio_scheduler_core.ScheduleService`` (the API's service), so a
schedule is validated the same way whichever door it comes in by. Only ``trigger`` talks to the
running server (see ``trigger.py``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

import click

from .._context import open_db, open_service, resolve_db_path, run_async, scheduler_settings
from .._output import emit_json, fmt_time, print_record, print_rows, say
from .._types import VocabularyChoice
from ._actor import cli_actor
from ._common import (
    RUN_COLUMNS,
    confirm_or_abort,
    db_option,
    json_option,
    limit_option,
    offset_option,
    print_run,
    print_schedule,
    record_json,
    run_rows,
    schedule_rows,
    show_schedule_result,
)
from .run_ops import cancel, cancel_runs, logs
from .schedule_backfill import backfill
from .schedule_edit import create, update
from .schedule_github import github_cursor
from .schedule_preview import preview
from .schedule_sets import apply, export, plan, validate
from .schedule_status import LIST_COLUMNS, health_cells, status
from .trigger import trigger

if TYPE_CHECKING:
    from studio_scheduler_core import Run, RunWithChain, Schedule, ScheduleHealth


@click.group("schedule")
def schedule_group() -> None:
    """Manage schedules and their runs.

    SCHEDULE arguments take a schedule id or name.
    """


schedule_group.add_command(create)
schedule_group.add_command(update)
schedule_group.add_command(trigger)
schedule_group.add_command(backfill)
schedule_group.add_command(logs)
schedule_group.add_command(cancel)
schedule_group.add_command(validate)
schedule_group.add_command(status)
schedule_group.add_command(plan)
schedule_group.add_command(apply)
schedule_group.add_command(export)
schedule_group.add_command(github_cursor)
schedule_group.add_command(preview)


@schedule_group.command("list")
@click.option("--enabled/--disabled", "enabled", default=None, help="Only enabled / disabled.")
@click.option(
    "--trigger-type", type=click.Choice(["cron", "interval", "github_poll"]), help="Only this type."
)
@limit_option(100)
@offset_option
@db_option
@json_option
def list_schedules(
    enabled: bool | None,
    trigger_type: str | None,
    limit: int,
    offset: int,
    db: str | None,
    as_json: bool,
) -> None:
    """List schedules.

    \b
    Example:
      studio schedule list --enabled --json
    """
    db_path = resolve_db_path(db, existing=True)

    async def _list() -> tuple[list[Schedule], int, dict[str, ScheduleHealth]]:
        from studio_scheduler_core import SchedulerSettings, ScheduleService, read_schedule_health

        async with open_db(db_path) as conn:
            service = ScheduleService(conn, settings=SchedulerSettings())
            rows, total = await service.list(
                enabled=enabled, trigger_type=trigger_type, limit=limit, offset=offset
            )
            health = await read_schedule_health(conn, [r.id for r in rows], now=time.time())
            return rows, total, health

    rows, total, health = run_async(_list)
    if as_json:
        emit_json(
            {
                "schedules": [
                    {**record_json(r), **(health[r.id].to_json() if r.id in health else {})}
                    for r in rows
                ],
                "total": total,
                "limit": limit,
                "offset": offset,
            }
        )
        return
    table = [
        [*cells, *health_cells(health.get(r.id))]
        for r, cells in zip(rows, schedule_rows(rows), strict=True)
    ]
    print_rows(LIST_COLUMNS, table, empty="no schedules")
    if rows and total > len(rows):
        say(f"showing {offset + 1}-{offset + len(rows)} of {total} (use --offset/--limit)")


@schedule_group.command("show")
@click.argument("schedule")
@db_option
@json_option
def show(schedule: str, db: str | None, as_json: bool) -> None:
    """Show every field of SCHEDULE (id or name).

    \b
    Example:
      studio schedule show nightly
    """
    db_path = resolve_db_path(db, existing=True)

    async def _show() -> Schedule:
        async with open_service(db_path, validating=False) as service:
            return await service.resolve(schedule)

    row = run_async(_show)
    if as_json:
        emit_json(record_json(row))
    else:
        print_schedule(row)


@schedule_group.command("enable")
@click.argument("schedule")
@db_option
@json_option
def enable(schedule: str, db: str | None, as_json: bool) -> None:
    """Enable SCHEDULE; its next fire time is recomputed from now."""
    db_path = resolve_db_path(db, existing=True)

    async def _enable() -> Schedule:
        async with open_service(db_path) as service:
            row = await service.resolve(schedule)
            return await service.enable(row.id, actor=cli_actor())

    show_schedule_result("Enabled", run_async(_enable), as_json=as_json)


@schedule_group.command("disable")
@click.argument("schedule")
@click.option("--reason", help="Why (kept on the schedule and in its history).")
@db_option
@json_option
def disable(schedule: str, reason: str | None, db: str | None, as_json: bool) -> None:
    """Disable SCHEDULE (runs already in flight are not stopped)."""
    db_path = resolve_db_path(db, existing=True)

    async def _disable() -> Schedule:
        async with open_service(db_path, validating=False) as service:
            row = await service.resolve(schedule)
            return await service.disable(row.id, reason, actor=cli_actor())

    show_schedule_result("Disabled", run_async(_disable), as_json=as_json)


@schedule_group.command("delete")
@click.argument("schedule")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--force", is_flag=True, help="Cancel its running runs first (else refused).")
@db_option
@json_option
def delete(schedule: str, yes: bool, force: bool, db: str | None, as_json: bool) -> None:
    """Delete SCHEDULE and its run history (refused while a run runs, unless --force)."""
    db_path = resolve_db_path(db, existing=True)

    async def _resolve() -> tuple[Schedule, list[str]]:
        async with open_service(db_path, validating=False) as service:
            row = await service.resolve(schedule)
            return row, await service.running_run_ids(row.id)

    row, running = run_async(_resolve)
    confirm_or_abort(f"delete schedule {row.id} ({row.name}) and its runs", yes)
    if running and force:
        cancel_runs(db_path, running)

    async def _delete() -> Schedule:
        async with open_service(db_path, validating=False) as service:
            await service.delete(row.id, refuse_running=True, actor=cli_actor())
            return row

    run_async(_delete)
    if as_json:
        emit_json({"deleted": True, "id": row.id, "name": row.name})
    else:
        say(f"Deleted schedule {row.id} ({row.name})")


@schedule_group.command("runs")
@click.argument("schedule")
@click.option("--status", type=VocabularyChoice("RUN_STATUSES"), help="Only runs with this status.")
@limit_option(20)
@offset_option
@db_option
@json_option
def runs(
    schedule: str, status: str | None, limit: int, offset: int, db: str | None, as_json: bool
) -> None:
    """List the runs of SCHEDULE, newest first.

    \b
    Example:
      studio schedule runs nightly --status failed --limit 5
    """
    db_path = resolve_db_path(db, existing=True)

    async def _runs() -> tuple[list[Run], int]:
        async with open_service(db_path, validating=False) as service:
            row = await service.resolve(schedule)
            return await service.list_runs(row.id, status=status, limit=limit, offset=offset)

    rows, total = run_async(_runs)
    if as_json:
        runs_json = [record_json(r) for r in rows]
        emit_json({"runs": runs_json, "total": total, "limit": limit, "offset": offset})
        return
    print_rows(RUN_COLUMNS, run_rows(rows), empty="no runs")
    if rows and total > len(rows):
        say(f"showing {offset + 1}-{offset + len(rows)} of {total} (use --offset/--limit)")


@schedule_group.command("run")
@click.argument("run_id")
@db_option
@json_option
def run(run_id: str, db: str | None, as_json: bool) -> None:
    """Show one run (with its follow-up runs)."""
    db_path = resolve_db_path(db, existing=True)

    async def _run() -> RunWithChain:
        async with open_service(db_path, validating=False) as service:
            return await service.get_run(run_id)

    row = run_async(_run)
    if as_json:
        emit_json(record_json(row))
    else:
        print_run(row)


@schedule_group.command("limits")
@db_option
@json_option
def limits(db: str | None, as_json: bool) -> None:
    """Show the concurrency caps and the runs holding a slot now."""
    db_path = resolve_db_path(db, existing=True)
    settings = scheduler_settings()

    async def _limits() -> dict[str, Any]:
        from studio_scheduler_core import read_slot_holders

        async with open_db(db_path) as conn:
            holders, adhoc = await read_slot_holders(conn)
        return {
            "max_scheduled_concurrent": settings.max_scheduled_concurrent,
            "in_flight": len(holders),
            "holders": [dataclasses.asdict(holder) for holder in holders],
            "max_adhoc_concurrent": settings.max_adhoc_concurrent,
            "adhoc_in_flight": adhoc,
        }

    result = run_async(_limits)
    if as_json:
        emit_json(result)
        return
    print_record(
        {
            "scheduled slots": f"{result['in_flight']} / {result['max_scheduled_concurrent']}",
            "ad-hoc slots": f"{result['adhoc_in_flight']} / {result['max_adhoc_concurrent']}",
        },
        title="limits",
    )
    rows = [
        [str(h["run_id"]), str(h["schedule_id"]), str(h["schedule_name"]), fmt_time(h["since"])]
        for h in result["holders"]
    ]
    print_rows(("RUN", "SCHEDULE", "NAME", "SINCE"), rows, empty="no run holds a slot")
