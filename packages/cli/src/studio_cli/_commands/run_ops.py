"""``studio schedule logs`` and ``studio schedule cancel``: a run's output, and stopping it.

Both work on the database directly (no server needed), for every run kind (scheduled,
follow-up, ad-hoc). The log file is found through the same settings the server reads
(``LIONAGI_STUDIO_RUN_LOG_DIR``, else ``runs/`` beside the database); a log another node keeps
is asked of that node's API (``remote_log``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .._context import open_db, resolve_db_path, run_async, scheduler_settings
from .._errors import CliError
from .._output import emit_json, note, say
from ._actor import cli_actor
from ._common import db_option, json_option, record_json
from .remote_log import node_url, print_remote, stored_log

if TYPE_CHECKING:
    from studio_scheduler_core import Run

FOLLOW_SECONDS = 0.2
FAILURE_TAIL_BYTES = 2048
"""How much of a failed run's log ``--wait`` prints."""
_TERMINAL = frozenset({"completed", "failed", "timed_out", "cancelled", "skipped"})


def log_file(db_path: Path | str, run_id: str) -> str:
    """The run's log file under the server's settings (``CliError`` for a malformed id)."""
    from studio_scheduler_core import run_log_path

    try:
        return run_log_path(str(db_path), scheduler_settings(db_path), run_id)
    except ValueError:
        raise CliError(f"run not found: {run_id}") from None


def _status(db_path: Path | str, run_id: str) -> dict[str, Any]:
    async def _get() -> dict[str, Any]:
        from studio_scheduler_core import read_run_status

        async with open_db(db_path) as conn:
            row = await read_run_status(conn, run_id)
        if row is None:
            raise CliError(f"run not found: {run_id}")
        return dataclasses.asdict(row)

    return run_async(_get)


def log_tail(path: str, size: int = FAILURE_TAIL_BYTES) -> str:
    """The last ``size`` bytes of a run log, as text (empty when there is none)."""
    from studio_scheduler_core import read_run_log

    return read_run_log(path, tail=size).decode("utf-8", errors="replace")


def print_failure(summary: str | None, tail: str) -> None:
    """The reason summary and the log tail of a run that did not complete (stderr)."""
    if summary:
        note(f"reason: {summary}")
    if tail:
        note(f"--- last {len(tail.encode())} bytes of the run log ---")
        sys.stderr.write(tail if tail.endswith("\n") else tail + "\n")
        sys.stderr.flush()


def _write(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _follow(db_path: Path | str, run_id: str, path: str, offset: int) -> dict[str, Any]:
    from studio_launcher import RUN_LOG_HEAD_BYTES

    bound = scheduler_settings().run_log_bytes
    head = RUN_LOG_HEAD_BYTES if bound >= 2 * RUN_LOG_HEAD_BYTES else bound // 2
    while True:
        run = _status(db_path, run_id)
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < offset:  # the bounded log was rewritten past its head
                    offset = min(head, size)
                handle.seek(offset)
                data = handle.read(size - offset)
        except FileNotFoundError:
            data = b""
        if data:
            _write(data)
            offset += len(data)
        if run["status"] in _TERMINAL:
            return run
        time.sleep(FOLLOW_SECONDS)


@click.command("logs")
@click.argument("run_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing output until the run ends.")
@click.option(
    "--tail", type=click.IntRange(min=1), metavar="BYTES", help="Only the last BYTES bytes."
)
@db_option
def logs(run_id: str, follow: bool, tail: int | None, db: str | None) -> None:
    """Print RUN_ID's output (stdout and stderr), of any run kind.

    \b
    Examples:
      studio schedule logs 3f2a9c1b7d4e
      studio schedule logs 3f2a9c1b7d4e --follow
    """
    db_path = resolve_db_path(db, existing=True)
    path = log_file(db_path, run_id)
    run = _status(db_path, run_id)
    stored = stored_log(db_path, run, path, tail)
    if stored is not None:  # a finished run's copy in the database (PostgreSQL)
        _write(stored)
        if follow:
            note(f"run {run_id} {run['status']} ({run.get('status_reason_code') or '-'})")
        return
    url = node_url(db_path, run, path)
    if url is not None:  # another node ran it and keeps its log: ask that node
        print_remote(run, url, tail=tail, follow=follow)
        return
    from studio_scheduler_core import read_run_log

    data = read_run_log(path, tail=tail)
    _write(data)
    if follow:
        run = _follow(db_path, run_id, path, len(data) if tail is None else os.path.getsize(path))
        note(f"run {run_id} {run['status']} ({run.get('status_reason_code') or '-'})")


def cancel_runs(db_path: Path | str, run_ids: list[str]) -> list[Run]:
    """Cancel each run (any kind) on the database; the cancelled runs."""

    async def _cancel() -> list[Run]:
        from studio_scheduler_core import AdhocRunService, RunNotCancellable

        done = []
        async with open_db(db_path) as conn:
            service = AdhocRunService(conn, settings=scheduler_settings())
            for run_id in run_ids:
                try:
                    done.append(await service.cancel(run_id, actor=cli_actor()))
                except RunNotCancellable:
                    continue  # it ended meanwhile
        return done

    return run_async(_cancel)


def cancel_runs_strict(db_path: Path | str, run_id: str) -> tuple[Run]:
    """Cancel one run; ``RunNotFound`` / ``RunNotCancellable`` reach the caller."""

    async def _cancel() -> tuple[Run]:
        from studio_scheduler_core import AdhocRunService

        async with open_db(db_path) as conn:
            service = AdhocRunService(conn, settings=scheduler_settings())
            return (await service.cancel(run_id, actor=cli_actor()),)

    return run_async(_cancel)


@click.command("cancel")
@click.argument("run_id")
@db_option
@json_option
def cancel(run_id: str, db: str | None, as_json: bool) -> None:
    """Cancel a queued, running or waiting run of any kind (scheduled, follow-up, ad-hoc,
    a planned retry or a buffered occurrence).

    A running run's process group gets SIGTERM, then SIGKILL after 5 s; descendants too. A
    waiting run (retry_wait, waiting_dependency) never starts.
    """
    db_path = resolve_db_path(db, existing=True)

    before = _status(db_path, run_id)["status"]
    (row,) = cancel_runs_strict(db_path, run_id)
    if as_json:
        emit_json(record_json(row))
    else:
        say(f"cancelled run {row.id} (was {before})")
