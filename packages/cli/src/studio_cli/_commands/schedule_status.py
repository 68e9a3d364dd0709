"""``studio schedule status ID [--wait] [--json]``: does this schedule work? One screen, and
an exit code a script can test.

Exit codes: 0 healthy, 1 failing, 2 overdue or never fired, 3 running (a top-level run is in
flight; with ``--wait`` the command waits for it and exits by its result: 0 completed, 1
failed or timed out, else by the verdict after it), 4 no such schedule (one line on stderr).
A disabled schedule exits 0 when its last run completed, else 2.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from .._context import open_db, resolve_db_path, run_async
from .._errors import CliError
from .._output import emit_json, fmt_time, say
from ._common import SCHEDULE_COLUMNS, db_option, json_option

if TYPE_CHECKING:
    from studio_scheduler_core import ScheduleHealth, ScheduleStatus

LIST_COLUMNS = (*SCHEDULE_COLUMNS, "HEALTH", "LAST")
"""``schedule list``'s columns: the schedule's, its health verdict and its last run's status."""

EXIT_HEALTHY, EXIT_FAILING, EXIT_QUIET, EXIT_RUNNING, EXIT_UNKNOWN = 0, 1, 2, 3, 4
_BY_VERDICT = {
    "healthy": EXIT_HEALTHY,
    "failing": EXIT_FAILING,
    "overdue": EXIT_QUIET,
    "never_fired": EXIT_QUIET,
}
_BY_RUN = {"completed": EXIT_HEALTHY, "failed": EXIT_FAILING, "timed_out": EXIT_FAILING}
WAIT_POLL_SECONDS = 0.5


def health_cells(health: ScheduleHealth | None) -> list[str]:
    """The HEALTH and LAST cells of ``schedule list``."""
    if health is None:
        return ["-", "-"]
    return [health.health, health.last_status or "-"]


def exit_code(status: ScheduleStatus) -> int:
    """The exit code of a status (``running`` first, then the verdict)."""
    if status.running_run_ids:
        return EXIT_RUNNING
    verdict = status.health.health
    if verdict == "disabled":
        return EXIT_HEALTHY if status.health.last_status == "completed" else EXIT_QUIET
    return _BY_VERDICT.get(verdict, EXIT_QUIET)


async def _read(db_path: object, schedule: str, wait: bool) -> tuple[ScheduleStatus, int | None]:
    import asyncio

    from studio_scheduler_core import (
        ScheduleNotFound,
        SchedulerSettings,
        ScheduleService,
        read_run_status,
        read_schedule_status,
    )

    async with open_db(db_path) as conn:  # type: ignore[arg-type]
        try:
            row = await ScheduleService(conn, settings=SchedulerSettings()).resolve(schedule)
        except ScheduleNotFound:
            raise CliError(f"no schedule {schedule!r}", exit_code=EXIT_UNKNOWN) from None
        status = await read_schedule_status(conn, row.id, now=time.time())
        if not (wait and status.running_run_ids):
            return status, None
        waited = status.running_run_ids[0]
        while True:
            run = await read_run_status(conn, waited)
            if run is None or run.status not in ("queued", "running", "retry_wait"):
                break
            await asyncio.sleep(WAIT_POLL_SECONDS)
        after = await read_schedule_status(conn, row.id, now=time.time())
        ended = None if run is None else _BY_RUN.get(run.status)
        return after, ended


def _show(status: ScheduleStatus) -> None:
    h = status.health
    say(f"schedule   {status.name} ({status.schedule_id})")
    streak = f" ({h.consecutive_failures} consecutive failures)" if h.consecutive_failures else ""
    say(f"health     {h.health}{streak}")
    last = status.last_run
    if last is None:
        say("last run   -")
    else:
        took = "-" if last.duration_seconds is None else f"{last.duration_seconds}s"
        parts = [last.status, last.reason_code or "-", f"took {took}", fmt_time(last.ended_at)]
        if last.error_class:
            parts.append(f"error {last.error_class}")
        if last.exit_code is not None:
            parts.append(f"exit {last.exit_code}")
        say(f"last run   {'  '.join(parts)}  ({last.id})")
        for line in last.stderr_tail:
            say(f"  stderr | {line}")
    say(f"next fire  {fmt_time(h.next_fire_at)}")
    rate = "-" if h.success_rate_7d is None else f"{h.success_rate_7d:.0%}"
    p50 = "-" if h.duration_p50_7d is None else f"≤{h.duration_p50_7d}s"
    p95 = "-" if h.duration_p95_7d is None else f"≤{h.duration_p95_7d}s"
    say(f"7 days     success {rate}, p50 {p50}, p95 {p95}")
    partial = " (partial: some runs reported no usage)" if h.spend_partial else ""
    say(f"spend      ${h.spend_usd:.4f}, {h.spend_tokens} tokens{partial}")
    if h.remaining_runs is not None:
        say(f"remaining  {h.remaining_runs} runs")
    if status.running_run_ids:
        say(f"running    {', '.join(status.running_run_ids)}")


@click.command("status")
@click.argument("schedule")
@click.option("--wait", is_flag=True, help="Wait for a running run to end; exit by its result.")
@db_option
@json_option
def status(schedule: str, wait: bool, db: str | None, as_json: bool) -> None:
    """Does SCHEDULE (id or name) work? Its verdict, last run, next fire, streak, 7-day rate.

    \b
    Exit codes: 0 healthy, 1 failing, 2 overdue or never fired, 3 running,
    4 no such schedule. With --wait, a running run is waited for and the exit
    code is its result (0 completed, 1 failed or timed out).

    \b
    Example:
      studio schedule status nightly --wait
    """
    db_path = resolve_db_path(db, existing=True)
    found, ended = run_async(lambda: _read(db_path, schedule, wait))
    if as_json:
        emit_json(found.to_json())
    else:
        _show(found)
    code = ended if ended is not None else exit_code(found)
    # SystemExit passes through main() as is (click's Exit is swallowed without standalone)
    sys.exit(code)
