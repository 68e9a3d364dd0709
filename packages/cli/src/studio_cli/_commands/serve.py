"""``studio serve``: run the Studio server (the FastAPI app and its scheduler) under uvicorn."""

from __future__ import annotations

import click

from .._context import DB_ENV


@click.command("serve")
@click.option("--host", help="Bind address (default $LIONAGI_STUDIO_HOST, else 127.0.0.1).")
@click.option(
    "--port", type=click.IntRange(0, 65535), help="Port (default $LIONAGI_STUDIO_PORT, else 8765)."
)
@click.option(
    "--db",
    metavar="PATH|URL",
    help=f"SQLite file or postgresql:// URL (default ${DB_ENV}, else ~/.lionagi/…).",
)
@click.option("--reload", is_flag=True, help="Restart on code changes (development).")
def serve(host: str | None, port: int | None, db: str | None, reload: bool) -> None:
    """Run the Studio server (HTTP API and scheduler).

    Serves the API on http://HOST:PORT and drives the scheduler behind it.

    \b
    Examples:
      studio serve
      studio serve --port 9000 --db ./state.db
    """
    from studio_api import run

    run(host=host, port=port, db=db, reload=reload)
