"""Row decoding and encoding: JSON columns, booleans, column lists (all from the records)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .column import bool_columns, columns, json_columns, list_columns
from .run import Run
from .schedule import Schedule
from .vocab import FIRED_END_STATUSES

SCHEDULE_JSON_COLUMNS = json_columns(Schedule)
RUN_JSON_COLUMNS = json_columns(Run)
SCHEDULE_COLUMNS = columns(Schedule)
_SCHEDULE_LIST_COLUMNS = list_columns(Schedule)
_SCHEDULE_BOOL_COLUMNS = bool_columns(Schedule)

ColumnValue = str | int | float | None
"""A value a column is written with or guarded on, as stored (a JSON column's text; ``None``:
NULL)."""

ROWID = "rowid"
"""On PostgreSQL, the identity column standing in for SQLite's rowid: ``SELECT *`` returns it
there, and it is no field of a schedule or a run."""

TERMINAL_RUN_STATUSES = FIRED_END_STATUSES
"""Statuses of a run that fired and ended (``skipped`` never fired)."""


def _loads(value: Any) -> Any:
    if value is None:
        return None
    if value == "[]":
        return []
    if isinstance(value, str | bytes):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def dumps(value: Any) -> str | None:
    """Encode a JSON column value (``None`` stays SQL NULL)."""
    if value is None:
        return None
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def decode_schedule(row: Mapping[str, Any]) -> dict[str, Any]:
    """A ``schedules`` row as the public dict: JSON decoded, booleans as bools (NULL kept)."""
    out = dict(row)
    out.pop(ROWID, None)
    for column in SCHEDULE_JSON_COLUMNS:
        if column in out:
            out[column] = _loads(out[column])
    for column in _SCHEDULE_BOOL_COLUMNS:
        if column in out and out[column] is not None:
            out[column] = bool(out[column])
    for column in _SCHEDULE_LIST_COLUMNS:
        if column in out and out[column] is None:
            out[column] = []
    return out


def encode_schedule(row: Mapping[str, Any]) -> dict[str, ColumnValue]:
    """A normalised schedule dict as column values for an INSERT/UPDATE."""
    out: dict[str, ColumnValue] = {}
    for column, value in row.items():
        if column in SCHEDULE_JSON_COLUMNS:
            out[column] = dumps(value)
        elif column in _SCHEDULE_BOOL_COLUMNS:
            # A nullable boolean (``pause_on_failure``) keeps NULL: unset is not false.
            out[column] = None if value is None else int(bool(value))
        else:
            out[column] = value
    return out


def decode_run(row: Mapping[str, Any]) -> dict[str, Any]:
    """A ``schedule_runs`` row as the public dict (JSON columns decoded)."""
    out = dict(row)
    out.pop(ROWID, None)
    for column in RUN_JSON_COLUMNS:
        if column in out:
            out[column] = _loads(out[column])
    return out


def schedule_record(row: Mapping[str, Any]) -> Schedule:
    """A ``schedules`` row (as read) as its :class:`Schedule` record."""
    return Schedule.from_row(decode_schedule(row))


def run_record(row: Mapping[str, Any]) -> Run:
    """A ``schedule_runs`` row (as read) as its :class:`Run` record."""
    return Run.from_row(decode_run(row))
