"""``studio db …``: backup, vacuum and checkpoint of the database, while Studio serves."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from .._context import open_db, resolve_db_path, run_async
from .._errors import CliError
from .._output import emit_json, say
from ._actor import cli_actor
from ._common import db_option, json_option

#: Exit status of a command that does not apply to PostgreSQL (it says what to use instead).
EXIT_POSTGRES = 2


@click.group("db")
def db_group() -> None:
    """Back up, vacuum and checkpoint the Studio database (SQLite; safe while Studio serves)."""


def _sqlite_path(db: str | None, what: str) -> Path:
    target = resolve_db_path(db, existing=True)
    if isinstance(target, str):
        from studio_api._setting_values import shown_target

        if what == "backup":
            click.echo(
                "This is a PostgreSQL database: back it up with pg_dump, e.g.\n"
                f"  pg_dump --format=custom --file=studio.dump '{shown_target(target)}'\n"
                "(the password is not shown; pg_dump reads it from PGPASSWORD or ~/.pgpass)"
            )
        else:
            click.echo(
                f"This is a PostgreSQL database: its server runs {what} on its own "
                "(autovacuum, checkpoints); use VACUUM / CHECKPOINT in psql to force one."
            )
        sys.exit(EXIT_POSTGRES)
    return target


@db_group.command("backup")
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@db_option
@json_option
def backup(dest: Path, db: str | None, as_json: bool) -> None:
    """Copy the database to DEST (a new file) online, then check the copy.

    Uses SQLite's backup API: the copy is one consistent snapshot even while Studio writes.
    Exit 1 when the copy fails PRAGMA integrity_check; on PostgreSQL, prints the pg_dump
    command to use and exits 2.
    """
    source = _sqlite_path(db, "backup")
    from studio_api import _maintenance

    try:
        result = _maintenance.backup(source, dest.expanduser())
    except _maintenance.MaintenanceError as exc:
        raise CliError(str(exc)) from None
    if as_json:
        emit_json({"source": str(source), **result})
    else:
        say(
            f"Backed up {source} to {result['dest']} ({result['bytes']} bytes, "
            f"{result['tables']} tables, integrity_check ok)"
        )


def _maintain(action: str, db: str | None, as_json: bool) -> None:
    path = _sqlite_path(db, action)
    from studio_api import _maintenance

    async def _migrate() -> None:
        async with open_db(path):  # the audit row needs the current schema
            pass

    run_async(_migrate)

    run = _maintenance.vacuum if action == "vacuum" else _maintenance.checkpoint
    try:
        result: dict[str, Any] = run(path, actor=cli_actor())
    except _maintenance.MaintenanceError as exc:
        raise CliError(str(exc)) from None
    if as_json:
        emit_json(result)
    elif action == "vacuum":
        say(f"Vacuumed {path}: {result['bytes_before']} -> {result['bytes_after']} bytes")
    else:
        say(
            f"Checkpointed {path}: {result['checkpointed_pages']} of {result['wal_pages']} "
            "WAL pages written back, WAL truncated"
        )


@db_group.command("vacuum")
@db_option
@json_option
def vacuum(db: str | None, as_json: bool) -> None:
    """Rewrite the database file without its free pages (exit 1 when it is busy)."""
    _maintain("vacuum", db, as_json)


@db_group.command("checkpoint")
@db_option
@json_option
def checkpoint(db: str | None, as_json: bool) -> None:
    """Write the WAL back into the database file and truncate it (exit 1 when busy)."""
    _maintain("checkpoint", db, as_json)
