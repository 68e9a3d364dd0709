"""``studio schedule backfill``: run the occurrences of a past window on purpose."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .._context import open_service, resolve_db_path, run_async
from .._output import emit_json, say
from ._actor import cli_actor
from ._common import db_option, json_option

if TYPE_CHECKING:
    from studio_scheduler_core import Schedule


@click.command("backfill")
@click.argument("schedule")
@click.option(
    "--from",
    "start",
    required=True,
    metavar="TIME",
    help="Start of the window (inclusive): ISO 8601 or epoch seconds.",
)
@click.option(
    "--to",
    "end",
    required=True,
    metavar="TIME",
    help="End of the window (exclusive, not in the future); ISO 8601 without an offset is "
    "read in the schedule's time zone.",
)
@db_option
@json_option
def backfill(schedule: str, start: str, end: str, db: str | None, as_json: bool) -> None:
    """Queue every occurrence of SCHEDULE in [--from, --to) (at most 1000).

    The running server starts them one at a time, oldest first, each through the gates
    (budget, max_runs, the global slot), with trigger_context.backfill = true. An occurrence
    that already ran is not run again.

    \b
    Example:
      studio schedule backfill nightly --from 2026-03-01T00:00 --to 2026-03-08T00:00
    """
    db_path = resolve_db_path(db, existing=True)

    async def _backfill() -> tuple[Schedule, int]:
        async with open_service(db_path) as service:
            row = await service.resolve(schedule)
            return row, await service.backfill(row.id, start, end, actor=cli_actor())

    row, runs = run_async(_backfill)
    if as_json:
        emit_json({"schedule_id": row.id, "name": row.name, "runs": runs})
    else:
        say(f"Queued {runs} backfill run(s) of schedule {row.id} ({row.name})")
