"""Reading the audit trail: ``status_transitions`` rows newest first, filtered."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiosqlite

from ._query import Row, fetch_all

_COLUMNS = (
    "id, entity_type, entity_id, previous_status, status, reason_code, reason_summary, "
    "actor, metadata, created_at"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TransitionFilter:
    """Which ``status_transitions`` rows to read; every ``None`` filter is left out.

    ``before`` continues a page: rows strictly older than ``(created_at, id)``.
    """

    actor: str | None = None
    entity_type: str | None = None
    entity_id: str | None = None
    since: float | None = None
    until: float | None = None
    before: tuple[float, str] | None = None


async def read_transitions(
    conn: aiosqlite.Connection, where: TransitionFilter, *, limit: int, offset: int = 0
) -> list[Row]:
    """One page of recorded status changes, newest first (``created_at``, then ``id``).

    ``since`` is inclusive and ``until`` exclusive. Rows carry their stored columns
    (``metadata`` as its JSON text).
    """
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("actor", where.actor),
        ("entity_type", where.entity_type),
        ("entity_id", where.entity_id),
    ):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if where.since is not None:
        clauses.append("created_at >= ?")
        params.append(where.since)
    if where.until is not None:
        clauses.append("created_at < ?")
        params.append(where.until)
    if where.before is not None:
        at, last_id = where.before
        clauses.append("(created_at < ? OR (created_at = ? AND id < ?))")
        params += [at, at, last_id]
    clause = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    bounds: Sequence[Any] = (*params, limit, offset)
    return await fetch_all(
        conn,
        f"SELECT {_COLUMNS} FROM status_transitions{clause} "
        "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
        bounds,
    )
