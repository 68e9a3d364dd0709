"""Operator and consumer calls on PostgreSQL: ack, retry, purge, and the read views.

The steps are the SQLite path's own (``studio_outbox._operations``, ``studio_outbox._queries``):
the same checks, the same guarded transitions, the same errors, run by this package's
PostgreSQL driver on a psycopg ``AsyncConnection`` or an asyncpg connection. Only the backlog
query has a PostgreSQL text (SQLite's names its indexes); the list pages order by the
``rowid`` column PostgreSQL's table has since migration 6.
"""

from __future__ import annotations

from typing import Any

from studio_state import Clock, system_clock

from .._constants import DISPATCH_STATUSES
from .._operations import ack_steps, check_dispatch_id, purge_steps, retry_steps
from .._queries import count_steps, dedup_steps, get_steps, list_steps, page_steps
from ._drive import PgSteps, fetch, run_async, run_in_transaction_async


async def ack_dispatch(
    conn: Any,
    dispatch_id: str,
    token: str,
    *,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> bool:
    """:func:`studio_outbox.ack_dispatch` on PostgreSQL (joins an open transaction)."""
    dispatch_id = check_dispatch_id(dispatch_id)
    return await run_in_transaction_async(conn, ack_steps(dispatch_id, token, clock, actor))


async def retry_dispatch(
    conn: Any,
    dispatch_id: str,
    *,
    clock: Clock = system_clock,
    actor: str | None = None,
) -> None:
    """:func:`studio_outbox.retry_dispatch` on PostgreSQL (joins an open transaction)."""
    dispatch_id = check_dispatch_id(dispatch_id)
    await run_in_transaction_async(conn, retry_steps(dispatch_id, clock, actor))


async def purge_dispatch(
    conn: Any, dispatch_id: str, *, clock: Clock = system_clock, actor: str | None = None
) -> None:
    """:func:`studio_outbox.purge_dispatch` on PostgreSQL (joins an open transaction)."""
    dispatch_id = check_dispatch_id(dispatch_id)
    await run_in_transaction_async(conn, purge_steps(dispatch_id, clock, actor))


async def get_dispatch(conn: Any, dispatch_id: str) -> dict[str, Any] | None:
    """:func:`studio_outbox.get_dispatch` on PostgreSQL: one row, no ack token, or None."""
    return await run_async(conn, get_steps(dispatch_id))


async def dispatch_id_for_dedup_key(conn: Any, dedup_key: str) -> str | None:
    """:func:`studio_outbox.dispatch_id_for_dedup_key` on PostgreSQL: the id a key names."""
    return await run_async(conn, dedup_steps(dedup_key))


async def list_dispatches(
    conn: Any,
    *,
    status: str | None = None,
    kind: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """:func:`studio_outbox.list_dispatches` on PostgreSQL: newest enqueued first."""
    return await run_async(conn, list_steps(status, kind, limit, offset))


async def page_dispatches(
    conn: Any,
    *,
    status: str | None = None,
    kind: str | None = None,
    limit: int = 100,
    offset: int = 0,
    before: int | None = None,
) -> tuple[list[dict[str, Any]], int | None]:
    """:func:`studio_outbox.page_dispatches` on PostgreSQL: a page and the keyset after it."""
    return await run_async(conn, page_steps(status, kind, limit, offset, before))


async def count_dispatches(conn: Any, *, status: str | None = None, kind: str | None = None) -> int:
    """:func:`studio_outbox.count_dispatches` on PostgreSQL (from the counters' rows)."""
    return await run_async(conn, count_steps(status, kind))


async def dispatch_backlog(
    conn: Any, *, now: float | None = None, clock: Clock = system_clock
) -> dict[str, Any]:
    """:func:`studio_outbox.dispatch_backlog` on PostgreSQL: due rows, oldest due time and
    every status's count."""
    return await run_async(conn, _backlog_steps(clock() if now is None else now))


def _backlog_steps(at: float) -> PgSteps[dict[str, Any]]:
    due = (
        yield from fetch(
            "SELECT count(*) AS n, min(next_attempt_at) AS oldest FROM dispatch_outbox "
            "WHERE status IN ('pending', 'delivering') AND next_attempt_at <= ?",
            (at,),
        )
    )[0]
    by_status = dict.fromkeys(DISPATCH_STATUSES, 0)
    counts = yield from fetch(
        "SELECT status, sum(n) AS n FROM dispatch_outbox_counts GROUP BY status"
    )
    for row in counts:
        by_status[row["status"]] = int(row["n"])
    return {"due": int(due["n"]), "oldest_due_at": due["oldest"], "by_status": by_status}


async def operator_ack_dispatch(
    conn: Any, dispatch_id: str, *, actor: str, clock: Clock = system_clock
) -> bool:
    """:func:`studio_outbox.operator_ack_dispatch` on PostgreSQL (joins an open transaction)."""
    from .._operator_ops import operator_ack_steps

    return await run_in_transaction_async(conn, operator_ack_steps(dispatch_id, clock(), actor))


async def purge_dispatches(
    conn: Any,
    *,
    status: str,
    before: float | None = None,
    actor: str,
    dry_run: bool = False,
    clock: Clock = system_clock,
) -> int:
    """:func:`studio_outbox.purge_dispatches` on PostgreSQL (each batch its own transaction)."""
    from .._operator_ops import check_purge_filter, count_purgeable_steps, purge_batch_steps

    status, before = check_purge_filter(status, before)
    if dry_run:
        return int(await run_async(conn, count_purgeable_steps(status, before)))
    total = 0
    while True:
        deleted = await run_in_transaction_async(
            conn, purge_batch_steps(status, before, clock(), actor)
        )
        total += deleted
        if deleted == 0:
            return total
