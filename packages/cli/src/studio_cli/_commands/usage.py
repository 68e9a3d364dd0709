"""``studio usage report``: a scheduled child records its usage (a ``sessions`` row).

The engine sets ``LIONAGI_INVOCATION_ID`` and ``LIONAGI_STUDIO_DB`` in every child's
environment; the report is linked to that invocation and counts against the schedule's budget.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import click

from .._context import DB_ENV, INVOCATION_ENV, open_db, run_async
from .._errors import CliError
from .._output import emit_json, say
from ._common import json_option


@click.group("usage")
def usage_group() -> None:
    """Usage evidence reported by scheduled children."""


SQLITE_INT_MAX = 2**63 - 1


@usage_group.command("report")
@click.option(
    "--status", default="completed", show_default=True, help="The session's terminal status."
)
@click.option("--input-tokens", type=click.IntRange(0, SQLITE_INT_MAX), help="Input tokens used.")
@click.option("--output-tokens", type=click.IntRange(0, SQLITE_INT_MAX), help="Output tokens used.")
@click.option("--cost-usd", type=click.FloatRange(0, 1e9), help="Cost in USD.")
@click.option("--db", metavar="PATH", help=f"Database (default ${DB_ENV}; required one way).")
@json_option
def report(
    status: str,
    input_tokens: int | None,
    output_tokens: int | None,
    cost_usd: float | None,
    db: str | None,
    as_json: bool,
) -> None:
    """Record this run's usage against $LIONAGI_INVOCATION_ID in $LIONAGI_STUDIO_DB.

    \b
    Example (inside a scheduled child):
      studio usage report --input-tokens 1200 --output-tokens 340 --cost-usd 0.021
    """
    invocation_id = os.environ.get(INVOCATION_ENV, "").strip()
    if not invocation_id:
        raise CliError(
            f"{INVOCATION_ENV} is not set: 'studio usage report' is meant to run inside a child"
            " that Studio started (the engine sets it for every scheduled run)"
        )
    raw_db = db or os.environ.get(DB_ENV, "").strip()
    if not raw_db:
        raise CliError(
            f"{DB_ENV} is not set (and no --db given): cannot tell which Studio database"
            f" invocation {invocation_id} belongs to"
        )
    if cost_usd is not None and not math.isfinite(cost_usd):
        raise CliError("--cost-usd must be a finite number")
    db_path = Path(raw_db).expanduser()
    if not db_path.is_file():
        raise CliError(f"Studio database not found: {db_path} (from {'--db' if db else DB_ENV})")

    async def _report() -> str:
        from studio_scheduler_core import report_usage

        async with open_db(db_path) as conn:
            return await report_usage(
                conn,
                invocation_id=invocation_id,
                status=status,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cost_usd=cost_usd,
            )

    session_id = run_async(_report)
    if as_json:
        emit_json({"session_id": session_id, "invocation_id": invocation_id, "status": status})
    else:
        say(f"Recorded usage for invocation {invocation_id}: session {session_id}")
