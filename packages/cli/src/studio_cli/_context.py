"""Where the CLI finds its database, server and settings (the only env reads in the CLI).

Database: ``--db``, else ``LIONAGI_STUDIO_DB``, else ``~/.lionagi/studio/state.db``; a SQLite
file path or a ``postgresql://`` URL (checked as the server checks it).
Server (for ``trigger``): ``--url``, else ``LIONAGI_STUDIO_URL``, else ``http://127.0.0.1:8765``;
token from ``LIONAGI_STUDIO_AUTH_TOKEN``. Scheduler settings (timezone, command allow-list, …)
come from studio-api's ``StudioSettings`` so direct-database commands validate exactly as the
server does. Heavy modules are imported inside the functions, never at import time.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ._errors import EXIT_INTERRUPTED, CliError

if TYPE_CHECKING:
    import aiosqlite

    from studio_scheduler_core import SchedulerSettings, ScheduleService

T = TypeVar("T")

DB_ENV = "LIONAGI_STUDIO_DB"
URL_ENV = "LIONAGI_STUDIO_URL"
TOKEN_ENV = "LIONAGI_STUDIO_AUTH_TOKEN"  # noqa: S105 - the variable's name, not a secret
INVOCATION_ENV = "LIONAGI_INVOCATION_ID"
SYNCHRONOUS_ENV = "LIONAGI_STUDIO_SYNCHRONOUS"
NODE_ID_ENV = "LIONAGI_STUDIO_NODE_ID"
DEFAULT_URL = "http://127.0.0.1:8765"


def default_db_path() -> Path:
    return Path("~/.lionagi/studio/state.db").expanduser()


def resolve_db_path(option: str | None, *, existing: bool = False) -> Path | str:
    """``--db`` if given, else ``$LIONAGI_STUDIO_DB``, else the default under ``~/.lionagi``.

    A SQLite file is a :class:`Path`; a ``postgresql://`` URL is returned as a string, checked
    as ``LIONAGI_STUDIO_DB`` is on the server (a bad one is an error naming its source).
    ``existing`` (read commands, and those that change rows that must already exist): a path
    with no database file is refused, instead of creating its directory and an empty database
    that would then report "nothing here" (a PostgreSQL database is always there: its tables
    are created on first use).
    """
    if option:
        text, source = option, "--db"
    elif os.environ.get(DB_ENV, "").strip():
        text, source = os.environ[DB_ENV].strip(), DB_ENV
    else:
        text, source = str(default_db_path()), "the default"
    from studio_state import is_postgres

    if is_postgres(text):
        from studio_api import SettingsError, StudioSettings

        try:
            url = StudioSettings.from_env({}, db=text).db
        except SettingsError as exc:
            raise CliError(f"{source}: {exc.problems.get(DB_ENV, exc.message)}") from None
        return str(url)
    path = Path(text).expanduser()
    if path.is_dir():
        raise CliError(f"database path is a directory: {path} (from {source})")
    if existing and not path.is_file():
        raise CliError(f"Studio database not found: {path} (from {source})")
    return path


def synchronous_mode() -> str:
    """``$LIONAGI_STUDIO_SYNCHRONOUS`` (``full``, the default, or ``normal``), validated.

    Anything else is a one-line error naming the variable, before any database is opened.
    """
    from studio_state import InvalidSetting, check_synchronous

    raw = os.environ.get(SYNCHRONOUS_ENV, "")
    if not raw.strip():
        return "full"
    try:
        return check_synchronous(raw)
    except InvalidSetting:
        raise CliError(
            f"invalid settings: {SYNCHRONOUS_ENV}: must be 'full' or 'normal' (got {raw!r})"
        ) from None


def resolve_server(url_option: str | None) -> tuple[str, str]:
    """The server's base URL (no trailing slash or ``/api``) and where it came from."""
    if url_option:
        raw, source = url_option, "--url"
    elif os.environ.get(URL_ENV, "").strip():
        raw, source = os.environ[URL_ENV].strip(), URL_ENV
    else:
        raw, source = DEFAULT_URL, f"the default ({URL_ENV} is not set)"
    url = raw.rstrip("/")
    if url.endswith("/api"):
        url = url[: -len("/api")]
    if "://" not in url:
        raise CliError(f"{source}: {raw!r} is not a URL (expected e.g. {DEFAULT_URL})")
    return url, source


