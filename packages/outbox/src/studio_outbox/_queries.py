"""Read-only views of the outbox: one row, lists, counts, backlog, next due time.

Ack tokens are secrets between the outbox and the consumer: no view returns them, neither
the ``ack_token`` column nor the copy inside the payload.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiosqlite

from studio_state import Clock, system_clock

from ._constants import DISPATCH_STATUSES
from ._drive import Fetch, Steps, run_read
from ._exceptions import InvalidArgument
from ._record import PUBLIC_DISPATCH_COLUMNS

_PUBLIC_COLUMNS = ", ".join(PUBLIC_DISPATCH_COLUMNS)


def public_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored row as the views return it: payload decoded, no ack token."""
    out = dict(row)
    payload = out.get("payload")
    if isinstance(payload, str):
        decoded = json.loads(payload)
        if isinstance(decoded, dict):
            decoded.pop("ack_token", None)
        out["payload"] = decoded
    out["ack_required"] = bool(out["ack_required"])
    return out


def _filters(status: object, kind: object) -> tuple[str, list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if status is not None:
        if status not in DISPATCH_STATUSES:
            raise InvalidArgument(
                "status", f"must be one of {', '.join(DISPATCH_STATUSES)}, got {status!r}"
            )
        where.append("status = ?")
        params.append(status)
    if kind is not None:
        if not isinstance(kind, str) or not kind:
            raise InvalidArgument("kind", "must be a non-empty string")
        where.append("kind = ?")
        params.append(kind)
    return (f" WHERE {' AND '.join(where)}" if where else ""), params


def _count_arg(field: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(field, f"must be an int, got {type(value).__name__}")
    if value < minimum:
        raise InvalidArgument(field, f"must be at least {minimum}, got {value}")
    return value


def get_steps(dispatch_id: str) -> Steps[dict[str, Any] | None]:
    rows = yield Fetch(
        f"SELECT {_PUBLIC_COLUMNS} FROM dispatch_outbox WHERE id = ?", (dispatch_id,)
    )
    return public_row(rows[0]) if rows else None


def dedup_steps(dedup_key: str) -> Steps[str | None]:
    rows = yield Fetch("SELECT id FROM dispatch_outbox WHERE dedup_key = ?", (dedup_key,))
    return str(rows[0]["id"]) if rows else None


def list_steps(
    status: str | None, kind: str | None, limit: int, offset: int
) -> Steps[list[dict[str, Any]]]:
    where, params = _filters(status, kind)
    limit = _count_arg("limit", limit, 1)
    offset = _count_arg("offset", offset, 0)
    rows = yield Fetch(
        f"SELECT {_PUBLIC_COLUMNS} FROM dispatch_outbox{where} "
        "ORDER BY rowid DESC LIMIT ? OFFSET ?",
        (*params, limit, offset),
    )
    return [public_row(row) for row in rows]


def page_steps(
    status: str | None, kind: str | None, limit: int, offset: int, before: int | None
) -> Steps[tuple[list[dict[str, Any]], int | None]]:
    where, params = _filters(status, kind)
    limit = _count_arg("limit", limit, 1)
    offset = _count_arg("offset", offset, 0)
    if before is not None:
        before = _count_arg("before", before, 1)
        if offset:
            raise InvalidArgument("before", "cannot be combined with a non-zero offset")
        # The status/kind indexes end in the rowid, so this seeks on the index the order uses.
        where = f"{where} AND rowid < ?" if where else " WHERE rowid < ?"
        params = [*params, before]
    rows = yield Fetch(
        f"SELECT rowid AS page_seq, {_PUBLIC_COLUMNS} FROM dispatch_outbox{where} "
        "ORDER BY rowid DESC LIMIT ? OFFSET ?",
        (*params, limit, offset),
    )
    page = [public_row({k: v for k, v in row.items() if k != "page_seq"}) for row in rows]
    return page, (int(rows[-1]["page_seq"]) if len(rows) == limit else None)


def count_steps(status: str | None, kind: str | None) -> Steps[int]:
    # From the trigger-kept counts: the cost does not grow with the table's history.
    where, params = _filters(status, kind)
    rows = yield Fetch(
        f"SELECT coalesce(sum(n), 0) AS n FROM dispatch_outbox_counts{where}", params
    )
    return int(rows[0]["n"])


def backlog_steps(at: float) -> Steps[dict[str, Any]]:
    due_rows = yield Fetch(
        "SELECT count(*) AS n, min(next_attempt_at) AS oldest FROM dispatch_outbox "
        "INDEXED BY idx_dispatch_outbox_due "
        "WHERE status IN ('pending', 'delivering') AND next_attempt_at <= ?",
        (at,),
    )
    due = due_rows[0]
    by_status = dict.fromkeys(DISPATCH_STATUSES, 0)
    counts = yield Fetch("SELECT status, sum(n) AS n FROM dispatch_outbox_counts GROUP BY status")
    for row in counts:
        by_status[row["status"]] = int(row["n"])
    return {"due": int(due["n"]), "oldest_due_at": due["oldest"], "by_status": by_status}


def next_due_steps() -> Steps[float | None]:
    rows = yield Fetch(
        "SELECT (SELECT min(next_attempt_at) FROM dispatch_outbox "
        "INDEXED BY idx_dispatch_outbox_due WHERE status IN ('pending', 'delivering')) AS due, "
        "(SELECT min(expires_at) FROM dispatch_outbox INDEXED BY idx_dispatch_outbox_expiry "
        "WHERE status = 'pending' AND expires_at IS NOT NULL) AS expiry"
    )
    times = [t for t in (rows[0]["due"], rows[0]["expiry"]) if t is not None]
    return float(min(times)) if times else None


async def get_dispatch(conn: aiosqlite.Connection, dispatch_id: str) -> dict[str, Any] | None:
    """Return one dispatch (payload decoded to a dict, no ack token), or None."""
    return await run_read(conn, get_steps(dispatch_id))


async def dispatch_id_for_dedup_key(conn: aiosqlite.Connection, dedup_key: str) -> str | None:
    """Return the id of the dispatch enqueued under ``dedup_key`` (any status), or None.

    Inside the caller's write transaction, followed by :func:`enqueue_dispatch`, it tells a
    fresh row from a dedup hit.
    """
    return await run_read(conn, dedup_steps(dedup_key))


async def page_dispatches(
    conn: aiosqlite.Connection,
    *,
    status: str | None = None,
    kind: str | None = None,
    limit: int = 100,
    offset: int = 0,
    before: int | None = None,
) -> tuple[list[dict[str, Any]], int | None]:
    """One page of :func:`list_dispatches` and the keyset to continue: ``(rows, next_before)``.

    ``before`` is the previous page's ``next_before`` (``None``: start at the newest row, or
    ``offset`` rows past it); the query seeks past it on the index its order uses, so a deep
    page costs what the first does. ``next_before`` is ``None`` once a page comes back short.
    A ``before`` below 1, or with a non-zero ``offset``, raises :class:`InvalidArgument`
    naming ``before``.
    """
    return await run_read(conn, page_steps(status, kind, limit, offset, before))


async def list_dispatches(
    conn: aiosqlite.Connection,
    *,
    status: str | None = None,
    kind: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """Return dispatches, most recently enqueued first, optionally filtered.

    Rows have the same shape as :func:`get_dispatch` (no ack token). An unknown ``status``
    raises :class:`InvalidArgument`.
    """
    return await run_read(conn, list_steps(status, kind, limit, offset))


async def count_dispatches(
    conn: aiosqlite.Connection, *, status: str | None = None, kind: str | None = None
) -> int:
    """Return how many dispatches match the filters of :func:`list_dispatches`."""
    return await run_read(conn, count_steps(status, kind))


async def dispatch_backlog(
    conn: aiosqlite.Connection, *, now: float | None = None, clock: Clock = system_clock
) -> dict[str, Any]:
    """Return the outbox's backlog for health reporting.

    ``{"due": n, "oldest_due_at": t | None, "by_status": {status: n, …}}``: ``due`` counts
    rows a delivery pass would pick up at ``now`` (pending and due, or delivering with a
    lapsed lease), ``oldest_due_at`` is the earliest of their due times, and ``by_status``
    has every status, zero included.
    """
    return await run_read(conn, backlog_steps(clock() if now is None else now))


async def next_due_at(conn: aiosqlite.Connection) -> float | None:
    """Return the earliest time a delivery pass has work, or None when there is none.

    That is the earliest ``next_attempt_at`` of a ``pending`` or ``delivering`` row, or the
    earliest ``expires_at`` of a ``pending`` row if that comes sooner (the row expires then).
    """
    return await run_read(conn, next_due_steps())
