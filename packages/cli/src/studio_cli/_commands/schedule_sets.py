"""``studio schedule validate|plan|apply|export``: schedules kept as ``ScheduleSet`` files.

Files and folders (a folder's ``*.yaml``/``*.yml`` files, in name order) are checked together:
every problem is printed on stderr, one line each (``FILE: PATH: message``), exit 1. ``plan``
prints one line per member (the action in capitals) and the ``Plan: …`` summary; ``apply``
writes the plan in one transaction; ``export`` writes a document ``apply`` accepts. Exit codes:
0 ok, 1 invalid or refused (one line per error on stderr), 2 ``plan --exit-code`` with changes.
The command allow-list and the registered projects come from the settings the server reads.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from .._context import open_db, resolve_db_path, run_async, scheduler_settings
from .._errors import EXIT_ERROR, EXIT_USAGE, CliError, one_line
from .._output import emit_json, say
from ._common import db_option, json_option

if TYPE_CHECKING:
    from pathlib import Path

    from studio_scheduler_core import (
        SchedulerSettings,
        ScheduleSetApplied,
        ScheduleSetPlan,
        ScheduleSetReport,
    )


def _report_json(report: ScheduleSetReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "files": list(report.files),
        "members": [
            {
                "owner": m.owner,
                "member": m.member,
                "name": m.name,
                "digest": m.digest,
                "file": m.source,
                "fields": dict(m.fields),
            }
            for m in report.members
        ],
        "errors": [p.to_json() for p in report.problems],
    }


@click.command("validate")
@click.argument("paths", metavar="FILE…", nargs=-1, required=True)
@json_option
def validate(paths: tuple[str, ...], as_json: bool) -> None:
    """Check ScheduleSet documents (files, or folders of *.yaml/*.yml) without a database.

    Every problem is reported at once, one line each on stderr, and the command exits 1;
    --json also prints the whole report (members with their digests, errors) on stdout.
    """
    from studio_scheduler_core import validate_schedule_sets

    report = validate_schedule_sets(paths, settings=scheduler_settings())
    if as_json:
        emit_json(_report_json(report))
    elif report.ok:
        for member in report.members:
            say(f"ok {member.name} ({member.source}) {member.digest[:12]}")
        say(f"{len(report.members)} schedule(s) in {len(report.files)} file(s) are valid.")
    if not report.ok:
        for problem in report.problems:
            sys.stderr.write(one_line(str(problem)) + "\n")
        sys.stderr.flush()
        sys.exit(EXIT_ERROR)


def _fail(lines: list[str]) -> None:
    for line in lines:
        sys.stderr.write(one_line(line) + "\n")
    sys.stderr.flush()
    sys.exit(EXIT_ERROR)


def _checked(paths: tuple[str, ...]) -> tuple[ScheduleSetReport, SchedulerSettings]:
    """The valid report of ``paths`` (an invalid one exits 1, one line per problem)."""
    from studio_scheduler_core import validate_schedule_sets

    settings = scheduler_settings()
    report = validate_schedule_sets(paths, settings=settings)
    if not report.ok:
        _fail([str(p) for p in report.problems])
    return report, settings


def _plan(
    db_path: Path | str, report: ScheduleSetReport, adopt: bool, prune: bool, force: bool
) -> ScheduleSetPlan:
    from studio_scheduler_core import plan_schedule_sets

    async def _run() -> ScheduleSetPlan:
        async with open_db(db_path) as conn:
            return await plan_schedule_sets(
                conn, report.owners, report.members, adopt=adopt, prune=prune, force=force
            )

    return run_async(_run)


def _print_plan(plan: ScheduleSetPlan) -> None:
    for change in plan.changes:
        say(str(change))
    say(plan.summary())


def _set_flags(func: Any) -> Any:
    for option in reversed(
        (
            click.argument("paths", metavar="FILE…", nargs=-1, required=True),
            click.option("--adopt", is_flag=True, help="Take unowned schedules that match."),
            click.option("--prune", is_flag=True, help="Delete owned schedules not in the files."),
            click.option("--force", is_flag=True, help="With --prune: cancel running runs."),
            db_option,
            json_option,
        )
    ):
        func = option(func)
    return func


@click.command("plan")
@_set_flags
@click.option("--exit-code", is_flag=True, help="Exit 2 when the plan has changes (for CI).")
def plan(
    paths: tuple[str, ...],
    adopt: bool,
    prune: bool,
    force: bool,
    db: str | None,
    as_json: bool,
    exit_code: bool,
) -> None:
    """Show what applying ScheduleSet documents would change; nothing is written.

    One line per member: CREATE, UPDATE (fields old -> new), UNCHANGED, DISABLE, DELETE or
    ERROR, then the summary. Exit 1 when the plan holds errors; with --exit-code, 2 when it
    has changes (0: nothing to do).
    """
    report, _ = _checked(paths)
    result = _plan(resolve_db_path(db), report, adopt, prune, force)
    if as_json:
        emit_json(result.to_json())
    else:
        _print_plan(result)
    if result.errors:
        _fail([str(e) for e in result.errors])
    if exit_code and result.has_changes:
        sys.exit(EXIT_USAGE)


@click.command("apply")
@_set_flags
def apply(
    paths: tuple[str, ...], adopt: bool, prune: bool, force: bool, db: str | None, as_json: bool
) -> None:
    """Apply ScheduleSet documents: the whole plan in one transaction, or nothing.

    Refused (exit 1, nothing written) when the plan holds an error or a schedule changed
    since the plan was read ("changed since plan; re-run"). Applying the same files again
    writes nothing. Every change is recorded with the actor set:<owner>; with --prune
    --force the running runs of deleted schedules are cancelled in the same transaction.
    """
    from studio_scheduler_core import ScheduleSetChanged, apply_schedule_plan

    report, settings = _checked(paths)
    db_path = resolve_db_path(db)
    result = _plan(db_path, report, adopt, prune, force)
    if result.errors:
        if not as_json:
            _print_plan(result)
        _fail([str(e) for e in result.errors])

    async def _apply() -> ScheduleSetApplied:
        import time

        from studio_scheduler_core import AdhocRunService

        async with open_db(db_path) as conn:
            runs = AdhocRunService(conn, settings=settings)
            return await apply_schedule_plan(
                conn,
                result,
                timezone=settings.timezone,
                clock=time.time,
                stop_process=runs.stop_process,
            )

    try:
        applied = run_async(_apply)
    except ScheduleSetChanged as exc:
        _fail([str(exc)])
    summary = (
        f"Applied: {applied.created} created, {applied.updated} updated, "
        f"{applied.disabled} disabled, {applied.deleted} deleted."
    )
    if applied.cancelled:
        summary += f" Cancelled running: {', '.join(applied.cancelled)}."
    if as_json:
        emit_json({**result.to_json(), "applied": applied.__dict__ | {"writes": applied.writes}})
        return
    _print_plan(result)
    say(summary)


@click.command("export")
@click.option("--owner", help="The owner key whose schedules are exported.")
@click.option("--unowned", is_flag=True, help="Export every schedule no set owns.")
@click.option("--name", default="unowned", show_default=True, help="Owner key for --unowned.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to FILE.")
@db_option
def export(owner: str | None, unowned: bool, name: str, output: str | None, db: str | None) -> None:
    """Write the schedules an owner holds (or every unowned one) as a ScheduleSet document
    that apply accepts unchanged. What a document cannot express is listed as comments at
    its top and on stderr."""
    from studio_scheduler_core import ScheduleSetExport, export_schedule_set

    if (owner is None) == (not unowned):
        raise CliError("give exactly one of --owner OWNER or --unowned")
    db_path = resolve_db_path(db, existing=True)
    timezone = scheduler_settings().timezone

    async def _export() -> ScheduleSetExport:
        async with open_db(db_path) as conn:
            return await export_schedule_set(
                conn, owner=None if unowned else owner, timezone=timezone, name=name
            )

    try:
        result = run_async(_export)
    except ValueError as exc:
        raise CliError(f"--owner/--name: {exc}") from None
    text = result.to_yaml()
    if output is None:
        sys.stdout.write(text)
    else:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text)
    for schedule, notes in result.notes.items():
        for note in notes:
            sys.stderr.write(one_line(f"note: {schedule}: {note}") + "\n")
