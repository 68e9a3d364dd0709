"""Where a run's log file lives, and reading it back (whole, or its last bytes)."""

from __future__ import annotations

import os
import re

from .._settings import SchedulerSettings

_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def run_log_dir(db_path: str, settings: SchedulerSettings) -> str:
    """The run log directory: ``settings.run_log_dir``, else ``runs/`` beside the database."""
    if settings.run_log_dir:
        return os.path.abspath(settings.run_log_dir)
    return os.path.join(os.path.dirname(os.path.abspath(db_path)), "runs")


def run_log_path(db_path: str, settings: SchedulerSettings, run_id: str) -> str:
    """``<run log dir>/<run_id>.log`` (``ValueError`` for an id that is not a plain name)."""
    if not _RUN_ID.fullmatch(run_id):
        raise ValueError(f"not a run id: {run_id!r}")
    return os.path.join(run_log_dir(db_path, settings), f"{run_id}.log")


def read_run_log(path: str, *, tail: int | None = None) -> bytes:
    """The log's bytes (the last ``tail`` of them when given); empty when there is none yet."""
    try:
        with open(path, "rb") as handle:
            if tail is not None:
                size = os.fstat(handle.fileno()).st_size
                handle.seek(max(0, size - tail))
            return handle.read()
    except FileNotFoundError:
        return b""
