"""``studio schedule github-cursor SCHEDULE [--reset | --set VALUE]``: a github_poll
schedule's cursor, shown or changed on the database directly.

The cursor is the key of the newest pull-request event handled (``updated_at#number``).
``--reset`` clears it: the next poll replays what GitHub's listing holds. ``--set`` moves it:
the events at or before it are skipped. Without either, the cursor is printed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from .._context import open_db, open_service, resolve_db_path, run_async
from .._output import emit_json, say
from ._actor import cli_actor
from ._common import db_option, json_option

if TYPE_CHECKING:
    from studio_scheduler_core import Schedule


@click.command("github-cursor")
@click.argument("schedule")
@click.option("--reset", is_flag=True, help="Clear the cursor: the next poll replays the backlog.")
@click.option("--set", "value", metavar="VALUE", help="Set the cursor (YYYY-MM-DDTHH:MM:SSZ[#N]).")
@db_option
@json_option
def github_cursor(
    schedule: str, reset: bool, value: str | None, db: str | None, as_json: bool
) -> None:
    """Show or change the GitHub cursor of SCHEDULE (a github_poll schedule).

    \b
    Examples:
      studio schedule github-cursor prs
      studio schedule github-cursor prs --reset
      studio schedule github-cursor prs --set 2027-01-05T09:00:00Z
    """
    from .._errors import CliError

    if reset and value is not None:
        raise CliError("--reset and --set are exclusive")
    changing = reset or value is not None
    db_path = resolve_db_path(db, existing=True)

    async def _run() -> Schedule:
        from studio_scheduler_core import set_github_cursor

        async with open_service(db_path, validating=False) as service:
            current = await service.resolve(schedule)
        if not changing:
            if current.trigger_type != "github_poll":
                raise CliError(
                    f"invalid value for SCHEDULE: {current.name!r} is a "
                    f"{current.trigger_type} schedule, not github_poll"
                )
            return current
        async with open_db(db_path) as conn:
            return await set_github_cursor(
                conn, current.id, None if reset else value, now=time.time(), actor=cli_actor()
            )

    result = run_async(_run)
    if as_json:
        emit_json({"id": result.id, "name": result.name, "github_cursor": result.github_cursor})
        return
    if changing:
        say(f"{result.name}: github_cursor {'reset' if reset else 'set'}")
    click.echo(result.github_cursor or "(none: the next poll replays the listing)")