def configured_node_id() -> str | None:
    """``$LIONAGI_STUDIO_NODE_ID`` (this machine's node, when it names one), else ``None``."""
    node = os.environ.get(NODE_ID_ENV, "").strip()
    return node or None


def auth_token() -> str | None:
    token = os.environ.get(TOKEN_ENV, "").strip()
    return token or None


def scheduler_settings(db: Path | str | None = None) -> SchedulerSettings:
    """The ``SchedulerSettings`` the server would build from this environment.

    Built by studio-api's ``StudioSettings`` (``SettingsError`` naming the variable on a bad
    value), so the CLI validates schedules exactly as the server does. ``db`` (the command's
    database) overrides ``LIONAGI_STUDIO_DB``: where run logs are depends on it.
    """
    from studio_api import StudioSettings

    studio = StudioSettings()
    if db is not None:
        studio = studio.with_overrides(db=db)
    settings: SchedulerSettings = studio.to_scheduler_settings()
    return settings


def run_async(factory: Callable[[], Awaitable[T]]) -> T:
    """Run one coroutine to completion; Ctrl-C becomes a one-line error, exit 130."""

    import asyncio

    async def _main() -> T:
        return await factory()

    try:
        return asyncio.run(_main())
    except KeyboardInterrupt:
        raise CliError("interrupted", exit_code=EXIT_INTERRUPTED) from None


def check_openable(path: Path) -> None:
    """A :class:`CliError` naming ``path`` when SQLite cannot open (or create) it.

    Checked before the asynchronous connection is opened: SQLite's own message ("unable to open
    database file") does not say which file, and a failed asynchronous open leaves a worker
    thread that reports into the closed event loop.
    """
    import sqlite3

    if not path.parent.is_dir():
        return  # the connection creates its directory (an OSError there names the path)
    try:
        sqlite3.connect(path).close()
    except sqlite3.Error as exc:
        raise CliError(f"cannot open the database {path}: {exc}") from None


@asynccontextmanager
async def open_db(
    db_path: Path | str, *, outbox_only: bool = False
) -> AsyncIterator[aiosqlite.Connection]:
    """Open the database and apply every migration the command needs (idempotent).

    ``outbox_only`` migrates just studio-state and the outbox tables (dispatch commands work on
    a standalone producer's SQLite database too); otherwise, and always on PostgreSQL,
    scheduler-core migrates everything.
    """
    from studio_state import connect, is_postgres

    if not is_postgres(db_path):
        check_openable(Path(db_path))
    async with connect(db_path, synchronous=synchronous_mode()) as conn:
        # On PostgreSQL the outbox's tables come with scheduler-core's schema (its PostgreSQL
        # form is the outbox's own, created through the connection's psycopg session).
        if outbox_only and not is_postgres(db_path):
            from studio_outbox import ensure_schema as outbox_schema

            await outbox_schema(conn)
        else:
            from studio_scheduler_core import ensure_schema

            await ensure_schema(conn)
        yield conn


@asynccontextmanager
async def open_service(
    db_path: Path | str, *, validating: bool = True
) -> AsyncIterator[ScheduleService]:
    """A ``ScheduleService`` over the database.

    ``validating`` commands (create, update, enable, preview) get the server's settings from
    the environment, so they validate exactly as the API does. Pure reads and removals (list,
    show, runs, run, disable, delete) do not depend on any setting: they get the library
    defaults and skip loading studio-api (about a second of imports).
    """
    from studio_scheduler_core import SchedulerSettings, ScheduleService

    settings = scheduler_settings() if validating else SchedulerSettings()
    async with open_db(db_path) as conn:
        yield ScheduleService(conn, settings=settings, managed_by="cli")
